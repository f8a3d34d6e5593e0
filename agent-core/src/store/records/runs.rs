//! Runs: a run as stored, its status and failure, a run to create, and the listing order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Budget, Millis, OperatorNote, Spend};
use crate::store::WaitingFor;
use crate::store::failure_code::FailureCode;

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
    /// Cancelled by an operator ([`OperatorStore::cancel_run`](crate::store::OperatorStore::cancel_run)), its
    /// compensations completed.
    Cancelled,
    /// Stopped by an operator ([`OperatorStore::terminate_run`](crate::store::OperatorStore::terminate_run)) without
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

/// `code: message`, the code once where the message already starts with it (a tool's
/// failure reads `tool.permanent (Charge): card declined`): how `agentctl`, the inspector
/// and the examples show a failure on one line.
impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = self.code.to_string();
        if self.message.starts_with(&code) {
            f.write_str(&self.message)
        } else {
            write!(f, "{code}: {}", self.message)
        }
    }
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
    /// `cancel` transition at its next commit ([`OperatorStore::cancel_run`](crate::store::OperatorStore::cancel_run)).
    pub cancel_requested: Option<OperatorNote>,
    /// The version of the agent the run is on ([`Agent::VERSION`](crate::Agent::VERSION)):
    /// the one it was started with, or the one a `migrated` transition moved it to
    /// ([`RunStore::migrate_run`](crate::store::RunStore::migrate_run)).
    #[serde(default = "first_agent_version")]
    pub agent_version: u32,
    /// The version at which the run was last migrated
    /// ([`RunStore::migrate_run`](crate::store::RunStore::migrate_run)); with
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
    /// What the run spent, through its last committed step.
    #[serde(default)]
    pub spend: Spend,
    /// The run's budget: set at its start, raised by an operator
    /// ([`OperatorStore::set_budget`](crate::store::OperatorStore::set_budget)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
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
            spend: Spend::default(),
            budget: None,
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

/// A run's row as far as it reads ([`HistoryStore::inspect_run`](crate::store::HistoryStore::inspect_run)), for
/// diagnosing a run whose record does not.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InspectedRun {
    /// The record: whole when the row reads; else every field that reads as stored and the
    /// state `Null`. Nothing may execute from a record that did not read.
    pub record: RunRecord,
    /// Why the row does not read, or `None` when it does.
    pub unreadable: Option<String>,
}

/// How many runs carry one value of a label, and when the newest of them was created
/// ([`HistoryStore::count_label_values`](crate::store::HistoryStore::count_label_values)):
/// what `agentctl triggers` lists, one line per trigger that started runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelValueCount {
    /// The label's value.
    pub value: String,
    /// How many runs carry it.
    pub runs: u64,
    /// The creation time of the newest of them.
    pub last_created_at: Millis,
}

/// A run's labels: key/value pairs set at creation, for finding runs
/// ([`RunFilter::labels`]); see [`validate_labels`](crate::store::validate_labels) for what a key
/// and a value may hold.
pub type Labels = BTreeMap<String, String>;

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
    /// The run's budget ([`NewRun::with_budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// Which step of which run started a child run: the parent's id and the version its step
/// began at. A parent waiting for its children
/// ([`WAIT_ALL_CHILDREN`](crate::store::WAIT_ALL_CHILDREN), [`WAIT_FIRST_CHILD`](crate::store::WAIT_FIRST_CHILD)) waits for the runs spawned by it at
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
            budget: None,
        }
    }

    /// With a budget for the whole run; `None` or an unlimited one: none.
    #[must_use]
    pub fn with_budget(mut self, budget: Option<Budget>) -> Self {
        self.budget = budget.filter(|b| !b.is_unlimited());
        self
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

#[cfg(test)]
mod tests {
    use super::RunFailure;

    #[test]
    fn a_failure_names_its_code_once() {
        let failure = |code: &str, message: &str| RunFailure {
            code: code.into(),
            message: message.to_owned(),
        };
        assert_eq!(
            failure("tool.permanent", "tool.permanent (Charge): card declined").to_string(),
            "tool.permanent (Charge): card declined"
        );
        assert_eq!(
            failure("handler", "the handler returned an error").to_string(),
            "handler: the handler returned an error"
        );
    }
}
