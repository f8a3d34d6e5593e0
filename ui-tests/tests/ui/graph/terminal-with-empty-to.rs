// `terminal, to()`: one error for one mistake.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal, to())]
    Done,
}

fn main() {}
