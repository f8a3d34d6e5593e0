// A typo in to(...) gives one error with a suggestion, not follow-on reachability errors.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Reveiw))]
    Browsing,
    #[agent(to(Done))]
    Review,
    #[agent(terminal)]
    Done,
}

fn main() {}
