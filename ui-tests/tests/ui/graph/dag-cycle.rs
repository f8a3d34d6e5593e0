// With #[agent(dag)], a cycle is reported with its states in order.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(dag)]
enum Pipeline {
    #[agent(initial, to(Fetch))]
    Start,
    #[agent(to(Parse))]
    Fetch,
    #[agent(to(Store, Fetch))]
    Parse,
    #[agent(to(Done))]
    Store,
    #[agent(terminal)]
    Done,
}

fn main() {}
