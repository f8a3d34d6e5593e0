// A transition's argument type must have a JSON schema: the model is shown it and its answer
// is checked against it.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
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
