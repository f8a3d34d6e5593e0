// One state cannot be both initial and terminal.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, terminal)]
    Start,
}

fn main() {}
