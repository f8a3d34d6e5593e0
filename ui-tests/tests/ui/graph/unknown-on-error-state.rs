// The on_error target must be a state of the agent.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done), on_error = Failure)]
    Browsing,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed,
}

fn main() {}
