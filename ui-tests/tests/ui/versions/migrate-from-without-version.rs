// `migrate_from(...)` needs a `version` on the same enum, above the source's.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    pub enum Checkout {
        #[agent(initial, to(Done))]
        Browsing,
        #[agent(terminal)]
        Done,
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(migrate_from(v1::Checkout, with = from_v1))]
pub enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn from_v1(old: v1::Checkout) -> Checkout {
    match old {
        v1::Checkout::Browsing => Checkout::Browsing,
        v1::Checkout::Done => Checkout::Done,
    }
}

fn main() {}
