// The kind declared on the agent must match the tool's `Tool::Kind`.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(ChargePayment), write(SearchProducts)))]
enum Checkout {
    #[agent(initial, tools(ChargePayment, SearchProducts), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
