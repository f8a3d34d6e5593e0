// `decision_timeout_ms` bounds an ask of the model: the state must be routed by it.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done), decision_timeout_ms = 5000)]
    Start,
    #[agent(terminal, decision_timeout_ms = 5000)]
    Done,
}

fn main() {}
