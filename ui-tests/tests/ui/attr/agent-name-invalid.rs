// Agent names become claim keys and export identifiers: whitespace and control characters
// are refused at the name.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(name = "Check out@2\n")]
enum Checkout {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
