// The timer's field holds a time or a delay, not any value.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer = due, to(Done))]
    Start { due: String },
    #[agent(terminal)]
    Done,
}

fn main() {}
