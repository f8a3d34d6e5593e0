// A misspelled argument type is reported once, at the user's token.
use durable_agents::Agent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, route = llm, to(Payment(args = PayArgz), Done))]
    Review,
    #[agent(to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

fn main() {}
