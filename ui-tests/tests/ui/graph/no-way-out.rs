// A non-terminal state needs a successor.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review, Done))]
    Browsing,
    Review,
    #[agent(terminal)]
    Done,
}

fn main() {}
