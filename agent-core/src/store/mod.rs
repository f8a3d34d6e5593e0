//! The `Store` contract: what every backend guarantees, and the records it keeps.
//!
//! A backend (in-memory here, PostgreSQL in `agent-pg`, SQLite in `agent-sqlite`) keeps runs,
//! their versions, a journal of tool calls and LLM decisions, signals, leases, the tool
//! registry and each agent's graph. The runner relies on these guarantees, and the
//! [conformance suite](crate::conformance) checks them for every backend:
//!
//! 1. Versions of a run form one chain `0, 1, 2, …` with no gap, duplicate or fork:
//!    [`Store::commit_step`] is a compare-and-set on `(version, epoch)`.
//! 2. Only the holder of the current lease epoch may write: every write that belongs to a
//!    step ([`Store::record_entry`], [`Store::commit_step`]) carries the [`Lease`], and a stale
//!    epoch gets [`StoreError::LeaseLost`]. A worker that sees it stops.
//! 3. Journal entries are durable as soon as `record_entry` returns, before the step commits:
//!    a completed write is never executed again; a decision is never asked again.
//! 4. Storage grows linearly with the number of steps: versions are stored as deltas with
//!    snapshots spaced by size (see [`history`]), and [`Store::prune`] removes old ones.

pub mod heads;
pub mod history;
pub mod memory;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::GraphDescription;
use crate::tool::{ErrorClass, ToolKind};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
}

impl RunStatus {
    /// All statuses, for parsing and listing.
    pub const ALL: [Self; 8] = [
        Self::Running,
        Self::Waiting,
        Self::Completed,
        Self::Compensating,
        Self::Compensated,
        Self::Failed,
        Self::Quarantined,
        Self::DeadLettered,
    ];

    /// The stored name (`running`, `dead_lettered`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Compensating => "compensating",
            Self::Compensated => "compensated",
            Self::Failed => "failed",
            Self::Quarantined => "quarantined",
            Self::DeadLettered => "dead_lettered",
        }
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
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
        )
    }

    /// Whether a worker may pick the run up (running or compensating).
    #[must_use]
    pub const fn is_runnable(self) -> bool {
        matches!(self, Self::Running | Self::Compensating)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's failure, stored with the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// Stable code: `tool.timeout`, `handler`, `budget`, `routing`, `state.corrupt`,
    /// `graph.incompatible`, `compensation.failed`, `crash_loop`, ...
    pub code: String,
    /// What happened, for a person.
    pub message: String,
}

/// One run, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// For waiting runs: the signal name.
    pub waiting_for: Option<String>,
    /// For waiting runs with a timeout, and for runs backing off: when to wake.
    pub wake_at: Option<Millis>,
    /// The failure, if any.
    pub error: Option<RunError>,
    /// The current lease epoch (0 before the first claim).
    pub epoch: u64,
    /// The worker holding the lease, while it is held.
    pub lease_owner: Option<String>,
    /// When the lease expires.
    pub lease_expires_at: Option<Millis>,
    /// How many times a worker claimed the run without committing (crash-loop detection).
    pub claims_without_progress: u32,
    /// For forks: the run and version it was forked from.
    pub parent: Option<(String, u64)>,
    /// Creation time.
    pub created_at: Millis,
    /// Last change.
    pub updated_at: Millis,
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
            error: Some(RunError {
                code: "row.unreadable".to_owned(),
                message,
            }),
            epoch: 0,
            lease_owner: None,
            lease_expires_at: None,
            claims_without_progress: 0,
            parent: None,
            created_at: 0,
            updated_at: 0,
        }
    }
}

/// A run to create.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A tool call made by a handler or chosen by the router.
    Tool,
    /// A decision of the router.
    Decision,
    /// A compensating call of the saga.
    Compensation,
}

impl EntryKind {
    /// Stored name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Decision => "decision",
            Self::Compensation => "compensation",
        }
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Tool, Self::Decision, Self::Compensation]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// The state of a journaled call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Started, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One journaled call: a tool call, a router decision or a compensation.
///
/// Keyed by `(run_id, version, seq)`: `version` is the state version the step started from
/// and `seq` the call's index within the step; recording the same key again replaces the
/// entry (a `started` entry becomes `succeeded`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// When the call started.
    pub started_at: Millis,
    /// When it finished.
    pub finished_at: Option<Millis>,
}

