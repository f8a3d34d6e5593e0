// A limit set twice in `budget(...)`, and `budget(...)` given twice, are reported at the
// second occurrence.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget(asks = 3, tokens = 1_000, asks = 4))]
enum Flow {
    #[agent(initial, to(Done), budget(asks = 1), budget(tool_calls = 2))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
