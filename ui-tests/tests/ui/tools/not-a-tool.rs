// A declared tool must implement `Tool`; the error points at the declaration.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

pub struct Cart;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(Cart)))]
enum Checkout {
    #[agent(initial, tools(Cart), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
