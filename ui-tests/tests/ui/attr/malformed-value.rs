// A value of the wrong shape is reported at the value.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(max_steps = "ten")]
enum Flow {
    #[agent(initial, to(Done), timeout_ms = 0)]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