/// Why a step moved the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionKind {
    /// The first version.
    Start,
    /// A declared edge taken by a handler or the router.
    Step,
    /// The state's `on_error` edge.
    Error,
    /// The status changed without a state change (wait, failure, compensation done).
    Status,
}

impl TransitionKind {
    /// Stored name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Step => "step",
            Self::Error => "error",
            Self::Status => "status",
        }
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Start, Self::Step, Self::Error, Self::Status]
            .into_iter()
            .find(|x| x.as_str() == s)
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
    /// For `Waiting`: the signal waited for.
    pub waiting_for: Option<String>,
    /// For `Waiting` with a timeout: when to wake.
    pub wake_at: Option<Millis>,
    /// The failure, for failed, compensating and quarantined runs.
    pub error: Option<RunError>,
    /// A signal consumed by this step, marked delivered in the same transaction.
    pub consumed_signal: Option<i64>,
}

/// One committed version, as history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

/// A signal sent to a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this agent.
    pub agent: Option<String>,
    /// Only these statuses (all when empty).
    pub statuses: Vec<RunStatus>,
    /// At most this many, newest first (all when `None`).
    pub limit: Option<usize>,
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

/// What to prune.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at least this many most recent versions of every run (the current one always).
    pub keep_last_versions: u64,
    /// Only prune runs in a final status (completed, compensated, failed...) when true.
    pub only_final_runs: bool,
}

/// What [`Store::prune`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Versions removed.
    pub versions_removed: u64,
    /// Journal entries removed.
    pub entries_removed: u64,
}

/// Errors of a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No run with this id.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// The caller's lease epoch is no longer current: another worker took over. Stop.
    #[error("lease on run `{run_id}` lost: epoch {epoch} is stale")]
    LeaseLost {
        /// The run.
        run_id: String,
        /// The stale epoch.
        epoch: u64,
    },
    /// The run moved past the expected version: someone else committed first. Stop.
    #[error("version conflict on run `{run_id}`: expected {expected}, found {found}")]
    Conflict {
        /// The run.
        run_id: String,
        /// What the caller expected.
        expected: u64,
        /// What is stored.
        found: u64,
    },
    /// A run with this id exists with other content (different agent or initial state).
    #[error("run `{0}` already exists with other content")]
    AlreadyExists(String),
    /// Stored data that cannot be read (corrupted row).
    #[error("corrupt data in run `{run_id}`: {message}")]
    Corrupt {
        /// The run.
        run_id: String,
        /// What is wrong.
        message: String,
    },
    /// The database could not be reached or failed; the operation may be retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Anything else from the backend.
    #[error("store error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// The state of one version, for time travel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateAtVersion {
    /// The version.
    pub version: u64,
    /// The state's name.
    pub state_name: String,
    /// The state.
    pub state: Value,
}

