//! The writes of a step: journal entries and the step's commit, each checked against the
//! lease, through the group commit (one `BEGIN IMMEDIATE` transaction for what arrives
//! together).

use agent_core::store::{JournalEntry, Lease, RunRecord, StepCommit, StoreError, now_ms};
use agent_sql::commit::check_entry;
use agent_sql::write::{EntryRow, entry_rows, plan_commit, refused};

use crate::SqliteStore;

impl SqliteStore {
    /// `RunStore::record_entry`: the epoch checked and the entry written in one transaction,
    /// through the group commit (alone when the writer is idle, else with the other runs'
    /// entries and commits that arrived meanwhile); durable when this returns.
    pub(crate) async fn record(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
    ) -> Result<(), StoreError> {
        check_entry(lease, entry)?;
        self.group.record(EntryRow::new(lease, entry)).await?;
        self.events.wake(&lease.run_id);
        Ok(())
    }

    /// `RunStore::commit_step`: planned here, from the head this store remembers (or
    /// reads), then written by the group commit, alone or with other runs' commits in one
    /// `BEGIN IMMEDIATE` transaction. The entries are written in the commit's transaction,
    /// after its compare-and-set and only if it applied (which fences them by the lease as
    /// [`record`](Self::record) does).
    pub(crate) async fn commit(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        let entries = entry_rows(lease, entries)?;
        let (plan, row) = plan_commit(self, &self.heads, lease, commit, entries, now_ms()).await?;
        let Some(applied) = self.group.commit(row).await? else {
            // The head is one the run has moved past (another store on the same file wrote
            // since, or a stale caller), or the signal is no longer pending: nothing was
            // written. Say why from the stored head.
            return Err(refused(self, lease, commit).await);
        };
        let record = plan.applied(lease, commit, applied, &self.heads);
        self.events.wake(&lease.run_id);
        // A child run that ended may make its waiting parent claimable: wake the idle
        // workers (nothing is written to the parent). Other commits wake nobody: the worker
        // holding the run steps it on.
        if record.status.is_final() && record.spawned_by.is_some() {
            self.work.notify_waiters();
        }
        Ok(record)
    }
}
