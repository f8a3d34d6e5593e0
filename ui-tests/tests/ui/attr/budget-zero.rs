// A limit of zero can never be met: it is refused at the value, an amount as a count.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget(tokens = 0))]
enum Flow {
    #[agent(initial, to(Done), budget(asks = 2, cost = 0.000))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
