//! What a store operation can fail with.

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
    /// An operator asked to cancel the run while this step ran: the step is not committed.
    /// The lease holder takes the cancel instead ([`RunStore::accept_cancel`](super::RunStore::accept_cancel)).
    #[error("run `{0}` is being cancelled: the step was not committed")]
    CancelRequested(String),
    /// An operator's action on a run in a final status other than the one it leads to.
    #[error("run `{run_id}` is {status}: it cannot be {action}")]
    RunIsFinal {
        /// The run.
        run_id: String,
        /// Its final status.
        status: super::RunStatus,
        /// What was asked: `cancelled` or `terminated`.
        action: &'static str,
    },
    /// An operator's action that must not race the worker holding the run (a live lease):
    /// try again once the lease is released or has expired.
    #[error("run `{run_id}` is held by a worker's live lease: {action} waits until it is released")]
    RunIsHeld {
        /// The run.
        run_id: String,
        /// What was asked (`dropping a signal`).
        action: &'static str,
    },
    /// No signal of this id is pending on the run: it does not exist, belongs to another
    /// run, or was consumed (or dropped) already.
    #[error("run `{run_id}` has no pending signal #{signal_id}")]
    NoPendingSignal {
        /// The run.
        run_id: String,
        /// The signal's id.
        signal_id: i64,
    },
    /// A label whose key or value is not allowed ([`validate_labels`](super::validate_labels)).
    #[error("invalid label: {0}")]
    InvalidLabel(String),
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}
