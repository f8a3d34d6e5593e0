// A compensating state runs the saga at once.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done, Undo))]
    Start,
    #[agent(compensate, timer_ms = 1000, to(Done))]
    Undo,
    #[agent(terminal)]
    Done,
}

fn main() {}
