// The compensation declared on the agent must be the one the tool's `Compensate` impl names.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, ReleaseInventory, ReserveInventory};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(write(ReleaseInventory, ChargePayment), hybrid(ReserveInventory(compensate = ChargePayment))))]
enum Checkout {
    #[agent(initial, tools(ReserveInventory), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
