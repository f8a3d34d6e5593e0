// A timer of no time waits for nothing.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer_ms = 0, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
