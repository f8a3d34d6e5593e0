// `timer = N` where `timer_ms = N` belongs.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer = 3000, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