/// The durable storage of runs. Every method documents what it guarantees; the
/// [conformance suite](crate::conformance) checks each guarantee for every backend.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Store an agent's graph under `(agent, fingerprint)`; idempotent. Lets tools without
    /// the agent's code (`agentctl`) draw it.
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError>;

    /// The most recently registered graph of an agent, or the one with this fingerprint.
    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError>;

    /// Names of the registered agents, sorted.
    async fn agents(&self) -> Result<Vec<String>, StoreError>;

    /// Create a run at version 0 (status running), recording the `start` transition.
    /// Idempotent on `id`: creating an existing run with the same agent and initial state
    /// returns it unchanged; with other content, [`StoreError::AlreadyExists`].
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError>;

    /// The run, or `None`.
    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Take the run's lease for `worker` if it is free, expired, or already `worker`'s.
    /// Every successful claim increments the epoch (fencing any earlier holder) and
    /// `claims_without_progress`. Returns `None` while another worker holds a live lease,
    /// or when the run is final.
    async fn claim_run(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, RunRecord)>, StoreError>;

    /// Claim up to `limit` runnable runs of these agents (running or compensating; waiting
    /// runs whose signal has arrived or whose `wake_at` passed) whose lease is free or
    /// expired, oldest first, skipping runs locked by other claimers. Each claim counts as in
    /// [`claim_run`](Self::claim_run).
    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<(Lease, RunRecord)>, StoreError>;

    /// Extend a held lease. [`StoreError::LeaseLost`] if the epoch is no longer current.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError>;

    /// Give the lease up (after a commit that leaves the run waiting or final, or on shutdown).
    /// Resets `claims_without_progress`: a worker that releases its lease did not crash.
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Give a claimed run back without having executed anything for it: the lease is
    /// released and this claim is not counted (`claims_without_progress` goes back down by
    /// one). A [`Worker`](crate::runner::Worker) hands back the runs it claimed together
    /// with a suspect it must run alone, so that waiting for their turn never pushes them
    /// towards dead-lettering. Like `release_lease`, nothing happens when the epoch is no
    /// longer current; unlike it, other workers are not woken (the run is no more runnable
    /// than before it was claimed).
    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Expire every live lease that `worker` holds on a run that is not final, and wake the
    /// workers; returns how many. The runs become claimable at once, by any worker, instead
    /// of when their leases run out. Epochs and claim counts are kept: the next claim fences
    /// the old holder out and counts against the run as any takeover does.
    ///
    /// For a worker that restarts under the same, stable id
    /// ([`WorkerConfig::expire_own_leases_at_start`](crate::runner::WorkerConfig)): what its
    /// previous process held, nobody is running any more.
    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError>;

    /// Durably record (insert or replace) a journal entry, fenced by the lease epoch.
    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError>;

    /// The journal of a run, ordered by `(version, seq)`; only `version` when given.
    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError>;

    /// Commit one step atomically: check `expected_version` and the lease epoch, write the
    /// new version (+1), its transition record (hash-chained), the run row, and mark the
    /// consumed signal. A stale writer gets [`StoreError::LeaseLost`] or
    /// [`StoreError::Conflict`] and nothing is written. Resets `claims_without_progress`.
    ///
    /// A commit to a final status also ends the lease (owner and expiry cleared in the same
    /// write), which saves every finished run a release; nobody needs waking for a final
    /// run. The returned record shows it, and the runner releases only a lease that is
    /// still held.
    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
    ) -> Result<RunRecord, StoreError>;

    /// Every committed transition of a run, by version.
    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError>;

    /// The state at `version` (time travel); `None` if never committed or pruned.
    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError>;

    /// A new run `new_id` starting at version 0 from `run_id`'s state at `version`.
    async fn fork(&self, run_id: &str, version: u64, new_id: &str)
    -> Result<RunRecord, StoreError>;

    /// Runs matching the filter, newest first. A row that cannot be read is listed as
    /// [`RunRecord::unreadable`], not as an error for the whole listing.
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;

    /// Send a signal; kept until a waiting step consumes it (also when sent early).
    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError>;

    /// Signals of a run not yet consumed, oldest first.
    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError>;

    /// Quarantine the run this lease holds, without writing a version (for a run whose
    /// stored history does not allow one), and end the lease, in one write fenced by the
    /// epoch: no other worker can claim the run in between. [`StoreError::LeaseLost`] when
    /// the epoch moved.
    async fn quarantine(&self, lease: &Lease, error: RunError) -> Result<RunRecord, StoreError>;

    /// Put a run that is not held by a live lease into `status` with `error` (quarantine,
    /// dead-letter), or back to running for an operator's retry (clearing the error).
    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunError>,
    ) -> Result<RunRecord, StoreError>;

    /// Remove old versions and their journal by policy; resume keeps working.
    async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError>;

    /// Switch a tool on or off for every run.
    async fn set_tool_enabled(
        &self,
        tool: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;

    /// The tool registry.
    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError>;

    /// Whether a tool may be called (tools never switched are enabled).
    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError>;

    /// Wait until there may be work (a notification), or `timeout`. Backends without
    /// notifications sleep.
    async fn wait_for_work(&self, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }

    /// The first and last stored versions of a run and how many there are, or `None` when
    /// it has none. A consistent run has `last == run.version` and
    /// `count == last - first + 1` (`first > 0` only after pruning). The runner checks it
    /// when it claims a run, so a regressed or gapped history (a restored backup, a manual
    /// edit) is quarantined before any tool call. The default reads the whole history.
    async fn version_span(&self, run_id: &str) -> Result<Option<VersionSpan>, StoreError> {
        let history = self.history(run_id).await?;
        Ok(match (history.first(), history.last()) {
            (Some(first), Some(last)) => Some(VersionSpan {
                first: first.version,
                last: last.version,
                count: history.len() as u64,
            }),
            _ => None,
        })
    }

    /// Per-tool call statistics over the calls started at or after `since`: count,
    /// failures by error code, average, p50 and p99 duration. SQL backends compute it in
    /// SQL; the default reads every run's journal.
    async fn tool_stats(&self, since: Millis) -> Result<Vec<ToolStats>, StoreError> {
        let runs = self.list_runs(&RunFilter::default()).await?;
        let mut entries = Vec::new();
        for run in runs {
            entries.extend(self.journal(&run.id, None).await?);
        }
        Ok(compute_tool_stats(&entries, since))
    }

    /// Bytes used by this run's rows (state versions, journal, outputs), for the
    /// storage-growth check; `None` when the backend cannot tell.
    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let _ = run_id;
        Ok(None)
    }
}

