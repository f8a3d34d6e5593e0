// A target listed twice in `to(...)` is reported, with or without an argument.
use durable_agents::Agent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, route = llm, to(Payment(args = PayArgs), Done, Payment))]
    Review,
    #[agent(to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

fn main() {}
