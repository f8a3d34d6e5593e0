// `version = N` takes a whole number of 1 or more: each wrong value is reported at itself.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 0)]
pub enum Zero {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = -1)]
pub enum Negative {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 1.5)]
pub enum Fraction {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = "2")]
pub enum Quoted {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, version = 3)]
pub enum Twice {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
