//! Versions through the derive: a three-version chain (v1, v2 migrating from v1, v3
//! migrating from v2) composes without a v1 -> v3 function; `older_versions` lists both
//! older versions with their fingerprints and the signals the chain may leave unwaited.

use durable_agents::versions::MigrationError;
use durable_agents::{Agent, Compensate, Tool};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Reserve stock for an order (hybrid: undone by [`Release`]).
#[derive(Debug, Tool)]
#[tool(kind = hybrid, input = Vec<String>, output = String)]
pub struct Reserve;

/// Release a reservation.
#[derive(Debug, Tool)]
#[tool(kind = write, input = String, output = ())]
pub struct Release;

impl Compensate for Reserve {
    type With = Release;
    fn compensation(&self, _input: &Vec<String>, output: &String) -> String {
        output.clone()
    }
}

/// Version 1: pay, then wait for an approval.
mod v1 {
    use super::{Release, Reserve};
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[agent(tools(write(Release), hybrid(Reserve(compensate = Release))))]
    pub enum Checkout {
        #[agent(initial, tools(Reserve), to(AwaitApproval, Failed))]
        Payment { items: Vec<String> },
        #[agent(wait = "approval", to(Done, Failed))]
        AwaitApproval { items: Vec<String> },
        #[agent(terminal)]
        Done { receipt: String },
        #[agent(terminal, compensate)]
        Failed { reason: String },
    }
}

/// Version 2: the approval became a shipping address; runs waiting for an approval are
/// moved to waiting for the address (`skip_signal("approval")`).
mod v2 {
    use super::{Release, Reserve, v1};
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[agent(
        version = 2,
        migrate_from(v1::Checkout, with = from_v1, skip_signal("approval")),
        tools(write(Release), hybrid(Reserve(compensate = Release)))
    )]
    pub enum Checkout {
        #[agent(initial, tools(Reserve), to(Shipping, Failed))]
        Payment { items: Vec<String> },
        #[agent(wait = "address", to(Done, Failed))]
        Shipping { items: Vec<String>, carrier: String },
        #[agent(terminal)]
        Done { receipt: String },
        #[agent(terminal, compensate)]
        Failed { reason: String },
    }

    fn from_v1(old: v1::Checkout) -> Checkout {
        match old {
            v1::Checkout::Payment { items } => Checkout::Payment { items },
            v1::Checkout::AwaitApproval { items } => Checkout::Shipping {
                items,
                carrier: "post".to_owned(),
            },
            v1::Checkout::Done { receipt } => Checkout::Done { receipt },
            v1::Checkout::Failed { reason } => Checkout::Failed { reason },
        }
    }
}

/// Version 3: the address is taken at payment; runs waiting for it ship without it.
#[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[agent(
    version = 3,
    migrate_from(v2::Checkout, with = from_v2, skip_signal("address")),
    tools(write(Release), hybrid(Reserve(compensate = Release)))
)]
pub enum Checkout {
    #[agent(initial, tools(Reserve), to(Shipping, Failed))]
    Payment { items: Vec<String>, address: String },
    #[agent(to(Done, Failed))]
    Shipping {
        items: Vec<String>,
        carrier: String,
        address: Option<String>,
    },
    #[agent(terminal)]
    Done { receipt: String },
    #[agent(terminal, compensate)]
    Failed { reason: String },
}

fn from_v2(old: v2::Checkout) -> Checkout {
    match old {
        v2::Checkout::Payment { items } => Checkout::Payment {
            items,
            address: String::new(),
        },
        v2::Checkout::Shipping { items, carrier } => Checkout::Shipping {
            items,
            carrier,
            address: None,
        },
        v2::Checkout::Done { receipt } => Checkout::Done { receipt },
        v2::Checkout::Failed { reason } => Checkout::Failed { reason },
    }
}

#[test]
fn versions_are_declared() {
    assert_eq!(v1::Checkout::VERSION, 1);
    assert_eq!(v2::Checkout::VERSION, 2);
    assert_eq!(Checkout::VERSION, 3);
    assert_eq!(v1::Checkout::graph().version, 1);
    assert_eq!(Checkout::graph().version, 3);
    // The version is part of the graph, so of the fingerprint.
    assert_ne!(
        v2::Checkout::graph().fingerprint(),
        Checkout::graph().fingerprint()
    );
}

#[test]
fn a_chain_composes_without_a_v1_to_v3_function() {
    let v1_state = serde_json::to_value(v1::Checkout::AwaitApproval {
        items: vec!["socks".to_owned()],
    })
    .unwrap();
    let v3_state = Checkout::migrate(1, v1_state).unwrap().unwrap();
    let v3: Checkout = serde_json::from_value(v3_state).unwrap();
    assert_eq!(
        v3,
        Checkout::Shipping {
            items: vec!["socks".to_owned()],
            carrier: "post".to_owned(),
            address: None,
        }
    );

    let v2_state = serde_json::to_value(v2::Checkout::Payment {
        items: vec!["hat".to_owned()],
    })
    .unwrap();
    let v3: Checkout =
        serde_json::from_value(Checkout::migrate(2, v2_state).unwrap().unwrap()).unwrap();
    assert_eq!(
        v3,
        Checkout::Payment {
            items: vec!["hat".to_owned()],
            address: String::new(),
        }
    );
}

#[test]
fn the_own_version_comes_back_unchanged_and_unknown_versions_have_no_chain() {
    let state = json!({"Done": {"receipt": "r-1"}});
    assert_eq!(Checkout::migrate(3, state.clone()), Some(Ok(state.clone())));
    assert_eq!(Checkout::migrate(0, state.clone()), None);
    assert_eq!(Checkout::migrate(4, state.clone()), None);
    // Without `migrate_from`, an agent runs its own version only.
    assert_eq!(
        v1::Checkout::migrate(1, state.clone()),
        Some(Ok(state.clone()))
    );
    assert_eq!(v1::Checkout::migrate(2, state), None);
    assert!(v1::Checkout::older_versions().is_empty());
}

#[test]
fn a_state_that_is_not_of_the_old_version_is_a_clear_error() {
    let wrong = json!({"Shipping": {"items": []}});
    let err = Checkout::migrate(1, wrong).unwrap().unwrap_err();
    match &err {
        MigrationError::Unreadable { agent, version, .. } => {
            assert_eq!(agent, "Checkout");
            assert_eq!(*version, 1);
        }
        other @ MigrationError::Unwritable { .. } => panic!("expected Unreadable, got {other:?}"),
    }
    assert!(err.to_string().contains("`Checkout` version 1"), "{err}");
}

#[test]
fn older_versions_list_the_chain_with_fingerprints_and_accumulated_skips() {
    let older = Checkout::older_versions();
    let versions: Vec<u32> = older.iter().map(|o| o.version).collect();
    assert_eq!(versions, [1, 2]);
    assert_eq!(
        older[0].graph.fingerprint(),
        v1::Checkout::graph().fingerprint()
    );
    assert_eq!(
        older[1].graph.fingerprint(),
        v2::Checkout::graph().fingerprint()
    );
    // A v1 run crosses both migrations, a v2 run only the last.
    assert_eq!(older[0].skipped_signals, ["approval", "address"]);
    assert_eq!(older[1].skipped_signals, ["address"]);

    let from_v2 = v2::Checkout::older_versions();
    assert_eq!(from_v2.len(), 1);
    assert_eq!(from_v2[0].version, 1);
    assert_eq!(from_v2[0].skipped_signals, ["approval"]);
}
