// A terminal state has no transitions.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal, to(Browsing))]
    Done,
}

fn main() {}
