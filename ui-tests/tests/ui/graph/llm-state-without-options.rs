// An LLM-routed state needs successors to choose from.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review, Done))]
    Browsing,
    #[agent(route = llm)]
    Review,
    #[agent(terminal)]
    Done,
}

fn main() {}
