// A state entered on error is built from the failure alone: it holds one field at most.
use durable_agents::{Agent, Failure};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done), on_error = Failed)]
    Browsing,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed { reason: Failure, attempts: u32 },
}

fn main() {}
