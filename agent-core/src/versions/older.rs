//! What the [`Agent`](crate::Agent) trait says of an agent's older versions, on a floor of
//! its own: the trait names these types, and the rest of [`versions`](super) drives the
//! runner, which drives agents.

use crate::graph::GraphDescription;

/// Why a stored state of an older version could not be brought to this one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MigrationError {
    /// The stored state does not deserialize as the older version's enum.
    #[error("the stored state does not read as `{agent}` version {version}: {message}")]
    Unreadable {
        /// The agent.
        agent: String,
        /// The version it was read as.
        version: u32,
        /// serde's message.
        message: String,
    },
    /// The mapped state does not serialize.
    #[error("the migrated state of `{agent}` version {version} does not serialize: {message}")]
    Unwritable {
        /// The agent.
        agent: String,
        /// The version it was mapped to.
        version: u32,
        /// serde's message.
        message: String,
    },
}

/// An older version an agent can run by migrating its runs (`migrate_from`, transitively).
#[derive(Clone, Debug)]
pub struct OlderVersion {
    /// The version.
    pub version: u32,
    /// Its graph (its fingerprint is the one its runs recorded).
    pub graph: &'static GraphDescription,
    /// Signals of that version's waiting states that the chain from it may leave unwaited
    /// (`skip_signal(...)` on any migration of the chain).
    pub skipped_signals: Vec<&'static str>,
}
