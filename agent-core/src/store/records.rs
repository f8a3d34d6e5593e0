//! The records a store keeps: runs, leases, journal entries, transitions, signals, and
//! the settings and reports of its operations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::WaitingFor;

pub use super::failure_code::ErrorClass;
use super::failure_code::FailureCode;

/// The three kinds of tool, and what the runner guarantees for each.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ToolKind {
    /// No side effect. Journaled, served from the journal on resume, cacheable within a run.
    Read,
    /// A side effect. Gets an idempotency key; once its result is committed it never runs again.
    Write,
    /// A write with a declared compensation; completed calls form the run's saga.
    Hybrid,
}

impl ToolKind {
    /// `read`, `write` or `hybrid`: the stored name, the serde name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether calls of this kind have effects (and so idempotency keys).
    #[must_use]
    pub const fn has_effect(self) -> bool {
        !matches!(self, Self::Read)
    }
}

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current time in [`Millis`].
#[must_use]
pub fn now_ms() -> Millis {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Where a run is in its life.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum RunStatus {
    /// Has a next step to execute.
    Running,
    /// Waits for a signal (or its timeout).
    Waiting,
    /// Reached a terminal state.
    Completed,
    /// Running the compensations of its saga.
    Compensating,
    /// Failed and its compensations completed.
    Compensated,
    /// Failed; nothing to compensate.
    Failed,
    /// Its stored state or graph can no longer be executed; needs an operator.
    Quarantined,
    /// Gave up after repeated crashes or failing compensations; needs an operator.
    DeadLettered,
    /// Cancelled by an operator ([`OperatorStore::cancel_run`](super::OperatorStore::cancel_run)), its
    /// compensations completed.
    Cancelled,
    /// Stopped by an operator ([`OperatorStore::terminate_run`](super::OperatorStore::terminate_run)) without
    /// compensating.
    Terminated,
}

impl RunStatus {
    /// All statuses, for parsing and listing.
    pub const ALL: [Self; 10] = [
        Self::Running,
        Self::Waiting,
        Self::Completed,
        Self::Compensating,
        Self::Compensated,
        Self::Failed,
        Self::Quarantined,
        Self::DeadLettered,
        Self::Cancelled,
        Self::Terminated,
    ];

    /// The stored name (`running`, `dead_lettered`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// Whether the run will not move again on its own.
    #[must_use]
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Compensated
                | Self::Failed
                | Self::Quarantined
                | Self::DeadLettered
                | Self::Cancelled
                | Self::Terminated
        )
    }

    /// Whether the run is over for good: completed, compensated, cancelled or terminated.
    /// The other final statuses (failed, quarantined, dead-lettered) wait for an operator,
    /// who can send the run back to work or terminate it.
    #[must_use]
    pub const fn has_ended(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Compensated | Self::Cancelled | Self::Terminated
        )
    }

    /// Whether a worker may pick the run up (running or compensating).
    #[must_use]
    pub const fn is_runnable(self) -> bool {
        matches!(self, Self::Running | Self::Compensating)
    }
}

/// A run's failure, stored with the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunFailure {
    /// Stable code: `tool.timeout`, `handler`, `budget`, `routing`, `state.corrupt`,
    /// `graph.incompatible`, `compensation.failed`, `crash_loop`, ... (stored as its text).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub code: FailureCode,
    /// What happened, for a person.
    pub message: String,
}

