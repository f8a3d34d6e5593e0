// A terminal state runs nothing, so a budget for its visits has no effect.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal, budget(tokens = 1_000))]
    Done,
}

fn main() {}
