//! Versions of an agent, and the migrations between them.
//!
//! An agent has a version (`#[agent(version = N)]`, 1 when not given); every run records
//! the version it is on ([`RunRecord::agent_version`](crate::store::RunRecord)). To change
//! an agent while runs are in flight, keep the old enum in your code (say in a module
//! `v1`), raise the version of the new one and declare where it migrates from:
//!
//! ```
//! use durable_agents::Agent;
//! use serde::{Deserialize, Serialize};
//!
//! /// Version 1, kept as it was deployed.
//! mod v1 {
//!     use durable_agents::Agent;
//!     use serde::{Deserialize, Serialize};
//!
//!     #[derive(Agent, Clone, Debug, Serialize, Deserialize)]
//!     pub enum Checkout {
//!         #[agent(initial, to(Approval))]
//!         Payment { cart: Vec<String> },
//!         #[agent(wait = "approval", to(Done))]
//!         Approval { cart: Vec<String> },
//!         #[agent(terminal)]
//!         Done,
//!     }
//! }
//!
//! /// Version 2 ships between payment and approval.
//! #[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
//! #[agent(version = 2, migrate_from(v1::Checkout, with = from_v1))]
//! enum Checkout {
//!     #[agent(initial, to(Shipping))]
//!     Payment { cart: Vec<String> },
//!     #[agent(to(Approval))]
//!     Shipping { cart: Vec<String> },
//!     #[agent(wait = "approval", to(Done))]
//!     Approval { cart: Vec<String>, shipped: bool },
//!     #[agent(terminal)]
//!     Done,
//! }
//!
//! /// Every state of version 1, mapped: forgetting one does not compile.
//! fn from_v1(old: v1::Checkout) -> Checkout {
//!     match old {
//!         v1::Checkout::Payment { cart } => Checkout::Payment { cart },
//!         // Runs waiting for approval were paid before shipping existed.
//!         v1::Checkout::Approval { cart } => Checkout::Approval { cart, shipped: false },
//!         v1::Checkout::Done => Checkout::Done,
//!     }
//! }
//!
//! let stored = serde_json::json!({"Approval": {"cart": ["socks"]}}); // a version 1 run
//! let migrated = Checkout::migrate(1, stored).expect("a chain from 1").expect("readable");
//! assert_eq!(
//!     serde_json::from_value::<Checkout>(migrated).unwrap(),
//!     Checkout::Approval { cart: vec!["socks".into()], shipped: false },
//! );
//! assert!(Checkout::migrate(0, serde_json::json!("Done")).is_none()); // no chain from 0
//! let older = Checkout::older_versions();
//! assert_eq!(older[0].version, 1);
//! assert_eq!(older[0].graph.fingerprint(), v1::Checkout::graph().fingerprint());
//! ```
//!
//! The mapping is a plain function, so the compiler checks that every old state is
//! mapped. The derive generates [`Agent::migrate`] and [`Agent::older_versions`] from it,
//! composing chains: version 3 migrating from version 2, which migrates from version 1,
//! can run runs of all three without a `v1 -> v3` function.
//!
//! The derive also checks, while your crate compiles, what the compiler alone cannot (each
//! error is shown in [`compile_errors`](crate::compile_errors#versions)):
//! - the source is an agent, of the same name, with a lower version;
//! - every hybrid tool of the old version is declared hybrid in the new one with the same
//!   compensation: a call completed on the old version may still be compensated after the
//!   migration, by the new version's runner;
//! - every signal a state of the old version waits for is waited for by a state of the new
//!   one, or named in `migrate_from(..., skip_signal("approval"))`, which says the mapping
//!   moves runs waiting for it past the wait; a `skip_signal` naming a signal the old
//!   version never waits for is refused (a typo would skip nothing).

// Reached by the derive's expansions through `__private`.
pub(crate) mod checks;
pub(crate) mod older;

use serde_json::Value;

use crate::agent::Agent;
use crate::store::{MigrationCommit, RunFailure, RunRecord};

pub use crate::runner::{migrate_claimed, plan_migration};
pub use older::{MigrationError, OlderVersion};

/// [`Agent::migrate`] of an agent declaring `migrate_from(Old, with = map)`: bring a state
/// of version `from` to `Old`'s version through `Old`'s own chain, then map it.
#[doc(hidden)]
pub fn migrate_via<Old: Agent, New: Agent>(
    from: u32,
    state: Value,
    map: fn(Old) -> New,
) -> Option<Result<Value, MigrationError>> {
    if from == New::VERSION {
        return Some(Ok(state));
    }
    let old = match Old::migrate(from, state)? {
        Ok(old) => old,
        Err(e) => return Some(Err(e)),
    };
    let old: Old = match serde_json::from_value(old) {
        Ok(old) => old,
        Err(e) => {
            return Some(Err(MigrationError::Unreadable {
                agent: Old::NAME.to_owned(),
                version: Old::VERSION,
                message: e.to_string(),
            }));
        }
    };
    Some(
        serde_json::to_value(map(old)).map_err(|e| MigrationError::Unwritable {
            agent: New::NAME.to_owned(),
            version: New::VERSION,
            message: e.to_string(),
        }),
    )
}

