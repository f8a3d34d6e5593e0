// A misspelled key is reported with the closest valid key, and no follow-on graph errors.
use agent_core::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(inital, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
