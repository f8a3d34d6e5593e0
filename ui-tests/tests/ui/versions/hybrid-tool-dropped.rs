// A hybrid tool of the old version may have completed calls that still need compensating
// after the migration: the new version must declare it hybrid, with its compensation.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, ReleaseInventory};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};
    use ui_tests::{ReleaseInventory, ReserveInventory};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    #[agent(tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory))))]
    pub enum Checkout {
        #[agent(initial, tools(ReserveInventory), to(Done, Failed))]
        Reserving,
        #[agent(terminal)]
        Done,
        #[agent(terminal, compensate)]
        Failed,
    }
}

// Version 2 charges instead of reserving, and forgot that version 1 runs may hold
// reservations to release.
#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(
    version = 2,
    migrate_from(v1::Checkout, with = from_v1),
    tools(write(ChargePayment, ReleaseInventory))
)]
pub enum Checkout {
    #[agent(initial, tools(ChargePayment), to(Done, Failed))]
    Paying,
    #[agent(terminal)]
    Done,
    #[agent(terminal, compensate)]
    Failed,
}

fn from_v1(old: v1::Checkout) -> Checkout {
    match old {
        v1::Checkout::Reserving => Checkout::Paying,
        v1::Checkout::Done => Checkout::Done,
        v1::Checkout::Failed => Checkout::Failed,
    }
}

fn main() {}
