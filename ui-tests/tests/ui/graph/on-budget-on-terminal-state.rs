// A terminal state takes no step, so it has no `on_budget` edge.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal, on_budget = OverBudget)]
    Done,
    #[agent(terminal)]
    OverBudget,
}

fn main() {}
