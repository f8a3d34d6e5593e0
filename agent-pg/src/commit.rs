//! The writes of a step: journal entries, fenced by the lease, and the step's commit (which
//! may carry entries), each one statement, shared with other runs' entries or commits by
//! the group commit.

use agent_core::store::history::VersionPayload;
use agent_core::store::{JournalEntry, Lease, RunRecord, StepCommit, StoreError};
use agent_sql::commit::{CommitPlan, check_entry, commit_head};
use agent_sql::reads::{commit_refused, head_of};
use agent_sql::{LARGE_OUTPUT_BYTES, corrupt, serde_name, summary, to_i64};
use sqlx::Row;

use crate::connect::db_err;
use crate::group_commit::{CommitRow, EntryRow};
use crate::{PgStore, sql};

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
        let output_len = output_len(entry);
        let written = if output_len > LARGE_OUTPUT_BYTES {
            self.record_external(lease, entry, output_len).await?
        } else {
            self.group
                .record(entry_row(lease, entry, output_len))
                .await?
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

    /// An entry whose output goes to the side table: one statement through the pool.
    /// Whether it was written (`false`: the epoch is not the run's).
    async fn record_external(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
        output_len: usize,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(sql::RECORD_ENTRY)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(to_i64(entry.version))
            .bind(i32::try_from(entry.seq).unwrap_or(i32::MAX))
            .bind(entry.kind.as_str())
            .bind(&entry.state)
            .bind(&entry.name)
            .bind(entry.tool_kind.map(agent_core::ToolKind::as_str))
            .bind(&entry.input_hash)
            .bind(&entry.input)
            .bind(&entry.idempotency_key)
            .bind(entry.status.as_str())
            .bind(None::<&serde_json::Value>)
            .bind(true)
            .bind(entry.output.as_ref().map(|o| summary(&o.to_string())))
            .bind(i32::try_from(output_len).unwrap_or(i32::MAX))
            .bind(entry.error_class.as_ref().and_then(serde_name))
            .bind(&entry.error_code)
            .bind(&entry.error_message)
            .bind(i32::try_from(entry.attempts).unwrap_or(i32::MAX))
            .bind(to_i64(entry.duration_ms))
            .bind(entry.started_at)
            .bind(entry.finished_at)
            .bind(entry.output.as_ref())
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        let written: i64 = row.try_get(0).map_err(|e| corrupt(&lease.run_id, e))?;
        Ok(written > 0)
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
        for entry in entries {
            check_entry(lease, entry)?;
            let output_len = output_len(entry);
            if output_len > LARGE_OUTPUT_BYTES {
                self.record(lease, entry).await?;
            } else {
                carried.push(entry_row(lease, entry, output_len));
            }
        }
        self.commit_carrying(lease, commit, carried).await
    }

    /// The commit, with `entries` written before it by the group commit.
    async fn commit_carrying(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: Vec<EntryRow>,
    ) -> Result<RunRecord, StoreError> {
        let run_id = lease.run_id.as_str();
        let head = commit_head(self, &self.heads, lease, commit.expected_version).await?;
        let (plan, payload) = CommitPlan::new(head, lease, commit);
        // The run row keeps the state of the latest snapshot only (see the migrations); a
        // snapshot's payload is that same state, bound once (`$6`).
        let (payload_kind, snapshot_state, patch) = match payload {
            VersionPayload::Snapshot(_) => ("snapshot", Some(&commit.state), None),
            VersionPayload::Patch(v) => ("patch", None, Some(v)),
        };
        // A step consuming a signal goes through the group commit like any other: its row
        // also checks that the signal is pending and marks it consumed.
        let applied = self
            .group
            .commit(CommitRow {
                run_id: run_id.to_owned(),
                epoch: to_i64(lease.epoch),
                expected: to_i64(commit.expected_version),
                from_state: commit.from_state.clone(),
                to_state: commit.to_state.clone(),
                snapshot: snapshot_state.cloned(),
                status: commit.status.as_str(),
                waiting_for: commit.waiting_for.clone(),
                wake_at: commit.wake_at,
                error_code: commit.error.as_ref().map(|e| e.code.as_str().to_owned()),
                error_message: commit.error.as_ref().map(|e| e.message.clone()),
                hash: plan.hash.clone(),
                patch_bytes: to_i64(plan.patch_bytes),
                kind: commit.kind.as_str(),
                payload_kind,
                patch,
                signal: commit.consumed_signal,
                entries,
            })
            .await?;
        if let Some(applied) = applied {
            let record = plan.applied(lease, commit, applied, &self.heads);
            self.event_written(run_id);
            if record.status.is_final() {
                Box::pin(self.wake_parent(&record)).await;
            }
            return Ok(record);
        }
        // Zero rows: tell the caller why, from the run as stored.
        Err(
            Box::pin(commit_refused(self, lease, commit.expected_version, || {
                StoreError::Backend(format!(
                    "signal {} is not pending for run `{run_id}`",
                    commit.consumed_signal.unwrap_or_default()
                ))
            }))
            .await,
        )
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

/// The length of `entry`'s output, serialized (0 without one).
fn output_len(entry: &JournalEntry) -> usize {
    entry
        .output
        .as_ref()
        .map_or(0, |o| serde_json::to_vec(o).map_or(0, |b| b.len()))
}

/// The row the group commit writes for `entry`, whose output is kept inline.
fn entry_row(lease: &Lease, entry: &JournalEntry, output_len: usize) -> EntryRow {
    EntryRow {
        run_id: lease.run_id.clone(),
        epoch: to_i64(lease.epoch),
        version: to_i64(entry.version),
        seq: i32::try_from(entry.seq).unwrap_or(i32::MAX),
        kind: entry.kind.as_str(),
        state: entry.state.clone(),
        name: entry.name.clone(),
        tool_kind: entry.tool_kind.map(agent_core::ToolKind::as_str),
        input_hash: entry.input_hash.clone(),
        input: entry.input.clone(),
        idempotency_key: entry.idempotency_key.clone(),
        status: entry.status.as_str(),
        output: entry.output.clone(),
        output_summary: entry.output.as_ref().map(|o| summary(&o.to_string())),
        output_bytes: entry
            .output
            .as_ref()
            .map(|_| i32::try_from(output_len).unwrap_or(i32::MAX)),
        error_class: entry.error_class.as_ref().and_then(serde_name),
        error_code: entry.error_code.clone(),
        error_message: entry.error_message.clone(),
        attempts: i32::try_from(entry.attempts).unwrap_or(i32::MAX),
        duration_ms: to_i64(entry.duration_ms),
        started_at: entry.started_at,
        finished_at: entry.finished_at,
    }
}
