// `route` takes only `llm`; without it the handler decides.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, route = model, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
