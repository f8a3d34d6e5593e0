// A cost is kept exact in millionths of the currency: more than six decimal places is refused.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done), budget(cost = 0.0000005))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