/// [`Agent::older_versions`] of an agent declaring `migrate_from(Old, skip_signal(...))`:
/// `Old`'s older versions and `Old` itself, each with `skipped` added to what it may skip.
#[doc(hidden)]
#[must_use]
pub fn older_via<Old: Agent>(skipped: &[&'static str]) -> Vec<OlderVersion> {
    let mut older = Old::older_versions();
    older.push(OlderVersion {
        version: Old::VERSION,
        graph: Old::graph(),
        skipped_signals: Vec::new(),
    });
    for o in &mut older {
        o.skipped_signals.extend_from_slice(skipped);
    }
    older
}

/// Why a run is not migrated now ([`plan_migration`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotMigrated {
    /// The run is another agent's, or already on this version.
    Current,
    /// The run is final: nothing of it runs again.
    Final,
    /// The run is on a version this agent's code declares no chain from (an older one
    /// without a `migrate_from` leading to it, or a newer one): left for a worker that can
    /// run it, never quarantined.
    NoChain,
    /// The run is compensating: its round runs at its own version, never migrated.
    Compensating,
    /// An operator's cancel is pending: a worker takes the cancel first.
    CancelRequested,
    /// A parent waiting for its children: migrated by the worker that claims it once its
    /// join holds (its children's ids derive from the step that waits).
    WaitingForChildren,
}

impl NotMigrated {
    /// Why, in a few words.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::Current => "on this version",
            Self::Final => "final",
            Self::NoChain => "no migration chain from its version",
            Self::Compensating => "compensating: compensated at its own version, never migrated",
            Self::CancelRequested => "a cancel is pending: a worker takes it first",
            Self::WaitingForChildren => {
                "waiting for its children: migrated by a worker when they are done"
            }
        }
    }
}

/// What migrating one run of an older version to this version would write, by the rules a
/// worker applies ([`plan_migration`]).
#[derive(Clone, Debug, PartialEq)]
pub enum MigrationPlan {
    /// One `migrated` commit, this one (boxed: the other variants are small).
    Migrate(Box<MigrationCommit>),
    /// The run's state does not map (`migration.failed`), maps past a signal it waits for
    /// (`migration.skips_signal`), or is not in its version's graph
    /// (`graph.incompatible`): a worker quarantines it with this failure.
    Quarantine(RunFailure),
    /// Not migrated now, and why.
    Leave(NotMigrated),
}

/// What [`migrate_claimed`] did with one claimed run.
#[derive(Clone, Debug, PartialEq)]
pub enum MigrationOutcome {
    /// Migrated: the run as the `migrated` commit left it (the lease still held).
    Migrated(Box<RunRecord>),
    /// Nothing written: a worker would quarantine the run with this failure.
    Refused(RunFailure),
    /// Nothing written, and why.
    Left(NotMigrated),
}

/// What [`migrate_runs`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Runs moved to this version, by the version they were on.
    pub migrated: std::collections::BTreeMap<u32, u64>,
    /// Runs quarantined because their state did not map (`migration.failed`,
    /// `migration.skips_signal`).
    pub quarantined: Vec<String>,
    /// Claimed runs handed back untouched: compensating runs (never migrated), and runs
    /// another worker moved first.
    pub left: u64,
}

/// Migrate every claimable run of an older version that `runner` can run, now, instead of
/// at its next step (`agentctl migrate` does the same from a control binary that registers
/// the agent, through [`migrate_claimed`], see `docs/versions.md`). Each
/// run is claimed and migrated with one [`RunStore::migrate_run`](crate::store::RunStore::migrate_run)
/// under that lease, exactly as a worker would before its next step; nothing else of it
/// runs. Compensating runs are handed back (they are compensated at their own version).
/// Runs waiting for a signal that has not come are not claimable: they are migrated when
/// it comes.
///
/// # Errors
/// The store's, claiming.
pub async fn migrate_runs<A, H>(
    runner: &crate::runner::Runner<A, H>,
) -> Result<MigrateReport, crate::store::StoreError>
where
    A: Agent + crate::agent::Handle<H>,
    H: Send + Sync + 'static,
{
    use crate::runner::StepOutcome;
    use crate::store::{Claimed, RunStatus, versioned_agent};
    let store = runner.store();
    let config = runner.config();
    let entries: Vec<String> = A::older_versions()
        .iter()
        .map(|o| versioned_agent(A::NAME, o.version))
        .collect();
    let mut report = MigrateReport::default();
    if entries.is_empty() {
        return Ok(report);
    }
    let mut seen = std::collections::HashSet::new();
    loop {
        let batch = store
            .claim_next(&entries, &config.worker_id, config.lease_ttl, 64)
            .await?;
        if batch.is_empty() {
            return Ok(report);
        }
        let mut progressed = false;
        for Claimed {
            mut lease, record, ..
        } in batch
        {
            if record.status == RunStatus::Compensating || !seen.insert(record.id.clone()) {
                report.left += 1;
                store.hand_back(&lease).await?;
                continue;
            }
            progressed = true;
            let from = record.agent_version;
            match runner.step(&mut lease, record).await {
                Ok(StepOutcome::Committed(r) | StepOutcome::Waiting(r))
                    if r.agent_version == A::VERSION =>
                {
                    *report.migrated.entry(from).or_default() += 1;
                    store.release_lease(&lease).await?;
                }
                Ok(StepOutcome::Finished(r)) if r.status == RunStatus::Quarantined => {
                    report.quarantined.push(r.id);
                }
                Ok(
                    StepOutcome::Committed(r)
                    | StepOutcome::Waiting(r)
                    | StepOutcome::Finished(r)
                    | StepOutcome::Deferred(r),
                ) => {
                    report.left += 1;
                    if r.lease_owner.is_some() {
                        store.release_lease(&lease).await?;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not migrate a run; it migrates at its next step");
                    report.left += 1;
                    let _ = store.hand_back(&lease).await;
                }
            }
        }
        if !progressed {
            return Ok(report);
        }
    }
}
