// A unit state has no field to hold the time.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer = due, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
