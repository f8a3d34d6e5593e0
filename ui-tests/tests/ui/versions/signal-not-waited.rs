// A run migrated while its state waits for a signal must still be woken by it: the new
// version must wait for every signal the old one waits for, or say `skip_signal(...)`.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    pub enum Checkout {
        #[agent(initial, to(Approval))]
        Browsing,
        #[agent(wait = "approval", to(Address))]
        Approval,
        #[agent(wait = "address", to(Done))]
        Address,
        #[agent(terminal)]
        Done,
    }
}

// Version 2 still waits for `address`, but no longer for `approval`.
#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1))]
pub enum Checkout {
    #[agent(initial, to(Address))]
    Browsing,
    #[agent(wait = "address", to(Done))]
    Address,
    #[agent(terminal)]
    Done,
}

fn from_v1(old: v1::Checkout) -> Checkout {
    match old {
        v1::Checkout::Browsing | v1::Checkout::Approval => Checkout::Browsing,
        v1::Checkout::Address => Checkout::Address,
        v1::Checkout::Done => Checkout::Done,
    }
}

fn main() {}
