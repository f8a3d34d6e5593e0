// `tools_per_answer` says how many tools the model may call in one answer: it needs
// `route = llm`, and tools to call.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::SearchProducts;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts)))]
enum Flow {
    #[agent(initial, tools(SearchProducts), to(Decide), tools_per_answer = 2)]
    Start,
    #[agent(route = llm, to(Done, Start), tools_per_answer = 3)]
    Decide,
    #[agent(terminal)]
    Done,
}

fn main() {}
