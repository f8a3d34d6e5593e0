//! `OperatorStore::prune` on both SQL stores (retention, issue 22): the batch chosen by reads, then
//! written set-based, a few statements for the whole batch whatever its size, each store
//! binding the batch its own way ([`SqlRetention`]; the statements are
//! [`RetentionSql`]'s, over the dialect's batch expressions).

use std::collections::HashSet;

use agent_core::store::{Millis, PruneReport, RetentionPolicy, StoreError};
use async_trait::async_trait;
use serde_json::Value;

use crate::reads::{self, SqlReads};
#[cfg(doc)]
use crate::sql::RetentionSql;

/// A run of a compaction batch ([`prune_points`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PrunePoint {
    /// The run.
    pub id: String,
    /// The first version kept.
    pub cutoff: u64,
    /// The state at `cutoff`, which becomes a snapshot there.
    pub state: Value,
}

/// What compacting a batch removed ([`SqlRetention::compact`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// The run of each version removed (`RETURNING run_id`).
    pub versions_of: Vec<String>,
    /// Journal entries removed.
    pub entries: u64,
}

/// The writes of retention, in one transaction each, that a SQL store implements with its
/// dialect's binding of a batch (arrays on PostgreSQL, a JSON array on SQLite).
#[async_trait]
pub trait SqlRetention: SqlReads {
    /// Delete the runs `ids` whole, each only if it is still final and last updated before
    /// `before` (checked again by the deleting statement): the runs with
    /// [`RetentionSql::delete_expired_runs`], then their other rows
    /// ([`RetentionSql::delete_runs_rows`]); how many runs were deleted. The store forgets
    /// their cached heads and wakes their followers.
    async fn delete_expired(&self, ids: &[String], before: Millis) -> Result<u64, StoreError>;

    /// Compact the batch `points`: [`RetentionSql`]'s `snapshots`, `versions`, `outputs`
    /// and `journal`, in that order. `points` is not empty.
    async fn compact(&self, points: Vec<PrunePoint>) -> Result<Compacted, StoreError>;
}

/// `OperatorStore::prune`: the final runs `policy` deletes, deleted as one batch, then the runs it
/// compacts, compacted as one batch (at most `policy.max_runs` each).
///
/// Neither write locks a run row a commit writes: the deletion takes final runs only,
/// checked again by its statement, and compaction touches only versions before a cutoff,
/// at or before the run's current version, while a commit appends after it. So a run
/// stepped meanwhile (under a lease, or by several workers applying retention at once) is
/// neither broken nor made to wait; the states at the cutoffs are read before the write,
/// outside it, since stored versions never change. Every read of a pass goes through
/// [`SqlReads::fetch_events`]: on SQLite, whose one write connection serves the runner's
/// commits, a pass's hundreds of reads would otherwise each wait for a turn behind them.
///
/// # Errors
/// The store's error; what an earlier transaction did stays done.
pub async fn prune<S: SqlRetention>(
    store: &S,
    policy: &RetentionPolicy,
) -> Result<PruneReport, StoreError> {
    let mut report = PruneReport::default();
    if let Some(before) = policy.delete_final_before {
        let expired = reads::expired_runs(store, policy).await?;
        if !expired.is_empty() {
            report.runs_deleted = store.delete_expired(&expired, before).await?;
        }
    }
    let points = prune_points(store, policy).await?;
    if points.is_empty() {
        return Ok(report);
    }
    let done = store.compact(points).await?;
    report.versions_removed = done.versions_of.len() as u64;
    report.runs_pruned = done.versions_of.iter().collect::<HashSet<_>>().len() as u64;
    report.entries_removed = done.entries;
    Ok(report)
}

/// The compaction batch of `policy`: its [`prune_candidates`](reads::prune_candidates)
/// with their [`prune_point`](reads::prune_point)s, in id order (the order every worker
/// applying retention at once takes them in); candidates whose cutoff no longer replays
/// are left out.
///
/// # Errors
/// As [`reads::prune_candidates`] and [`reads::prune_point`].
pub async fn prune_points<S: SqlReads>(
    store: &S,
    policy: &RetentionPolicy,
) -> Result<Vec<PrunePoint>, StoreError> {
    let candidates = reads::prune_candidates(store, policy).await?;
    let mut points = Vec::with_capacity(candidates.len());
    for candidate in &candidates {
        if let Some((id, cutoff, at)) = reads::prune_point(store, candidate).await? {
            points.push(PrunePoint {
                id,
                cutoff,
                state: at.state,
            });
        }
    }
    Ok(points)
}
