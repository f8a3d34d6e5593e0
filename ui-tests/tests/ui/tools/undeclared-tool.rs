// A tool used in a state must be declared, with its kind, on the enum.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{GetCart, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts)))]
enum Checkout {
    #[agent(initial, tools(SearchProducts, GetCart, SerchProducts), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
