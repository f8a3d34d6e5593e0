// The on_budget target must be a state of the agent; a near name is suggested.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review), on_budget = OverBugdet)]
    Browsing,
    #[agent(to(Done), on_budget = Exhausted)]
    Review,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    OverBudget,
}

fn main() {}
