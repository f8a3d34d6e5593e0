// An agent enum that derives `Serialize` but not `Deserialize` gets one error, at its name.
use durable_agents::Agent;
use serde::Serialize;

#[derive(Agent, Clone, Serialize)]
enum Flow {
    #[agent(initial, to(Done))]
    Start { n: u32 },
    #[agent(terminal)]
    Done,
}

fn main() {}
