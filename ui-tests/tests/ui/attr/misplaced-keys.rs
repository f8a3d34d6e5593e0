// A key in the wrong place (a variant key on the enum, an enum key on a variant, `#[agent]` on a field) says where it belongs.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(initial)]
enum Flow {
    #[agent(initial, to(Done), dag)]
    Start {
        #[agent(terminal)]
        step: u32,
    },
    #[agent(terminal)]
    Done,
}

fn main() {}
