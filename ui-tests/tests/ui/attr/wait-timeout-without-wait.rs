// `wait_timeout_ms` needs a `wait` to time out.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done), wait_timeout_ms = 1000)]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
