// An enum whose generated module would be a keyword (`Crate` -> `crate`): one error at the
// name, with the `module = ...` fix.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Crate {
    #[agent(initial, to(Done))]
    Open,
    #[agent(terminal)]
    Done,
}

fn main() {}
