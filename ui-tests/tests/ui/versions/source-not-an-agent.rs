// `migrate_from(...)` naming a type that is not an agent is one error, at that type.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize)]
pub enum OldCheckout {
    Browsing,
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(OldCheckout, with = from_old))]
pub enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn from_old(old: OldCheckout) -> Checkout {
    match old {
        OldCheckout::Browsing => Checkout::Browsing,
        OldCheckout::Done => Checkout::Done,
    }
}

fn main() {}
