// A tool declared as `r#SearchProducts` and as `SearchProducts` is one tool to Rust, so it is declared twice.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::SearchProducts;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts, r#SearchProducts)))]
enum Flow {
    #[agent(initial, tools(SearchProducts), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
