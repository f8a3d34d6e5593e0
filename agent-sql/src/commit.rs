//! The planning of a step commit, the same on both stores: from the run's head (cached or
//! read) to the version's payload and chained hash, and from what the statement changed to
//! the run's record after the commit.

use agent_core::store::history::{self, VersionPayload};
use agent_core::store::operator::OperatorTransition;
use agent_core::store::{
    ChainLink, JournalEntry, Lease, MigrationCommit, RunRecord, StepCommit, StoreError,
    transition_hash,
};

use crate::heads::{HeadCache, RunHead, commit_refusal};
use crate::reads::{Arg, SqlReads};
use crate::rows::{Applied, SqlRow, stored_run};
use crate::to_i64;

/// The head a commit under `lease` expecting version `expected` starts from: the one
/// `heads` remembers at that version, else the run row as read, outside the commit's
/// write (its compare-and-set still decides: a head the run has moved past writes
/// nothing).
///
/// # Errors
/// [`StoreError::NotFound`] without a row; [`StoreError::Corrupt`] for a row that does
/// not read; what [`commit_refusal`] says when the stored version or epoch already refuses
/// the commit, and [`StoreError::CancelRequested`] when an operator's cancel waits (the
/// statement's compare-and-set still decides, but this says no before any work).
pub async fn commit_head<S: SqlReads>(
    store: &S,
    heads: &HeadCache,
    lease: &Lease,
    expected: u64,
) -> Result<RunHead, StoreError> {
    if let Some(cached) = heads.at(&lease.run_id, expected) {
        return Ok(cached);
    }
    // Rare (a head is remembered from the run's claim on), and through the store's boxed
    // `fetch`: a worker holds a commit's future for each run whose commit waits in the
    // group commit's queue, and this read's space would be part of it.
    let rows = store
        .fetch(S::LOAD_RUN, &[Arg::Text(&lease.run_id)])
        .await?;
    read_head(rows.first(), lease, expected)
}

/// [`commit_head`] from the run row as read (`None`: the run does not exist).
fn read_head(
    row: Option<&impl SqlRow>,
    lease: &Lease,
    expected: u64,
) -> Result<RunHead, StoreError> {
    let row = row.ok_or_else(|| StoreError::NotFound(lease.run_id.clone()))?;
    let head = stored_run(row)?.head;
    let stored = Some((head.record.version, head.record.epoch));
    match commit_refusal(lease, expected, stored) {
        Some(refused) => Err(refused),
        None if head.record.cancel_requested.is_some() => {
            Err(StoreError::CancelRequested(lease.run_id.clone()))
        }
        None => Ok(head),
    }
}

/// A step commit planned from its run's head: what to write, and what to remember after.
#[derive(Debug)]
pub struct CommitPlan {
    base: RunRecord,
    /// The version the commit writes (`expected_version + 1`).
    pub version: u64,
    /// The transition's hash, chained to the head's.
    pub hash: String,
    /// Bytes of patches since the last snapshot, this version's included (`0` after a
    /// snapshot).
    pub patch_bytes: u64,
}

impl CommitPlan {
    /// Plan `commit` under `lease` on `head`: the payload of the new version (a JSON Patch
    /// from the head's state, or a snapshot when the patches since the last one have grown
    /// large), returned apart so that a store can move it into its statement.
    #[must_use]
    pub fn new(head: RunHead, lease: &Lease, commit: &StepCommit) -> (Self, VersionPayload) {
        Self::linked(head, commit, &commit.link(lease))
    }

    /// Plan an operator's transition on `head` (see [`CommitPlan::new`]); its hash covers
    /// the operator's note. The run it leads to has no cancel request left.
    #[must_use]
    pub fn operator(mut head: RunHead, t: &OperatorTransition) -> (Self, VersionPayload) {
        head.record.cancel_requested = None;
        let run_id = head.record.id.clone();
        Self::linked(head, &t.commit, &t.link(&run_id))
    }

    fn linked(head: RunHead, commit: &StepCommit, link: &ChainLink<'_>) -> (Self, VersionPayload) {
        let (payload, patch_bytes) =
            history::encode(Some(&head.record.state), &commit.state, head.patch_bytes);
        let mut base = head.record;
        // The diff was its only use (the run after the commit has the commit's state): a
        // plan waits in the group commit's queue, once per run in flight.
        base.state = serde_json::Value::Null;
        let plan = Self {
            version: commit.expected_version + 1,
            hash: transition_hash(&head.last_hash, link),
            patch_bytes,
            base,
        };
        (plan, payload)
    }

