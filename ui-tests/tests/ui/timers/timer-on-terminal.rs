// A terminal state runs nothing, so it has nothing to wait for.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal, timer_ms = 1000)]
    Done,
}

fn main() {}
