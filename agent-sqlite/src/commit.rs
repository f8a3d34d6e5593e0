//! The writes of a step: journal entries and the step's commit, each checked against the
//! lease, through the group commit (one `BEGIN IMMEDIATE` transaction for what arrives
//! together).

use agent_core::store::history::VersionPayload;
use agent_core::store::{JournalEntry, Lease, RunRecord, StepCommit, StoreError, now_ms};
use agent_sql::commit::{CommitPlan, check_entry, commit_head};
use agent_sql::reads::commit_refused;
use agent_sql::{LARGE_OUTPUT_BYTES, serde_name, to_i64};
use serde_json::Value;

use crate::SqliteStore;
use crate::group_commit::{CommitRow, EntryRow};

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
        self.group.record(entry_row(lease, entry)).await?;
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
        for entry in entries {
            check_entry(lease, entry)?;
        }
        let run_id = lease.run_id.as_str();
        let head = commit_head(self, &self.heads, lease, commit.expected_version).await?;
        let (plan, payload) = CommitPlan::new(head, lease, commit);
        // Consumed here: the payload as a value is not kept while the row waits in the
        // group commit's queue, only its text.
        let (payload_kind, body) = match payload {
            VersionPayload::Snapshot(v) => ("snapshot", v.to_string()),
            VersionPayload::Patch(v) => ("patch", v.to_string()),
        };
        // The run row keeps the state of the latest snapshot only; a snapshot's payload is
        // that same state, serialized once for both rows.
        let snapshot_state = (payload_kind == "snapshot").then(|| body.clone());
        let now = now_ms();
        let applied = self
            .group
            .commit(CommitRow {
                run_id: run_id.to_owned(),
                epoch: to_i64(lease.epoch),
                expected: to_i64(commit.expected_version),
                version: to_i64(plan.version),
                from_state: commit.from_state.clone(),
                to_state: commit.to_state.clone(),
                snapshot_state,
                status: commit.status.as_str(),
                same_status: commit.status == plan.base().status && !commit.status.is_final(),
                waiting_for: commit.waiting_for.clone(),
                wake_at: commit.wake_at,
                error_code: commit.error.as_ref().map(|e| e.code.as_str().to_owned()),
                error_message: commit.error.as_ref().map(|e| e.message.clone()),
                hash: plan.hash.clone(),
                patch_bytes: to_i64(plan.patch_bytes),
                kind: commit.kind.as_str(),
                payload_kind,
                body,
                signal: commit.consumed_signal,
                now,
                entries: entries.iter().map(|e| entry_row(lease, e)).collect(),
            })
            .await?;
        let Some(applied) = applied else {
            // The head is one the run has moved past (another store on the same file wrote
            // since, or a stale caller), or the signal is no longer pending: nothing was
            // written. Say why from the stored head.
            return Err(Box::pin(commit_refused(
                self,
                lease,
                commit.expected_version,
                || match commit.consumed_signal {
                    Some(signal) => StoreError::Backend(format!(
                        "signal {signal} is not pending for run `{run_id}`"
                    )),
                    None => {
                        StoreError::Backend(format!("run `{run_id}` refused a commit it matches"))
                    }
                },
            ))
            .await);
        };
        let record = plan.applied(lease, commit, applied, &self.heads);
        self.events.wake(run_id);
        // A child run that ended may make its waiting parent claimable: wake the idle
        // workers (nothing is written to the parent). Other commits wake nobody: the worker
        // holding the run steps it on.
        if record.status.is_final() && record.spawned_by.is_some() {
            self.work.notify_waiters();
        }
        Ok(record)
    }
}

/// The row [`GroupCommit`](crate::group_commit) writes for `entry`; an output too large to
/// keep inline goes to the side table.
fn entry_row(lease: &Lease, entry: &JournalEntry) -> EntryRow {
    let output = entry.output.as_ref().map(Value::to_string);
    let external = output
        .as_ref()
        .is_some_and(|o| o.len() > LARGE_OUTPUT_BYTES);
    EntryRow {
        run_id: lease.run_id.clone(),
        epoch: lease.epoch,
        version: to_i64(entry.version),
        seq: i64::from(entry.seq),
        kind: entry.kind.as_str(),
        state: entry.state.clone(),
        name: entry.name.clone(),
        tool_kind: entry.tool_kind.map(agent_core::ToolKind::as_str),
        input_hash: entry.input_hash.clone(),
        input: entry.input.to_string(),
        idempotency_key: entry.idempotency_key.clone(),
        status: entry.status.as_str(),
        output,
        external,
        error_class: entry.error_class.as_ref().and_then(serde_name),
        error_code: entry.error_code.clone(),
        error_message: entry.error_message.clone(),
        attempts: i64::from(entry.attempts),
        duration_ms: to_i64(entry.duration_ms),
        started_at: entry.started_at,
        finished_at: entry.finished_at,
    }
}
