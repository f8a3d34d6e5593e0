// Tool kinds are declared once, on the enum; a state lists its tools by name.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::SearchProducts;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts)))]
enum Flow {
    #[agent(initial, tools(read(SearchProducts)), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