/// One run, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunRecord {
    /// Caller-chosen or generated id.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// The fingerprint of the graph the run was started with.
    pub fingerprint: String,
    /// The current state's name.
    pub state_name: String,
    /// The current state, serialized.
    pub state: Value,
    /// The current version (0 at creation, +1 per committed step).
    pub version: u64,
    /// Where the run is in its life.
    pub status: RunStatus,
    /// For waiting runs: what for (a signal, or the children its step started).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub waiting_for: Option<WaitingFor>,
    /// For waiting runs with a timeout, and for runs backing off: when to wake.
    pub wake_at: Option<Millis>,
    /// The failure, if any.
    pub error: Option<RunFailure>,
    /// The current lease epoch (0 before the first claim).
    pub epoch: u64,
    /// The worker holding the lease, while it is held.
    pub lease_owner: Option<String>,
    /// When the lease expires.
    pub lease_expires_at: Option<Millis>,
    /// How many claims in a row found the run's previous claim lost (neither released nor
    /// committed through: its worker crashed, panicked or hung past its lease) since the
    /// run last made progress (crash-loop detection). A claim of a free run costs nothing.
    pub claims_without_progress: u32,
    /// For forks: the run and version it was forked from.
    pub parent: Option<(String, u64)>,
    /// For child runs: the parent run and the version of the step that started it
    /// ([`Ctx::spawn_all`](crate::agent::Ctx::spawn_all)).
    pub spawned_by: Option<SpawnedBy>,
    /// Creation time.
    pub created_at: Millis,
    /// Last change.
    pub updated_at: Millis,
    /// The labels the run was created with ([`NewRun::with_label`]).
    pub labels: Labels,
    /// A cancel asked for while a worker held the run's lease: the holder turns it into the
    /// `cancel` transition at its next commit ([`OperatorStore::cancel_run`](super::OperatorStore::cancel_run)).
    pub cancel_requested: Option<OperatorNote>,
    /// The version of the agent the run is on ([`Agent::VERSION`](crate::Agent::VERSION)):
    /// the one it was started with, or the one a `migrated` transition moved it to
    /// ([`RunStore::migrate_run`](super::RunStore::migrate_run)).
    #[serde(default = "first_agent_version")]
    pub agent_version: u32,
    /// The version at which the run was last migrated
    /// ([`RunStore::migrate_run`](super::RunStore::migrate_run)); with
    /// [`resume_base`](Self::resume_base), meaningful
    /// only while the run is still at that version (see
    /// [`migration_resume_base`](Self::migration_resume_base)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated_at_version: Option<u64>,
    /// The version whose journal the first step after a migration reads: the base of a step
    /// that began under the old version and did not commit (its completed calls are carried
    /// over by index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_base: Option<u64>,
}

/// The agent version of a run created before versions were recorded.
pub(crate) const fn first_agent_version() -> u32 {
    1
}

impl RunRecord {
    /// A stand-in for a run whose stored row cannot be read, so that listings still show it
    /// (quarantined, with why) instead of failing as a whole.
    #[must_use]
    pub fn unreadable(id: String, agent: String, message: String) -> Self {
        Self {
            id,
            agent,
            fingerprint: String::new(),
            state_name: String::new(),
            state: Value::Null,
            version: 0,
            status: RunStatus::Quarantined,
            waiting_for: None,
            wake_at: None,
            error: Some(RunFailure {
                code: FailureCode::RowUnreadable,
                message,
            }),
            epoch: 0,
            lease_owner: None,
            lease_expires_at: None,
            claims_without_progress: 0,
            parent: None,
            spawned_by: None,
            created_at: 0,
            updated_at: 0,
            labels: Labels::new(),
            cancel_requested: None,
            agent_version: 1,
            migrated_at_version: None,
            resume_base: None,
        }
    }

    /// The base version whose journal the next step reads, when the run was just migrated
    /// with a step of the old version interrupted: `resume_base` while the run is still at
    /// the migration's version, `None` once anything else committed.
    #[must_use]
    pub fn migration_resume_base(&self) -> Option<u64> {
        match (self.migrated_at_version, self.resume_base) {
            (Some(at), Some(base)) if at == self.version => Some(base),
            _ => None,
        }
    }
}

/// The error code of a run whose stored row does not read: listed with it, and quarantined
/// with it when a worker tries to claim the run.
pub const ROW_UNREADABLE: &str = "row.unreadable";

/// A run's row as far as it reads ([`HistoryStore::inspect_run`](super::HistoryStore::inspect_run)), for
/// diagnosing a run whose record does not.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InspectedRun {
    /// The record: whole when the row reads; else every field that reads as stored and the
    /// state `Null`. Nothing may execute from a record that did not read.
    pub record: RunRecord,
    /// Why the row does not read, or `None` when it does.
    pub unreadable: Option<String>,
}

/// A run to create.
/// A run's labels: key/value pairs set at creation, for finding runs
/// ([`RunFilter::labels`]); see [`validate_labels`](super::validate_labels) for what a key
/// and a value may hold.
pub type Labels = BTreeMap<String, String>;

