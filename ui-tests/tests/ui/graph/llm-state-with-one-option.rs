// An LLM-routed state with one successor and no tools asks the model a question with one answer: an error with the fix.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, route = llm, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
