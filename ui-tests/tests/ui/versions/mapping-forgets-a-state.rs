// The mapping is an exhaustive `match` the user writes: a forgotten old state does not
// compile, and rustc names it.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    pub enum Checkout {
        #[agent(initial, to(Review))]
        Browsing,
        #[agent(to(Done))]
        Review,
        #[agent(terminal)]
        Done,
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1))]
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
