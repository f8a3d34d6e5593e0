// An agent that is not a `dag` may start runs of itself, named `Self` or by its name.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Nest {
    #[agent(initial, children(Self), to(Deeper))]
    Go,
    #[agent(children(Nest), to(Done))]
    Deeper,
    #[agent(terminal)]
    Done,
}

fn main() {
    let graph = Nest::graph();
    assert_eq!(graph.state("Go").unwrap().children, ["Nest"]);
    assert_eq!(graph.state("Deeper").unwrap().children, ["Nest"]);
}