/// What a transition's hash covers: every field of its record except the commit time (the
/// database sets it after the hash is computed) and the hash itself, plus the state the
/// transition entered, in full.
#[derive(Clone, Copy, Debug)]
pub struct ChainLink<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The version the transition created.
    pub version: u64,
    /// Left.
    pub from_state: &'a str,
    /// Entered.
    pub to_state: &'a str,
    /// Why.
    pub kind: TransitionKind,
    /// The status after it.
    pub status: RunStatus,
    /// The lease epoch of the writer.
    pub epoch: u64,
    /// The state at this version.
    pub state: &'a Value,
}

impl TransitionRecord {
    /// What this record's hash covers, given the state at its version.
    #[must_use]
    pub fn link<'a>(&'a self, state: &'a Value) -> ChainLink<'a> {
        ChainLink {
            run_id: &self.run_id,
            version: self.version,
            from_state: &self.from_state,
            to_state: &self.to_state,
            kind: self.kind,
            status: self.status,
            epoch: self.epoch,
            state,
        }
    }
}

impl StepCommit {
    /// What the hash of this commit's transition covers, written under `lease`.
    #[must_use]
    pub fn link<'a>(&'a self, lease: &'a Lease) -> ChainLink<'a> {
        ChainLink {
            run_id: &lease.run_id,
            version: self.expected_version + 1,
            from_state: &self.from_state,
            to_state: &self.to_state,
            kind: self.kind,
            status: self.status,
            epoch: lease.epoch,
            state: &self.state,
        }
    }
}

impl NewRun {
    /// What the hash of the run's first transition (version 0) covers.
    #[must_use]
    pub fn link(&self) -> ChainLink<'_> {
        ChainLink {
            run_id: &self.id,
            version: 0,
            from_state: &self.state_name,
            to_state: &self.state_name,
            kind: TransitionKind::Start,
            status: RunStatus::Running,
            epoch: 0,
            state: &self.state,
        }
    }
}

/// The hash chaining a transition to the previous one: SHA-256 over the previous hash and
/// everything in `link`, hex. Changing any of them, or the previous hash, changes it.
#[must_use]
pub fn transition_hash(prev_hash: &str, link: &ChainLink<'_>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    chain_head(&mut h, prev_hash, link);
    h.update(link.kind.as_str().as_bytes());
    h.update([0]);
    h.update(link.status.as_str().as_bytes());
    h.update([0]);
    h.update(link.epoch.to_be_bytes());
    h.update(canonical_json(link.state).as_bytes());
    hex::encode(h.finalize())
}

/// The hash that builds before kind, status and epoch were chained wrote: the same without
/// those three. `agentctl verify` accepts it for rows written then, and says how many it
/// found; those rows are tamper-evident in everything but the three.
#[must_use]
pub fn legacy_transition_hash(prev_hash: &str, link: &ChainLink<'_>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    chain_head(&mut h, prev_hash, link);
    h.update(canonical_json(link.state).as_bytes());
    hex::encode(h.finalize())
}