    /// The run as of the head the commit is based on, without its state (`Null`: the
    /// commit's patch is computed from it already).
    #[must_use]
    pub fn base(&self) -> &RunRecord {
        &self.base
    }

    /// The run after the commit applied, remembered in `heads` as its new head. The
    /// statement returns only what it changed beyond the commit itself (`applied`); the
    /// rest is the head this commit was based on.
    #[must_use]
    pub fn applied(
        self,
        lease: &Lease,
        commit: &StepCommit,
        applied: Applied,
        heads: &HeadCache,
    ) -> RunRecord {
        self.applied_with(lease, commit, applied, heads, |_| {})
    }

    /// The run after the `migrated` version of `m` applied (as [`applied`](Self::applied),
    /// `commit` being the migration's transition under `lease`), with the agent version,
    /// fingerprint and resume base the migration wrote on the row, remembered in `heads`
    /// as its new head.
    #[must_use]
    pub fn migrated(
        self,
        lease: &Lease,
        m: &MigrationCommit,
        commit: &StepCommit,
        applied: Applied,
        heads: &HeadCache,
    ) -> RunRecord {
        self.applied_with(lease, commit, applied, heads, |record| {
            record.agent_version = m.to_agent_version;
            record.fingerprint.clone_from(&m.fingerprint);
            record.migrated_at_version = Some(m.version());
            record.resume_base = m.resume_base;
        })
    }

    fn applied_with(
        self,
        lease: &Lease,
        commit: &StepCommit,
        applied: Applied,
        heads: &HeadCache,
        amend: impl FnOnce(&mut RunRecord),
    ) -> RunRecord {
        let mut record = self.base;
        record.version = self.version;
        record.state_name.clone_from(&commit.to_state);
        record.state = commit.state.clone();
        record.status = commit.status;
        record.waiting_for.clone_from(&commit.waiting_for);
        record.wake_at = commit.wake_at;
        record.error.clone_from(&commit.error);
        if let Some(spend) = commit.spend {
            record.spend = spend;
        }
        record.epoch = lease.epoch;
        record.claims_without_progress = 0;
        record.lease_owner = applied.lease_owner;
        record.lease_expires_at = applied.lease_expires_at;
        record.updated_at = applied.updated_at;
        amend(&mut record);
        heads.remember_record(&mut record, self.hash, self.patch_bytes);
        record
    }
}

/// The parameters `$1` to `$9` of both stores' statements writing an operator's transition
/// on the run row: run, new version, status, error code and message, epoch, whether the
/// lease is kept, hash, patch bytes.
#[must_use]
pub fn operator_args<'a>(
    run_id: &'a str,
    t: &'a OperatorTransition,
    plan: &'a CommitPlan,
) -> [Arg<'a>; 9] {
    let error = t.commit.error.as_ref();
    [
        Arg::Text(run_id),
        Arg::Int(to_i64(plan.version)),
        Arg::Text(t.commit.status.as_str()),
        Arg::OptText(error.map(|e| e.code.as_str())),
        Arg::OptText(error.map(|e| e.message.as_str())),
        Arg::Int(to_i64(t.epoch)),
        Arg::Bool(t.keep_lease),
        Arg::Text(&plan.hash),
        Arg::Int(to_i64(plan.patch_bytes)),
    ]
}

/// Why a commit whose statement matched no row wrote nothing, from the run's stored
/// `(version, epoch)`; `otherwise` when neither explains it.
pub fn refused(
    lease: &Lease,
    expected: u64,
    stored: Option<(u64, u64)>,
    otherwise: impl FnOnce() -> StoreError,
) -> StoreError {
    commit_refusal(lease, expected, stored).unwrap_or_else(otherwise)
}

/// A journal entry is written only under its own run's lease.
///
/// # Errors
/// [`StoreError::Backend`] for an entry of another run.
pub fn check_entry(lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
    if entry.run_id == lease.run_id {
        return Ok(());
    }
    Err(StoreError::backend(format!(
        "journal entry of run `{}` recorded under the lease of run `{}`",
        entry.run_id, lease.run_id
    )))
}
