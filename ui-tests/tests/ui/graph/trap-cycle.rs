// States that loop without any way to a terminal state are reported once, naming the loop.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review, Done))]
    Browsing,
    #[agent(to(Payment))]
    Review,
    #[agent(to(Retry))]
    Payment,
    #[agent(to(Payment))]
    Retry,
    #[agent(terminal)]
    Done,
}

fn main() {}
