// Only the model gives a transition's argument: `args = ...` needs `route = llm` on the state.
use durable_agents::Agent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Payment(args = PayArgs), Done))]
    Review,
    #[agent(to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

fn main() {}
