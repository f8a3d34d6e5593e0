// A tool may not share its name with a state: the router names options by name.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::GetCart;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(GetCart)))]
enum Checkout {
    #[agent(initial, route = llm, tools(GetCart), to(GetCart))]
    Browsing,
    #[agent(terminal)]
    GetCart,
}

fn main() {}