/// The fields both hashes start with, each ended by a 0 byte or of fixed width.
fn chain_head(h: &mut sha2::Sha256, prev_hash: &str, link: &ChainLink<'_>) {
    use sha2::Digest;
    h.update(prev_hash.as_bytes());
    h.update([0]);
    h.update(link.run_id.as_bytes());
    h.update([0]);
    h.update(link.version.to_be_bytes());
    h.update(link.from_state.as_bytes());
    h.update([0]);
    h.update(link.to_state.as_bytes());
    h.update([0]);
}

/// Canonical JSON: object keys sorted at every depth, no whitespace. Used for input hashes
/// and the transition hash, so a hash does not depend on how a map happened to be ordered.
/// Strings and numbers are written exactly as `serde_json` writes them; stored hashes depend
/// on these bytes, so they must never change.
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    leaf(key, out);
                    out.push(b':');
                    write(item, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            other => leaf(other, out),
        }
    }
    // Written in place: this runs on every commit and every journaled call, and a
    // temporary string per key and per value was most of its cost.
    fn leaf<T: Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
        serde_json::to_writer(out, v).expect("writing JSON into memory cannot fail");
    }
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// SHA-256 of the canonical JSON of `value`, hex.
#[must_use]
pub fn input_hash(value: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// The idempotency key of a write, hybrid or compensating call: derived from the run, the
/// state version and the call index, never from the attempt.
#[must_use]
pub fn idempotency_key(run_id: &str, version: u64, seq: u32) -> String {
    format!("{run_id}:{version}:{seq}")
}

/// What makes two [`Store::create_run`] calls with the same id "the same run": SHA-256 over
/// the agent's name, the initial state's name and the canonical JSON of the initial state,
/// hex. Backends store it with the run to answer idempotent creation without the initial
/// version (which retention may prune).
#[must_use]
pub fn creation_hash(run: &NewRun) -> String {
    input_hash(&serde_json::json!([run.agent, run.state_name, run.state]))
}

/// The stored versions of a run (see [`Store::version_span`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSpan {
    /// Oldest stored version.
    pub first: u64,
    /// Newest stored version.
    pub last: u64,
    /// How many versions are stored.
    pub count: u64,
}

/// Call statistics of one tool (see [`Store::tool_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    /// The tool (or `router` for decisions).
    pub tool: String,
    /// Tool call, decision or compensation.
    pub kind: Option<EntryKind>,
    /// Finished calls.
    pub calls: u64,
    /// Failed calls.
    pub failures: u64,
    /// Mean duration.
    pub avg_ms: f64,
    /// Median duration.
    pub p50_ms: u64,
    /// 99th percentile duration.
    pub p99_ms: u64,
    /// Failures by error code.
    pub errors_by_code: std::collections::BTreeMap<String, u64>,
}

/// [`ToolStats`] from journal entries (finished ones started at or after `since`), sorted
/// by tool name. Percentiles are nearest-rank.
#[must_use]
pub fn compute_tool_stats(entries: &[JournalEntry], since: Millis) -> Vec<ToolStats> {
    let mut by_tool: std::collections::BTreeMap<(String, &'static str), (Vec<u64>, ToolStats)> =
        std::collections::BTreeMap::new();
    for e in entries {
        if e.started_at < since || e.status == CallStatus::Started {
            continue;
        }
        let (durations, stats) = by_tool
            .entry((e.name.clone(), e.kind.as_str()))
            .or_insert_with(|| {
                (
                    Vec::new(),
                    ToolStats {
                        tool: e.name.clone(),
                        kind: Some(e.kind),
                        ..ToolStats::default()
                    },
                )
            });
        durations.push(e.duration_ms);
        stats.calls += 1;
        if e.status == CallStatus::Failed {
            stats.failures += 1;
            let code = e.error_code.clone().unwrap_or_else(|| "unknown".to_owned());
            *stats.errors_by_code.entry(code).or_default() += 1;
        }
    }
    by_tool
        .into_values()
        .map(|(mut d, mut stats)| {
            d.sort_unstable();
            let rank = |p: f64| {
                let n = d.len();
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
                d[i]
            };
            #[allow(clippy::cast_precision_loss)]
            {
                stats.avg_ms = d.iter().sum::<u64>() as f64 / d.len() as f64;
            }
            stats.p50_ms = rank(0.50);
            stats.p99_ms = rank(0.99);
            stats
        })
        .collect()
}
