// The field of a state entered on error is built from the failure: its type must have
// `From<Failure>` (as `Failure` and `String` do).
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done), on_error = Failed)]
    Browsing,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed { code: u32 },
}

fn main() {}
