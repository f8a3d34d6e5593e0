// A key given twice is reported at its second occurrence.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done), initial)]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
