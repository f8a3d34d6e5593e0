// `children(...)` is refused where it cannot work: with a wait, listing nothing, twice the
// same agent, on a terminal state; `children_outlive` without children.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Research {
    #[agent(initial, to(Found))]
    Searching,
    #[agent(terminal)]
    Found,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Report {
    #[agent(initial, wait = "go", children(Research), to(Listing))]
    Plan,
    #[agent(children(), to(Twice))]
    Listing,
    #[agent(children(Research, Research), to(Outliving))]
    Twice,
    #[agent(children_outlive, to(Done))]
    Outliving,
    #[agent(terminal, children(Research))]
    Done,
}

fn main() {}
