// A transition's argument type must deserialize: the model's arguments are read into it.
use durable_agents::Agent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, route = llm, to(Payment(args = PayArgs), Done))]
    Review,
    #[agent(to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

fn main() {}
