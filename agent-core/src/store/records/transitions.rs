//! Versions: the step a commit writes, a committed transition, and a version's state and counts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(doc)]
use super::RunRecord;
use super::{Millis, OperatorNote, RunFailure, RunStatus, Spend};
use crate::store::WaitingFor;

/// Why a step moved the run.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TransitionKind {
    /// The first version.
    Start,
    /// A declared edge taken by a handler or the router.
    Step,
    /// The state's `on_error` edge.
    Error,
    /// The status changed without a state change (wait, failure, compensation done).
    Status,
    /// An operator cancelled the run: it moves to compensating with error `cancelled`
    /// ([`OperatorStore::cancel_run`](crate::store::OperatorStore::cancel_run)).
    Cancel,
    /// An operator terminated the run ([`OperatorStore::terminate_run`](crate::store::OperatorStore::terminate_run)).
    Terminate,
    /// An operator reset a quarantined run to an earlier version's state
    /// ([`repair`](mod@crate::store::repair)).
    Repair,
    /// An operator replaced the state of a stopped run (waiting, failed, quarantined or
    /// dead-lettered) and let it continue ([`edit`](mod@crate::store::edit)); the note says
    /// who and why, and whether the edit took an edge the graph does not declare.
    Edited,
    /// A worker of a newer version of the agent moved the run to it
    /// ([`RunStore::migrate_run`](crate::store::RunStore::migrate_run)); the note says from which
    /// version and fingerprint to which ([`MigrationNote`](crate::store::MigrationNote)).
    Migrated,
    /// An operator dropped a pending signal ([`OperatorStore::drop_signal`](crate::store::OperatorStore::drop_signal)):
    /// the state, status and wait are unchanged, and the note says which signal and why.
    SignalDropped,
}

impl TransitionKind {
    /// Stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// One step to commit atomically.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepCommit {
    /// The version the step started from; the commit succeeds only if it is still current.
    pub expected_version: u64,
    /// The state left.
    pub from_state: String,
    /// The state entered (equal to `from_state` for status-only changes).
    pub to_state: String,
    /// The new state, serialized.
    pub state: Value,
    /// Why.
    pub kind: TransitionKind,
    /// The run's status after the commit.
    pub status: RunStatus,
    /// For `Waiting`: what for (a signal, or the children the step started).
    pub waiting_for: Option<WaitingFor>,
    /// For `Waiting` with a timeout: when to wake.
    pub wake_at: Option<Millis>,
    /// The failure, for failed, compensating and quarantined runs.
    pub error: Option<RunFailure>,
    /// A signal consumed by this step, marked delivered in the same transaction.
    pub consumed_signal: Option<i64>,
    /// What the run spent through this step, stored with it; `None` leaves the stored
    /// spend as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<Spend>,
}

/// One committed version, as history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TransitionRecord {
    /// The run.
    pub run_id: String,
    /// The version this transition created.
    pub version: u64,
    /// Left.
    pub from_state: String,
    /// Entered.
    pub to_state: String,
    /// Why.
    pub kind: TransitionKind,
    /// The status after it.
    pub status: RunStatus,
    /// The lease epoch of the writer.
    pub epoch: u64,
    /// When it was committed.
    pub created_at: Millis,
    /// SHA-256 chaining this record to the previous one (tamper evidence), hex.
    pub hash: String,
    /// For an operator's transition (cancel, terminate): who and why.
    pub note: Option<OperatorNote>,
}

/// How many runs of one agent version recorded one graph fingerprint
/// ([`HistoryStore::count_versions`](crate::store::HistoryStore::count_versions)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionCount {
    /// Their agent version ([`RunRecord::agent_version`]).
    pub agent_version: u32,
    /// The graph fingerprint they recorded ([`RunRecord::fingerprint`]).
    pub fingerprint: String,
    /// How many runs.
    pub runs: u64,
}

/// The state of one version, for time travel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateAtVersion {
    /// The version.
    pub version: u64,
    /// The state's name.
    pub state_name: String,
    /// The state.
    pub state: Value,
}

/// The stored versions of a run (see [`HistoryStore::version_span`](crate::store::HistoryStore::version_span)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSpan {
    /// Oldest stored version.
    pub first: u64,
    /// Newest stored version.
    pub last: u64,
    /// How many versions are stored.
    pub count: u64,
}
