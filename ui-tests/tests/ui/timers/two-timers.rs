// One timer per state: `timer_ms` or `timer = field`.
use durable_agents::Agent;
use durable_agents::timer::Deadline;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer = at, timer_ms = 1000, to(Done))]
    Start { at: Deadline },
    #[agent(terminal)]
    Done,
}

fn main() {}