/// Who asked for an operator's action on a run (cancel, terminate), and why; recorded
/// with the transition it wrote (and covered by its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperatorNote {
    /// The operator's identity (`agentctl` takes `--by`, or `$USER`).
    pub by: String,
    /// Why.
    pub reason: String,
}

impl OperatorNote {
    /// A note by `by` for `reason`.
    #[must_use]
    pub fn new(by: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            by: by.into(),
            reason: reason.into(),
        }
    }
}

/// A run to create. Build it with [`NewRun::new`] and the `with_*` methods, so that fields
/// added later do not break the code that creates runs.
///
/// ```
/// use durable_agents::backend::NewRun;
/// let run = NewRun::new("run-1", "Checkout", "f", "Browsing", serde_json::json!({}))
///     .with_label("tenant", "acme")
///     .with_label("region", "eu");
/// assert_eq!(run.labels["tenant"], "acme");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewRun {
    /// The run's id; creating the same id twice returns the existing run.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// The graph's fingerprint.
    pub fingerprint: String,
    /// The initial state's name.
    pub state_name: String,
    /// The initial state, serialized.
    pub state: Value,
    /// Labels to find the run by; validated by the store at creation.
    #[serde(default)]
    pub labels: Labels,
    /// For a child run: the parent and the version of the step that starts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
    /// The version of the agent that creates it ([`Agent::VERSION`](crate::Agent::VERSION)).
    #[serde(default = "first_agent_version")]
    pub agent_version: u32,
}

/// Which step of which run started a child run: the parent's id and the version its step
/// began at. A parent waiting for its children
/// ([`WAIT_ALL_CHILDREN`](super::WAIT_ALL_CHILDREN), [`WAIT_FIRST_CHILD`](super::WAIT_FIRST_CHILD)) waits for the runs spawned by it at
/// `version - 1`: the step that started them, before it committed the wait.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpawnedBy {
    /// The parent run.
    pub run_id: String,
    /// The version the parent's step began at.
    pub version: u64,
}

impl NewRun {
    /// A run `id` of `agent` (graph `fingerprint`) starting in `state_name` with `state`,
    /// without labels.
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        agent: impl Into<String>,
        fingerprint: impl Into<String>,
        state_name: impl Into<String>,
        state: Value,
    ) -> Self {
        Self {
            id: id.into(),
            agent: agent.into(),
            fingerprint: fingerprint.into(),
            state_name: state_name.into(),
            state,
            labels: Labels::new(),
            spawned_by: None,
            agent_version: 1,
        }
    }

    /// Of version `version` of its agent ([`Agent::VERSION`](crate::Agent::VERSION); 1
    /// when not given).
    #[must_use]
    pub fn with_agent_version(mut self, version: u32) -> Self {
        self.agent_version = version;
        self
    }

    /// As a child of run `parent`, started by its step at `version`.
    #[must_use]
    pub fn spawned_by(mut self, parent: impl Into<String>, version: u64) -> Self {
        self.spawned_by = Some(SpawnedBy {
            run_id: parent.into(),
            version,
        });
        self
    }

    /// With label `key` = `value` (replacing an earlier value of `key`).
    #[must_use]
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// With these labels added.
    #[must_use]
    pub fn with_labels<K, V>(mut self, labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }
}

/// A held lease: the right to write the run's next version, fenced by `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// The holder.
    pub worker: String,
    /// Strictly increasing per run; every fenced write checks it.
    pub epoch: u64,
    /// Expiry.
    pub expires_at: Millis,
}

/// What a journal entry records.
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
pub enum EntryKind {
    /// A tool call made by a handler or chosen by the router.
    Tool,
    /// A decision of the router.
    Decision,
    /// A compensating call of the saga.
    Compensation,
    /// Child runs started by a handler ([`Ctx::spawn_all`](crate::agent::Ctx::spawn_all)):
    /// the name is the child agent's, the input the initial states, the output the child
    /// run ids. Journaled (started) before the children are created, so that a parent's
    /// cancel finds them whatever happened after.
    Child,
}

