//! The commit protocol: a step's transition written with its fault points, transient store
//! errors retried, a lost acknowledgement resolved by reading the version back (never by
//! committing twice), an operator's cancel accepted in the step's place, and the lease
//! renewed when half its time is gone.

use std::time::Duration;

use super::{FaultPoint, Inner, RunnerError};
use crate::store::{
    JournalEntry, Lease, RunFailure, RunRecord, RunStatus, StepCommit, StoreError, TransitionKind,
};

impl Inner {
    /// Commit a status-only change (same state, new version).
    pub(crate) async fn commit_status(
        &self,
        lease: &Lease,
        record: &RunRecord,
        status: RunStatus,
        error: Option<RunFailure>,
    ) -> Result<RunRecord, RunnerError> {
        let commit = StepCommit {
            expected_version: record.version,
            from_state: record.state_name.clone(),
            to_state: record.state_name.clone(),
            state: record.state.clone(),
            kind: TransitionKind::Status,
            status,
            waiting_for: None,
            wake_at: None,
            error,
            consumed_signal: None,
            spend: super::spend::to_commit(record.spend),
        };
        self.commit(lease, &commit, &record.id).await
    }

    /// Commit with fault points, retrying transient store errors and resolving a lost
    /// acknowledgement by re-reading the version (never by committing twice).
    pub(crate) async fn commit(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        run_id: &str,
    ) -> Result<RunRecord, RunnerError> {
        self.commit_with_entries(lease, &[], commit, run_id).await
    }

    /// [`commit`](Self::commit), writing `entries` of the step with it
    /// ([`RunStore::commit_step`](crate::store::RunStore::commit_step)).
    pub(crate) async fn commit_with_entries(
        &self,
        lease: &Lease,
        entries: &[JournalEntry],
        commit: &StepCommit,
        run_id: &str,
    ) -> Result<RunRecord, RunnerError> {
        let store = &self.store;
        let faults = &self.faults;
        faults.check(FaultPoint::CommitSent, run_id, commit.expected_version)?;
        let mut attempt = 0;
        loop {
            // The result, in a block of its own, is taken apart before anything else is
            // awaited: it holds a whole run record, and a local still in scope at an
            // await takes its space in this future, which every run in flight holds while
            // its commit waits (issue 22, W4).
            let error = {
                match store.commit_step(lease, commit, entries).await {
                    Ok(record) => {
                        faults.check(FaultPoint::CommitApplied, run_id, record.version)?;
                        return Ok(record);
                    }
                    Err(error) => error,
                }
            };
            match error {
                StoreError::LeaseLost { .. } | StoreError::Conflict { .. } => {
                    return Err(RunnerError::LeaseLost(run_id.to_owned()));
                }
                // An operator cancelled the run during the step: the cancel takes the
                // step's place, and the run goes on to compensate (its journaled calls
                // included) under this lease.
                StoreError::CancelRequested(_) => {
                    return Box::pin(self.accept_cancel(lease, run_id)).await;
                }
                e if e.is_transient() && attempt < self.config.store_retries => {
                    attempt += 1;
                    // Rare, and boxed so that its timer and read are not part of every
                    // commit's future.
                    if let Some(resolved) =
                        Box::pin(self.resolve_unknown_commit(lease, commit, run_id, attempt)).await
                    {
                        return resolved;
                    }
                }
                e => return Err(e.into()),
            }
        }
    }

    /// After a transient failure of a commit (the `attempt`th): wait, then read the run,
    /// since the commit may have been applied with its acknowledgement lost. `Some`: the
    /// outcome (applied, or the run moved on without it); `None`: it was not applied, try
    /// again.
    async fn resolve_unknown_commit(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        run_id: &str,
        attempt: u32,
    ) -> Option<Result<RunRecord, RunnerError>> {
        tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
        let Ok(Some(current)) = self.store.load_run(run_id).await else {
            return None;
        };
        if current.version == commit.expected_version + 1 && current.epoch == lease.epoch {
            return Some(Ok(current));
        }
        if current.version != commit.expected_version || current.epoch != lease.epoch {
            return Some(Err(RunnerError::LeaseLost(run_id.to_owned())));
        }
        None
    }

    /// Write the cancel requested on the run this lease holds (`RunStore::accept_cancel`).
    pub(crate) async fn accept_cancel(
        &self,
        lease: &Lease,
        run_id: &str,
    ) -> Result<RunRecord, RunnerError> {
        match self.store.accept_cancel(lease).await {
            Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                Err(RunnerError::LeaseLost(run_id.to_owned()))
            }
            accepted => Ok(accepted?),
        }
    }
}

/// Renew the lease when less than half of its time is left.
pub(crate) async fn renew_if_due(
    inner: &Inner,
    lease: &mut Lease,
    run_id: &str,
    version: u64,
) -> Result<(), RunnerError> {
    let ttl = inner.config.lease_ttl;
    let half = i64::try_from(ttl.as_millis() / 2).unwrap_or(i64::MAX);
    if lease.expires_at - crate::store::now_ms() > half {
        return Ok(());
    }
    inner
        .faults
        .check(FaultPoint::LeaseRenewal, run_id, version)?;
    match inner.store.renew_lease(lease, ttl).await {
        Ok(renewed) => {
            *lease = renewed;
            Ok(())
        }
        Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
            Err(RunnerError::LeaseLost(run_id.to_owned()))
        }
        Err(e) => Err(e.into()),
    }
}
