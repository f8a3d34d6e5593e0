// A state no transition leads to is reported.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(to(Done))]
    Review,
    #[agent(terminal)]
    Done,
}

fn main() {}