impl EntryKind {
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

/// The state of a journaled call.
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
pub enum CallStatus {
    /// Sent, no result committed yet (a crash here means: retry with the same key).
    Started,
    /// Completed; its output is final and is never recomputed.
    Succeeded,
    /// Failed after its retries (or rejected, for decisions).
    Failed,
}

impl CallStatus {
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

/// One journaled call: a tool call, a router decision or a compensation.
///
/// Keyed by `(run_id, version, seq)`: `version` is the state version the step started from
/// and `seq` the call's index within the step; recording the same key again replaces the
/// entry (a `started` entry becomes `succeeded`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalEntry {
    /// The run.
    pub run_id: String,
    /// The state version the step started from.
    pub version: u64,
    /// Index within the step.
    pub seq: u32,
    /// Tool, decision or compensation.
    pub kind: EntryKind,
    /// The state the call was made in.
    pub state: String,
    /// The tool's name (`router` for decisions).
    pub name: String,
    /// For tool calls and compensations: the tool's kind.
    pub tool_kind: Option<ToolKind>,
    /// SHA-256 of the canonical JSON input, hex.
    pub input_hash: String,
    /// The input.
    pub input: Value,
    /// For write and hybrid calls and compensations.
    pub idempotency_key: Option<String>,
    /// Started, succeeded or failed.
    pub status: CallStatus,
    /// The output (for decisions: the [`crate::router::DecisionRecord`]).
    pub output: Option<Value>,
    /// The error class, when failed.
    pub error_class: Option<ErrorClass>,
    /// A stable error code, when failed.
    pub error_code: Option<String>,
    /// The error message, when failed.
    pub error_message: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// Wall time of all attempts.
    pub duration_ms: u64,
    /// When the call started: its first record's time, kept when it is recorded again
    /// (ended, or started again after a crash), so that its start event never changes.
    pub started_at: Millis,
    /// When it finished.
    pub finished_at: Option<Millis>,
}

/// The idempotency key of a write, hybrid or compensating call: derived from the run, the
/// state version and the call index, never from the attempt.
#[must_use]
pub fn idempotency_key(run_id: &str, version: u64, seq: u32) -> String {
    format!("{run_id}:{version}:{seq}")
}

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
    /// ([`OperatorStore::cancel_run`](super::OperatorStore::cancel_run)).
    Cancel,
    /// An operator terminated the run ([`OperatorStore::terminate_run`](super::OperatorStore::terminate_run)).
    Terminate,
    /// An operator reset a quarantined run to an earlier version's state
    /// ([`repair`](mod@super::repair)).
    Repair,
    /// A worker of a newer version of the agent moved the run to it
    /// ([`RunStore::migrate_run`](super::RunStore::migrate_run)); the note says from which
    /// version and fingerprint to which ([`MigrationNote`](super::MigrationNote)).
    Migrated,
    /// An operator dropped a pending signal ([`OperatorStore::drop_signal`](super::OperatorStore::drop_signal)):
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

/// A signal sent to a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalRecord {
    /// Store-assigned id, increasing.
    pub id: i64,
    /// The run.
    pub run_id: String,
    /// The signal's name.
    pub name: String,
    /// The payload.
    pub payload: Value,
    /// When sent.
    pub created_at: Millis,
    /// The version whose step consumed it.
    pub consumed_at_version: Option<u64>,
}

/// Which runs to list.
///
/// Runs are listed in one total order, the same in every store: newest first by creation
/// time in milliseconds ([`RunRecord::created_at`]), then by id, descending, ids compared
/// as bytes ([`RunKey`]'s order, reversed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this agent.
    pub agent: Option<String>,
    /// Only these statuses (all when empty).
    pub statuses: Vec<RunStatus>,
    /// At most this many, newest first (all when `None`).
    pub limit: Option<usize>,
    /// Only runs listed after this one (keyset paging): created earlier, or in the same
    /// millisecond with a smaller id. Give the key of the last run of a page
    /// ([`RunKey::of`]) to read the next page, whose cost is then that of its own runs.
    pub after: Option<RunKey>,
    /// Only runs carrying every one of these labels (all when empty).
    pub labels: Labels,
    /// Only the children of this run ([`RunRecord::spawned_by`]), at any version.
    pub spawned_by: Option<String>,
    /// Only runs created at or after this time.
    pub created_after: Option<Millis>,
    /// Only runs created before this time.
    pub created_before: Option<Millis>,
    /// Only runs on this version of their agent ([`RunRecord::agent_version`]).
    pub agent_version: Option<u32>,
    /// Only runs that recorded this graph fingerprint ([`RunRecord::fingerprint`]).
    pub fingerprint: Option<String>,
}

