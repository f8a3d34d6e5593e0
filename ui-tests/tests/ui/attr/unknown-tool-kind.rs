// Tools are declared by kind; an unknown kind is reported.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(reed(ui_tests::SearchProducts)))]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
