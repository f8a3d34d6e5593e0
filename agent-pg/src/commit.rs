//! The writes of a step: journal entries, fenced by the lease, and the step's commit (which
//! may carry entries), each one statement, shared with other runs' entries or commits by
//! the group commit.

use agent_core::store::{JournalEntry, Lease, RunRecord, StepCommit, StoreError, now_ms};
use agent_sql::commit::check_entry;
use agent_sql::reads::head_of;
use agent_sql::write::{EntryRow, entry_rows, plan_commit, refused};

use crate::PgStore;
use crate::group_commit::{entry_written, record_entry};

impl PgStore {
    /// `RunStore::record_entry`: through the group commit (its own statement when a slot is
    /// free, else one statement with the other runs' entries that arrived meanwhile);
    /// durable when this returns. An output too large to keep inline goes to the side
    /// table, in a statement of its own through the pool.
    pub(crate) async fn record(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
    ) -> Result<(), StoreError> {
        check_entry(lease, entry)?;
        self.record_row(lease, EntryRow::new(lease, entry)).await
    }

    async fn record_row(&self, lease: &Lease, row: EntryRow) -> Result<(), StoreError> {
        let written = if row.external {
            let returned = record_entry(&row).fetch_one(&self.pool).await;
            entry_written(&row, returned)?
        } else {
            self.group.record(row).await?
        };
        if written {
            self.event_written(&lease.run_id);
            return Ok(());
        }
        match head_of(self, &lease.run_id).await? {
            None => Err(StoreError::NotFound(lease.run_id.clone())),
            Some(_) => Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            }),
        }
    }

    /// `RunStore::commit_step`: the entries go with the commit through the group commit,
    /// written in one statement before it (with the other commits' entries when it is
    /// grouped), and the commit is sent only if they all were. An entry whose output goes
    /// to the side table is recorded first, on its own.
    pub(crate) async fn commit(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        let mut carried = Vec::with_capacity(entries.len());
        for row in entry_rows(lease, entries)? {
            if row.external {
                self.record_row(lease, row).await?;
            } else {
                carried.push(row);
            }
        }
        // The statement takes its time from the server's clock, not from the row's `now`.
        let (plan, row) = plan_commit(self, &self.heads, lease, commit, carried, now_ms()).await?;
        // A step consuming a signal goes through the group commit like any other: its row
        // also checks that the signal is pending and marks it consumed.
        let Some(applied) = self.group.commit(row).await? else {
            // Zero rows: tell the caller why, from the run as stored.
            return Err(refused(self, lease, commit).await);
        };
        let record = plan.applied(lease, commit, applied, &self.heads);
        self.event_written(&lease.run_id);
        if record.status.is_final() {
            Box::pin(self.wake_parent(&record)).await;
        }
        Ok(record)
    }

    /// After a child run reached a final status: wake the idle workers, so that the parent,
    /// which `claim_next` may find claimable now, is claimed without waiting for a poll.
    /// Commits do not notify otherwise (the worker holding a run steps it on); nothing is
    /// written to the parent. Best effort, like every wake-up: workers poll too.
    pub(crate) async fn wake_parent(&self, child: &RunRecord) {
        let Some(parent) = &child.spawned_by else {
            return;
        };
        let _ = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(&parent.run_id)
            .execute(&self.pool)
            .await;
    }
}
