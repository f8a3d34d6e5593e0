// An LLM-routed state needs successors to choose from.
use agent_core::Agent;
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
