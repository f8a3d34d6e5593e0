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
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}
