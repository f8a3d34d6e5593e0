//! How a follower reads: below the followers and the hub that wakes them.

use std::time::Duration;

/// How a [`Follower`](super::Follower) reads.
#[derive(Clone, Debug)]
pub struct FollowConfig {
    /// Events read from the store at a time.
    pub batch: usize,
    /// How long to wait for a wake-up before reading anyway.
    pub poll: Duration,
    /// For an agent's or every run's events: how far behind its cursor the follower reads
    /// again, for events of other runs that committed after events it already delivered
    /// (on PostgreSQL, runs committing at the same moment may commit in another order than
    /// their positions). Events are delivered once; within a run, always in order.
    pub settle: Duration,
}

impl Default for FollowConfig {
    fn default() -> Self {
        Self {
            batch: 256,
            poll: Duration::from_secs(1),
            settle: Duration::from_secs(2),
        }
    }
}
