// An enum with no variants is one error: the stubs emitted next to it add none.
use agent_core::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {}

fn main() {}
