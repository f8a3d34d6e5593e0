// A hand-written `Tool` impl must use the type's name as `NAME`: the runner journals calls by it.
use durable_agents::tool::kind;
use durable_agents::{Agent, Tool};
use serde::{Deserialize, Serialize};

pub struct Search;

impl Tool for Search {
    const NAME: &'static str = "search";
    type Kind = kind::Read;
    type Input = String;
    type Output = String;
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(Search)))]
enum Flow {
    #[agent(initial, tools(Search), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
