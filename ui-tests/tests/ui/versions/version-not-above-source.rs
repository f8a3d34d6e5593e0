// A migration goes from a lower version to a higher one: a version equal to (or below) the
// source's is refused, with the version to write.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

mod v2 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    #[agent(version = 2)]
    pub enum Checkout {
        #[agent(initial, to(Done))]
        Browsing,
        #[agent(terminal)]
        Done,
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v2::Checkout, with = from_v2))]
pub enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn from_v2(old: v2::Checkout) -> Checkout {
    match old {
        v2::Checkout::Browsing => Checkout::Browsing,
        v2::Checkout::Done => Checkout::Done,
    }
}

fn main() {}
