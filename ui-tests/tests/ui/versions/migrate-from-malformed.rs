// Malformed `migrate_from(...)`: no mapping, an unknown key, no source, a second source, a
// `skip_signal` without strings, a duplicate. Every mistake is reported at once.
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
#[agent(version = 2, migrate_from(v1::Checkout))]
pub enum NoMapping {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1, skip = "approval"))]
pub enum UnknownKey {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(with = from_v1))]
pub enum NoSource {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 3, migrate_from(v1::Checkout, v2::Checkout, with = from_v1))]
pub enum TwoSources {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1, skip_signal(approval)))]
pub enum SkipNotStrings {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(version = 2, migrate_from(v1::Checkout, with = from_v1), migrate_from(v1::Checkout, with = from_v1))]
pub enum Twice {
    #[agent(initial, to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
