//! The writes of a step: journal entries, each one `BEGIN IMMEDIATE` transaction on the
//! store's one connection, and the step's commit, through the group commit.

use agent_core::store::history::VersionPayload;
use agent_core::store::{JournalEntry, Lease, RunRecord, StepCommit, StoreError, now_ms};
use agent_sql::commit::{CommitPlan, check_entry, read_head};
use agent_sql::reads::commit_refused;
use agent_sql::rows;
use agent_sql::{LARGE_OUTPUT_BYTES, serde_name, summary, to_i64};
use serde_json::Value;

use crate::group_commit::CommitRow;
use crate::{SqliteStore, db_err, sql};

impl SqliteStore {
    /// `Store::record_entry`: the epoch checked and the entry written in one transaction.
    pub(crate) async fn record(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
    ) -> Result<(), StoreError> {
        check_entry(lease, entry)?;
        let output = entry.output.as_ref().map(Value::to_string);
        let external = output
            .as_ref()
            .is_some_and(|o| o.len() > LARGE_OUTPUT_BYTES);
        let mut tx = self.write_tx().await?;
        let head = sqlx::query(agent_sql::sql::RUN_HEAD)
            .bind(&lease.run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::NotFound(lease.run_id.clone()))?;
        let (_, epoch) = rows::head(&lease.run_id, &head)?;
        if epoch != lease.epoch {
            return Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            });
        }
        sqlx::query(sql::UPSERT_ENTRY)
            .bind(&entry.run_id)
            .bind(to_i64(entry.version))
            .bind(i64::from(entry.seq))
            .bind(entry.kind.as_str())
            .bind(&entry.state)
            .bind(&entry.name)
            .bind(entry.tool_kind.map(agent_core::ToolKind::as_str))
            .bind(&entry.input_hash)
            .bind(entry.input.to_string())
            .bind(&entry.idempotency_key)
            .bind(entry.status.as_str())
            .bind(if external { None } else { output.as_deref() })
            .bind(external)
            .bind(output.as_deref().map(summary))
            .bind(
                output
                    .as_ref()
                    .map(|o| i64::try_from(o.len()).unwrap_or(i64::MAX)),
            )
            .bind(entry.error_class.as_ref().and_then(serde_name))
            .bind(&entry.error_code)
            .bind(&entry.error_message)
            .bind(i64::from(entry.attempts))
            .bind(to_i64(entry.duration_ms))
            .bind(entry.started_at)
            .bind(entry.finished_at)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let key = (to_i64(entry.version), i64::from(entry.seq));
        if external {
            sqlx::query(sql::UPSERT_OUTPUT)
                .bind(&entry.run_id)
                .bind(key.0)
                .bind(key.1)
                .bind(output.as_deref())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        } else {
            sqlx::query(sql::DELETE_OUTPUT)
                .bind(&entry.run_id)
                .bind(key.0)
                .bind(key.1)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        self.events.wake(&lease.run_id);
        Ok(())
    }

    /// `Store::commit_step`: planned here, from the head this store remembers (or reads),
    /// then written by the group commit, alone or with other runs' commits in one
    /// `BEGIN IMMEDIATE` transaction.
    pub(crate) async fn commit(
        &self,
        lease: &Lease,
        commit: &StepCommit,
    ) -> Result<RunRecord, StoreError> {
        let run_id = lease.run_id.as_str();
        let head = if let Some(cached) = self.heads.at(run_id, commit.expected_version) {
            cached
        } else {
            // Read outside the write transaction: the statement's compare-and-set still
            // decides, and a head read here that the run has moved past writes nothing.
            let row = sqlx::query(sql::LOAD_RUN)
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            read_head(row.as_ref(), lease, commit.expected_version)?
        };
        let (plan, payload) = CommitPlan::new(head, lease, commit);
        let (payload_kind, body) = match &payload {
            VersionPayload::Snapshot(v) => ("snapshot", v.to_string()),
            VersionPayload::Patch(v) => ("patch", v.to_string()),
        };
        // The run row keeps the state of the latest snapshot only; a snapshot's payload is
        // that same state, serialized once for both rows.
        let snapshot_state = payload.is_snapshot().then(|| body.clone());
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
                error_code: commit.error.as_ref().map(|e| e.code.clone()),
                error_message: commit.error.as_ref().map(|e| e.message.clone()),
                hash: plan.hash.clone(),
                patch_bytes: to_i64(plan.patch_bytes),
                kind: commit.kind.as_str(),
                payload_kind,
                body,
                signal: commit.consumed_signal,
                now,
            })
            .await?;
        let Some(applied) = applied else {
            // The head is one the run has moved past (another store on the same file wrote
            // since, or a stale caller), or the signal is no longer pending: nothing was
            // written. Say why from the stored head.
            return Err(commit_refused(self, lease, commit.expected_version, || {
                match commit.consumed_signal {
                    Some(signal) => StoreError::Backend(format!(
                        "signal {signal} is not pending for run `{run_id}`"
                    )),
                    None => {
                        StoreError::Backend(format!("run `{run_id}` refused a commit it matches"))
                    }
                }
            })
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