/// A run's place in the listing order of [`RunFilter`]: runs are listed from the greatest
/// key down (newest first, then by id descending).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    /// The run's creation time ([`RunRecord::created_at`]).
    pub created_at: Millis,
    /// The run's id.
    pub id: String,
}

impl RunKey {
    /// The key of `run`.
    #[must_use]
    pub fn of(run: &RunRecord) -> Self {
        Self {
            created_at: run.created_at,
            id: run.id.clone(),
        }
    }
}

/// How many runs of one agent version recorded one graph fingerprint
/// ([`HistoryStore::count_versions`](super::HistoryStore::count_versions)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionCount {
    /// Their agent version ([`RunRecord::agent_version`]).
    pub agent_version: u32,
    /// The graph fingerprint they recorded ([`RunRecord::fingerprint`]).
    pub fingerprint: String,
    /// How many runs.
    pub runs: u64,
}

/// A tool's switch in the tool registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSwitch {
    /// The tool's name.
    pub tool: String,
    /// Whether calls are allowed.
    pub enabled: bool,
    /// Why it was switched.
    pub reason: Option<String>,
    /// When.
    pub updated_at: Millis,
}

/// What to prune ([`OperatorStore::prune`](super::OperatorStore::prune)).
///
/// A run's versions before its cutoff are removed, and the first kept version becomes a
/// snapshot, so that every kept version still replays and the kept chain still verifies
/// (anchored at its first row, see [`verify`](super::verify)). The cutoff keeps at least the
/// last [`keep_last_versions`](Self::keep_last_versions) versions and, with
/// [`keep_versions_since`](Self::keep_versions_since), every version committed since then
/// (time travel within that window). Journal entries of removed versions go too, except
/// the saga's (completed hybrid calls, compensations, children) of runs not final.
///
/// With [`delete_final_before`](Self::delete_final_before), final runs not updated since
/// then are deleted whole (run, versions, journal, signals, labels), except a final child
/// whose parent is not final (the parent may still read its result) and a final run with
/// a child not final.
///
/// Idempotent, and bounded by [`max_runs`](Self::max_runs): several callers (a worker's
/// retention in each of several processes) may prune the same store at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at least this many most recent versions of every run (the current one always).
    pub keep_last_versions: u64,
    /// Only prune runs in a final status (completed, compensated, failed...) when true.
    pub only_final_runs: bool,
    /// Keep every version committed at or after this time too (`None`: only
    /// `keep_last_versions` counts).
    pub keep_versions_since: Option<Millis>,
    /// Delete final runs last updated before this time (`None`: delete no run).
    pub delete_final_before: Option<Millis>,
    /// Prune at most this many runs' versions, and delete at most this many runs, in one
    /// call (`None`: all there are).
    pub max_runs: Option<usize>,
}

/// What [`OperatorStore::prune`](super::OperatorStore::prune) removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Versions removed (those of deleted runs not counted).
    pub versions_removed: u64,
    /// Journal entries removed (those of deleted runs not counted).
    pub entries_removed: u64,
    /// Runs whose older versions were removed.
    #[serde(default)]
    pub runs_pruned: u64,
    /// Final runs deleted whole.
    #[serde(default)]
    pub runs_deleted: u64,
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

/// The stored versions of a run (see [`HistoryStore::version_span`](super::HistoryStore::version_span)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSpan {
    /// Oldest stored version.
    pub first: u64,
    /// Newest stored version.
    pub last: u64,
    /// How many versions are stored.
    pub count: u64,
}

