// A `dag` agent listing itself among its children, as `Self` or by name: one error each.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(dag)]
enum Report {
    #[agent(initial, children(Self), to(Again))]
    Plan,
    #[agent(children(Report), to(Done))]
    Again,
    #[agent(terminal)]
    Done,
}

fn main() {}
