// Malformed transition arguments, each reported (not only the first): a bare type, a
// misspelled key, `args` without a type, `args` twice, a type that does not parse.
use durable_agents::Agent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, route = llm, to(Payment(PayArgs), Browsing(arg = PayArgs), Done(args)))]
    Review,
    #[agent(route = llm, to(Payment(args = PayArgs, args = PayArgs), Done(args = 42)))]
    Browsing,
    #[agent(to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

fn main() {}
