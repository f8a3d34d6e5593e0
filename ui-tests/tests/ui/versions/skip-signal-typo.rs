// `skip_signal(...)` naming a signal the old version never waits for is refused (a typo
// would skip nothing), at the misspelled name, listing the signals there are.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    pub enum Checkout {
        #[agent(initial, to(Approval))]
        Browsing,
        #[agent(wait = "approval", to(Done))]
        Approval,
        #[agent(terminal)]
        Done,
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1, skip_signal("approval", "aproval")))]
pub enum Checkout {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn from_v1(old: v1::Checkout) -> Checkout {
    match old {
        v1::Checkout::Browsing | v1::Checkout::Approval => Checkout::Browsing,
        v1::Checkout::Done => Checkout::Done,
    }
}

fn main() {}
