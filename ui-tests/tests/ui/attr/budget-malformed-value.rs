// A limit that is negative, quoted, a word, or a decimal where a count belongs is reported at
// the value, with how to write it.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget(tokens = -5, cost = "0.50"))]
enum Flow {
    #[agent(initial, to(Done), budget(asks = many, tool_calls = 2.5, cost = -1.0))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
