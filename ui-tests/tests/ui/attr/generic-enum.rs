// Generic enums are rejected with a clear message instead of a crash.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow<T> {
    #[agent(initial, to(Done))]
    Start(T),
    #[agent(terminal)]
    Done,
}

fn main() {}