/// What a claim read besides the run, for the worker about to resume it
/// ([`RunStore::claim_next`](super::RunStore::claim_next)): what the runner
/// would otherwise read with statements of its own before the run's first step. Read in
/// the claim's statement, while the new lease already holds the run, so none of it can
/// change under the runner (only a lease holder commits or journals, and only the
/// runner consumes a signal).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimReads {
    /// The run's stored versions, as [`HistoryStore::version_span`](super::HistoryStore::version_span)
    /// answers.
    pub span: Option<VersionSpan>,
    /// Whether the journal holds an entry at the run's current version (a step
    /// interrupted after a tool call); when not, the first step does not read it.
    pub journaled_at_version: bool,
    /// The signals pending for a waiting run, oldest first, as
    /// [`HistoryStore::pending_signals`](super::HistoryStore::pending_signals) answers; `None` when not
    /// read (the run does not wait). A signal sent after the claim is not here: the runner
    /// reads them again when none of these is the one it waits for.
    pub pending_signals: Option<Vec<SignalRecord>>,
}

impl ClaimReads {
    /// What a run just created holds: its start version, no journal, no signals (nothing
    /// can be sent to a run before it exists, and a new run does not wait).
    #[must_use]
    pub fn created() -> Self {
        Self {
            span: Some(VersionSpan {
                first: 0,
                last: 0,
                count: 1,
            }),
            journaled_at_version: false,
            pending_signals: None,
        }
    }
}

/// A claimed run: its lease, its record, and what the claim read for its resumption
/// (`None` when the store reads nothing more with a claim).
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    /// The new lease.
    pub lease: Lease,
    /// The run as claimed.
    pub record: RunRecord,
    /// What the claim read besides the run.
    pub reads: Option<ClaimReads>,
}

#[cfg(test)]
mod tests {
    use super::{CallStatus, EntryKind, RunStatus, TransitionKind};
    use crate::tool::ToolKind;

    /// The stored names are a storage format: they are the serde names, and they never change.
    #[test]
    fn stored_names_are_the_serde_names_and_stay_put() {
        fn pinned<T>(
            all: &[T],
            names: &[&str],
            as_str: fn(&T) -> &'static str,
            parse: fn(&str) -> Option<T>,
        ) where
            T: serde::Serialize + PartialEq + std::fmt::Debug,
        {
            for (value, name) in all.iter().zip(names) {
                assert_eq!(as_str(value), *name);
                assert_eq!(serde_json::to_value(value).unwrap(), *name);
                assert_eq!(parse(name).as_ref(), Some(value));
            }
            assert_eq!(all.len(), names.len());
        }
        pinned(
            &RunStatus::ALL,
            &[
                "running",
                "waiting",
                "completed",
                "compensating",
                "compensated",
                "failed",
                "quarantined",
                "dead_lettered",
                "cancelled",
                "terminated",
            ],
            |s| s.as_str(),
            RunStatus::parse,
        );
        pinned(
            &[
                EntryKind::Tool,
                EntryKind::Decision,
                EntryKind::Compensation,
            ],
            &["tool", "decision", "compensation"],
            |s| s.as_str(),
            EntryKind::parse,
        );
        pinned(
            &[
                CallStatus::Started,
                CallStatus::Succeeded,
                CallStatus::Failed,
            ],
            &["started", "succeeded", "failed"],
            |s| s.as_str(),
            CallStatus::parse,
        );
        pinned(
            &[
                TransitionKind::Start,
                TransitionKind::Step,
                TransitionKind::Error,
                TransitionKind::Status,
                TransitionKind::Cancel,
                TransitionKind::Terminate,
                TransitionKind::Repair,
                TransitionKind::Migrated,
                TransitionKind::SignalDropped,
            ],
            &[
                "start",
                "step",
                "error",
                "status",
                "cancel",
                "terminate",
                "repair",
                "migrated",
                "signal_dropped",
            ],
            |s| s.as_str(),
            TransitionKind::parse,
        );
        pinned(
            &[ToolKind::Read, ToolKind::Write, ToolKind::Hybrid],
            &["read", "write", "hybrid"],
            |k| k.as_str(),
            |s| s.parse().ok(),
        );
        assert_eq!(ToolKind::Hybrid.to_string(), "hybrid");
        assert_eq!(RunStatus::parse("Running"), None);
        assert_eq!(RunStatus::DeadLettered.to_string(), "dead_lettered");
    }
}
