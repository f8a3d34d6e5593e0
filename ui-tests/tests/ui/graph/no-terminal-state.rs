// An agent needs a state where runs end.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review))]
    Browsing,
    #[agent(to(Browsing))]
    Review,
}

fn main() {}
