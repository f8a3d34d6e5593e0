// With `wait`, the timer is the wait's deadline: `wait_timeout_ms` beside it is a second one.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, wait = "reply", timer_ms = 60_000, wait_timeout_ms = 1000, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
