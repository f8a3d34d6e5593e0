// An enum with no variants is one error: the stubs emitted next to it add none.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {}

fn main() {}
