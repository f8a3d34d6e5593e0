// An agent needs an initial state.
use agent_core::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
