// A migration moves runs between versions of one agent: migrating from another agent is
// refused, naming both.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
pub enum Refund {
    #[agent(initial, to(Done))]
    Asking,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(Refund, with = from_refund))]
pub enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn from_refund(old: Refund) -> Checkout {
    match old {
        Refund::Asking => Checkout::Browsing,
        Refund::Done => Checkout::Done,
    }
}

fn main() {}
