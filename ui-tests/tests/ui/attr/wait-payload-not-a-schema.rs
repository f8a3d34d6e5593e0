// The payload type of a wait is described to people by its JSON Schema: it needs one.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Approval {
    approved: bool,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, wait = "approval", wait_payload = Approval, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
