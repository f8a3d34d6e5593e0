// Only enums can be agents.
use agent_core::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
struct Flow {
    step: u32,
}

fn main() {}
