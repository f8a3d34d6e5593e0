// An agent has exactly one initial state.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(initial, to(Done))]
    Review,
    #[agent(terminal)]
    Done,
}

fn main() {}
