// An agent needs an initial state.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
