// A three-version chain: v2 migrates from v1, v3 from v2, with no v1 -> v3 function. v3
// runs runs of all three versions: `migrate` brings a v1 state through both mappings, and
// `older_versions` lists v1 and v2 with their fingerprints and the signals the chain skips.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use serde_json::json;
use ui_tests::{ReleaseInventory, ReserveInventory};

mod v1 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};
    use ui_tests::{ReleaseInventory, ReserveInventory};

    #[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[agent(tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory))))]
    pub enum Checkout {
        #[agent(initial, tools(ReserveInventory), to(AwaitApproval, Failed))]
        Reserving { items: Vec<String> },
        #[agent(wait = "approval", to(Done, Failed))]
        AwaitApproval { items: Vec<String> },
        #[agent(terminal)]
        Done,
        #[agent(terminal, compensate)]
        Failed,
    }
}

mod v2 {
    use super::v1;
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};
    use ui_tests::{ReleaseInventory, ReserveInventory};

    // The approval became a shipping address.
    #[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[agent(
        version = 2,
        migrate_from(v1::Checkout, with = from_v1, skip_signal("approval")),
        tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory)))
    )]
    pub enum Checkout {
        #[agent(initial, tools(ReserveInventory), to(Shipping, Failed))]
        Reserving { items: Vec<String> },
        #[agent(wait = "address", to(Done, Failed))]
        Shipping { items: Vec<String>, carrier: String },
        #[agent(terminal)]
        Done,
        #[agent(terminal, compensate)]
        Failed,
    }

    fn from_v1(old: v1::Checkout) -> Checkout {
        match old {
            v1::Checkout::Reserving { items } => Checkout::Reserving { items },
            v1::Checkout::AwaitApproval { items } => Checkout::Shipping { items, carrier: "post".into() },
            v1::Checkout::Done => Checkout::Done,
            v1::Checkout::Failed => Checkout::Failed,
        }
    }
}

// The address is taken up front; runs waiting for it ship without it.
#[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[agent(
    version = 3,
    migrate_from(v2::Checkout, with = from_v2, skip_signal("address")),
    tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory)))
)]
pub enum Checkout {
    #[agent(initial, tools(ReserveInventory), to(Shipping, Failed))]
    Reserving { items: Vec<String>, address: String },
    #[agent(to(Done, Failed))]
    Shipping { items: Vec<String>, carrier: String, address: Option<String> },
    #[agent(terminal)]
    Done,
    #[agent(terminal, compensate)]
    Failed,
}

fn from_v2(old: v2::Checkout) -> Checkout {
    match old {
        v2::Checkout::Reserving { items } => Checkout::Reserving { items, address: String::new() },
        v2::Checkout::Shipping { items, carrier } => Checkout::Shipping { items, carrier, address: None },
        v2::Checkout::Done => Checkout::Done,
        v2::Checkout::Failed => Checkout::Failed,
    }
}

fn main() {
    assert_eq!((v1::Checkout::VERSION, v2::Checkout::VERSION, Checkout::VERSION), (1, 2, 3));
    assert_eq!(Checkout::graph().version, 3);

    let v1_state = serde_json::to_value(v1::Checkout::AwaitApproval { items: vec!["socks".into()] }).unwrap();
    let v3_state = Checkout::migrate(1, v1_state).unwrap().unwrap();
    assert_eq!(
        serde_json::from_value::<Checkout>(v3_state).unwrap(),
        Checkout::Shipping { items: vec!["socks".into()], carrier: "post".into(), address: None }
    );
    let own = json!("Done");
    assert_eq!(Checkout::migrate(3, own.clone()), Some(Ok(own.clone())));
    assert_eq!(Checkout::migrate(0, own), None);

    let older = Checkout::older_versions();
    assert_eq!(older.iter().map(|o| o.version).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(older[0].graph.fingerprint(), v1::Checkout::graph().fingerprint());
    assert_eq!(older[1].graph.fingerprint(), v2::Checkout::graph().fingerprint());
    assert_eq!(older[0].skipped_signals, ["approval", "address"]);
    assert_eq!(older[1].skipped_signals, ["address"]);
}
