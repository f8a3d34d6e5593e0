// Only enums can be agents.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
struct Flow {
    step: u32,
}

fn main() {}
