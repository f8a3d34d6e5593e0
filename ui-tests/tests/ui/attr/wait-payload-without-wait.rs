// `wait_payload` types the payload of the signal a state waits for: it needs a `wait`.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    approved: bool,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done), wait_payload = Approval)]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
