// An unknown key on the enum lists the keys the enum accepts.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(max_stepz = 3, color = "blue")]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
