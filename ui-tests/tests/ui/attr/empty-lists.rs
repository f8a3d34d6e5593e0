// `tools()` and `to()` with nothing inside: one error each, saying to list something or
// remove the key.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools())]
enum Flow {
    #[agent(initial, tools(), to(Done))]
    Start,
    #[agent(to())]
    Middle,
    #[agent(terminal)]
    Done,
}

fn main() {}
