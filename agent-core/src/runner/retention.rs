//! Retention run by the worker: storage stays bounded without an operator running
//! `agentctl prune` (issue 22).
//!
//! A [`Worker`](super::Worker) with [`WorkerConfig::retention`](super::WorkerConfig) set
//! applies the policy every [`Retention::interval`] while it works, through
//! [`OperatorStore::prune`]: final runs not updated for [`Retention::delete_final_after`] are
//! deleted whole, and versions older than [`Retention::history_window`] are compacted into
//! a snapshot at the first kept version, for every run, final or not.
//!
//! What it keeps:
//! - **Resume**: a run's current version is never removed, nor the saga's journal entries
//!   of a run not final (completed hybrid calls, compensations, children).
//! - **Time travel within the window**: every version committed within
//!   [`Retention::history_window`] stays readable, and the current one always.
//! - **Verification**: the first kept version becomes a snapshot and anchors the kept
//!   chain, which still verifies ([`verify`](crate::store::verify)).
//! - **Several workers**: each pass is bounded ([`Retention::max_runs_per_batch`]) and
//!   idempotent, and every deletion checks its conditions again in the transaction that
//!   deletes, so workers of several processes may apply it to one store at once; the work
//!   of one pass is done once, the others find nothing left.
//! - **Cost**: the SQL stores write a batch in two transactions of a few statements each
//!   (deletion, then compaction), whatever its size, and touch neither a run row nor a
//!   version a commit writes, so a run stepped meanwhile does not wait on retention.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::store::{OperatorStore, PruneReport, RetentionPolicy, Store, StoreError, now_ms};

/// How a worker keeps its store's size bounded ([`WorkerConfig::retention`](super::WorkerConfig)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// How often the worker applies it (the first pass one interval after it starts).
    pub interval: Duration,
    /// Versions committed longer ago than this are removed, the first kept one becoming a
    /// snapshot; every run keeps its current version whatever its age. `None`: versions
    /// are kept.
    pub history_window: Option<Duration>,
    /// Final runs (completed, failed, cancelled…) not updated for this long are deleted,
    /// with their versions, journal, signals and labels. `None`: final runs are kept
    /// (compacted by `history_window`).
    pub delete_final_after: Option<Duration>,
    /// Runs pruned, and runs deleted, per batch at most: a pass runs batches until one is
    /// not full, yielding to the worker's own commits between them.
    pub max_runs_per_batch: usize,
}

impl Default for Retention {
    /// Every minute, a week of history, final runs kept (deleting them is the user's
    /// decision), 500 runs a batch.
    fn default() -> Self {
        Self {
            interval: Duration::from_mins(1),
            history_window: Some(Duration::from_hours(7 * 24)),
            delete_final_after: None,
            max_runs_per_batch: 500,
        }
    }
}

impl Retention {
    /// The policy of a pass starting at `now` (milliseconds).
    #[must_use]
    pub fn policy(&self, now: i64) -> RetentionPolicy {
        let before =
            |age: Duration| now.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        RetentionPolicy {
            // Without a window, no version is removed by age: keep them all.
            keep_last_versions: if self.history_window.is_some() {
                1
            } else {
                u64::MAX
            },
            only_final_runs: false,
            keep_versions_since: self.history_window.map(before),
            delete_final_before: self.delete_final_after.map(before),
            max_runs: Some(self.max_runs_per_batch.max(1)),
        }
    }

    /// One pass: batches of [`OperatorStore::prune`](crate::store::OperatorStore::prune) until one is not full.
    ///
    /// # Errors
    /// The store's error; what the earlier batches did stays done.
    pub async fn apply(&self, store: &dyn OperatorStore) -> Result<PruneReport, StoreError> {
        if self.history_window.is_none() && self.delete_final_after.is_none() {
            return Ok(PruneReport::default());
        }
        let mut total = PruneReport::default();
        let batch = self.max_runs_per_batch.max(1) as u64;
        loop {
            let report = store.prune(&self.policy(now_ms())).await?;
            total.versions_removed += report.versions_removed;
            total.entries_removed += report.entries_removed;
            total.runs_pruned += report.runs_pruned;
            total.runs_deleted += report.runs_deleted;
            if report.runs_pruned < batch && report.runs_deleted < batch {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }

    /// Apply it every [`interval`](Self::interval) until the returned task is aborted
    /// (the worker aborts it when it stops). Errors are logged, and the next pass tries
    /// again.
    pub(crate) fn spawn(self, store: Arc<dyn Store>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.interval.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // `interval` fires at once: the first pass waits one interval.
            ticks.tick().await;
            loop {
                ticks.tick().await;
                match self.apply(store.as_ref()).await {
                    Ok(r) => debug!(
                        versions = r.versions_removed,
                        entries = r.entries_removed,
                        runs_pruned = r.runs_pruned,
                        runs_deleted = r.runs_deleted,
                        "retention pass"
                    ),
                    Err(e) => warn!(error = %e, "retention pass failed; the next one tries again"),
                }
            }
        })
    }
}
