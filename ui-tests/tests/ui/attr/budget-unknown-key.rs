// An unknown key in `budget(...)` is reported at the key, with the keys a budget has and a
// near one when there is one.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget(token = 20_000))]
enum Flow {
    #[agent(initial, to(Done), budget(cost_micros = 500_000, max_asks = 3))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
