//! What a store operation can fail with.

use std::fmt;
use std::sync::Arc;

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
    /// The database could not be reached or failed; the operation may be retried. The
    /// driver's error, when there is one, is its [`source`](std::error::Error::source).
    #[error("store unavailable: {0}")]
    Unavailable(#[source] BackendError),
    /// Anything else from the backend. The driver's error, when there is one, is its
    /// [`source`](std::error::Error::source).
    #[error("store error: {0}")]
    Backend(#[source] BackendError),
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
    /// A rate limit that can never be met, refused where it is declared.
    #[error("invalid rate limit: {0}")]
    InvalidRateLimit(#[from] super::InvalidRateLimit),
}

impl StoreError {
    /// [`StoreError::Backend`] saying `message`, without a source.
    #[must_use]
    pub fn backend(message: impl Into<String>) -> Self {
        Self::Backend(BackendError::new(message))
    }

    /// [`StoreError::Unavailable`] saying `message`, without a source.
    #[must_use]
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable(BackendError::new(message))
    }

    /// Whether retrying the same operation later may succeed.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// What a backend said when an operation failed, and the error that caused it (the
/// driver's, an I/O error) when there is one: its [`source`](std::error::Error::source),
/// so that a caller can walk the chain or downcast it instead of parsing the message.
/// Cheap to clone (the source is shared), as the group commit answers every write of a
/// failed batch with the same error.
#[derive(Clone)]
pub struct BackendError {
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl BackendError {
    /// An error saying `message`, without a source.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// An error saying `message`, caused by `source`.
    #[must_use]
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// What the backend said.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for BackendError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for BackendError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_error_is_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = StoreError::Unavailable(BackendError::with_source("connection lost", io));
        assert_eq!(e.to_string(), "store unavailable: connection lost");
        let backend = std::error::Error::source(&e).expect("the backend's error");
        let driver = backend.source().expect("the driver's error");
        assert_eq!(
            driver
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionReset)
        );
        assert!(e.is_transient());
        assert!(
            std::error::Error::source(&StoreError::backend("no source"))
                .and_then(std::error::Error::source)
                .is_none()
        );
    }
}
