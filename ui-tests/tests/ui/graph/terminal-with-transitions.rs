// A terminal state has no transitions.
use agent_core::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal, to(Browsing))]
    Done,
}

fn main() {}
