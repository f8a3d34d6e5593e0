// `budget()` sets no limit, and `budget` without a list is not a budget.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget())]
enum Flow {
    #[agent(initial, to(Done), budget)]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
