// A misspelled key is reported with the closest valid key, and no follow-on graph errors.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(inital, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
