//! The [`Store`] contract on SQLite: writes in `BEGIN IMMEDIATE` transactions on the one
//! connection, statements in `sql.rs` (or in `agent_sql::sql` when PostgreSQL shares
//! them), the methods that are the same on both SQL stores written once in
//! [`agent_sql::reads`] and [`agent_sql::dialect`] (this store's dialect in `lib.rs`).
//!
//! [`Store`]: agent_core::store::Store

use std::time::Duration;

use agent_core::store::{
    ClaimReads, Claimed, HistoryStore, Lease, NewRun, RepairCommit, RunFilter, RunRecord,
    RunStatus, StoreError, now_ms,
};
use agent_sql::dialect::{ClaimedRow, ListingTail, claimed_row};
use agent_sql::{corrupt, ms, repair_refused, rows, to_i64};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{SqliteStore, db_err, limit_sql, schedule_sql, sql};

agent_sql::impl_sql_store!(SqliteStore {
    history {}
    runs {
        async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
            Ok(self.insert_run(&run, None, None).await?.0)
        }

        async fn create_run_claimed(
            &self,
            run: NewRun,
            worker: &str,
            ttl: Duration,
        ) -> Result<Option<Claimed>, StoreError> {
            match self.insert_run(&run, None, Some((worker, ttl))).await? {
                (record, true) => Ok(Some(agent_sql::created_claimed(record, worker))),
                // The same request's run, created before (a retry): claimed as any run is.
                (_, false) => self.claim_run(&run.id, worker, ttl).await,
            }
        }

        async fn wait_for_work(&self, timeout: Duration) {
            let _ = tokio::time::timeout(timeout, self.work.notified()).await;
        }

        async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
            let now = now_ms();
            let at: Option<i64> = sqlx::query_scalar(sql::NEXT_DUE)
                .bind(now)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(at.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0))))
        }
    }
    operator {
        async fn repair_run(&self, commit: &RepairCommit) -> Result<RunRecord, StoreError> {
            let run_id = commit.run_id.as_str();
            let now = now_ms();
            let state = commit.state.to_string();
            let mut tx = self.write_tx().await?;
            let updated = sqlx::query(sql::REPAIR_RUN)
                .bind(run_id)
                .bind(&state)
                .bind(&commit.to_state)
                .bind(to_i64(commit.version()))
                .bind(to_i64(commit.epoch()))
                .bind(&commit.hash)
                .bind(now)
                .bind(to_i64(commit.expected_epoch))
                .bind(to_i64(commit.last_version))
                .bind(commit.expected_status.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            if updated.rows_affected() != 1 {
                drop(tx);
                return Err(repair_refused(commit, self.load_run(run_id).await));
            }
            sqlx::query(sql::INSERT_OPERATOR_TRANSITION)
                .bind(run_id)
                .bind(to_i64(commit.version()))
                .bind(&commit.from_state)
                .bind(&commit.to_state)
                .bind(commit.kind.as_str())
                .bind(RunStatus::Running.as_str())
                .bind(to_i64(commit.epoch()))
                .bind(now)
                .bind(&commit.hash)
                .bind("snapshot")
                .bind(&state)
                .bind(&commit.note.by)
                .bind(&commit.note.reason)
                .bind(None::<&str>)
                .bind(None::<&str>)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let row = sqlx::query(sql::LOAD_RUN)
                .bind(run_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?;
            let stored = rows::stored_run(&row)?;
            tx.commit().await.map_err(db_err)?;
            self.heads.remember(stored.head.clone());
            self.work.notify_waiters();
            self.events.wake(run_id);
            Ok(stored.head.record)
        }
    }
    events {
        async fn event_wakes(
            &self,
        ) -> Result<Option<agent_core::store::EventWakes>, StoreError> {
            Ok(Some(self.events.subscribe()))
        }
    }
});

impl SqliteStore {
    /// Claim a batch (`RunStore::claim_next` without their reads).
    pub(crate) async fn claim_batch(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<(Lease, RunRecord)>, StoreError> {
        let now = now_ms();
        let agents =
            serde_json::to_string(agents).map_err(|e| StoreError::backend(e.to_string()))?;
        let mut tx = self.write_tx().await?;
        let ids: Vec<String> = sqlx::query_scalar(sql::CLAIMABLE.as_str())
            .bind(&agents)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            let row = sqlx::query(sql::CLAIM_RUN.as_str())
                .bind(id)
                .bind(worker)
                .bind(ms(ttl))
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            let Some(row) = row else { continue };
            match claimed_row(&self.heads, &row, worker)? {
                ClaimedRow::Claimed(lease, record) => out.push((lease, record)),
                // A run whose stored data no longer reads must not keep the others from
                // being claimed: quarantine it for an operator and go on.
                ClaimedRow::Unreadable { run_id, message } => {
                    self.quarantine_unreadable(&mut tx, &run_id, &message)
                        .await?;
                }
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(out)
    }

    /// The claimed runs with what their first steps read ([`sql::CLAIM_READS`]), read in
    /// one statement after the claim's transaction, while the new leases hold the runs
    /// (only a lease holder journals or consumes a signal). If it fails, or a run's reads
    /// do not decode, those runs come without them and the runner reads them itself.
    pub(crate) async fn with_reads(&self, claimed: Vec<(Lease, RunRecord)>) -> Vec<Claimed> {
        if claimed.is_empty() {
            return Vec::new();
        }
        let batch: Vec<(&str, i64, bool)> = (claimed.iter())
            .map(|(_, r)| {
                let waiting = r.status == RunStatus::Waiting;
                (r.id.as_str(), to_i64(r.version), waiting)
            })
            .collect();
        let rows = match serde_json::to_string(&batch) {
            Ok(batch) => sqlx::query(sql::CLAIM_READS)
                .bind(batch)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err),
            Err(e) => Err(StoreError::backend(e.to_string())),
        };
        agent_sql::with_claim_reads(claimed, rows, claim_reads)
    }

    /// [`agent_sql::dialect::quarantine_unreadable`] inside `claim_next`'s write
    /// transaction `tx`.
    async fn quarantine_unreadable(
        &self,
        tx: &mut sqlx::SqliteConnection,
        run_id: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::QUARANTINE_CORRUPT)
            .bind(run_id)
            .bind(message)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        Self::status_changed(tx, run_id).await?;
        self.events.wake(run_id);
        Ok(())
    }
}

/// `sql` (`LIST_RUNS` or `COUNT_RUNS`, which share their parameters) bound to `filter`,
/// then to the key to list after, if any (`LIST_RUNS_AFTER`).
pub(crate) fn filtered<'q>(
    sql: &'static str,
    filter: &'q RunFilter,
    limit: Option<i64>,
    tail: ListingTail<'q>,
) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>, StoreError> {
    let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    let statuses =
        serde_json::to_string(&statuses).map_err(|e| StoreError::backend(e.to_string()))?;
    let labels =
        serde_json::to_string(&filter.labels).map_err(|e| StoreError::backend(e.to_string()))?;
    let query = sqlx::query(sql)
        .bind(&filter.agent)
        .bind(statuses)
        .bind(limit)
        .bind(i64::try_from(filter.labels.len()).unwrap_or(i64::MAX))
        .bind(labels)
        .bind(&filter.spawned_by)
        .bind(filter.created_after)
        .bind(filter.created_before)
        .bind(filter.agent_version.map(i64::from))
        .bind(&filter.fingerprint);
    Ok(match tail {
        ListingTail::Nothing => query,
        ListingTail::After(key) => query.bind(key.created_at).bind(&key.id),
        ListingTail::LabelKey(key) => query.bind(key),
    })
}

/// One row of [`sql::CLAIM_READS`]: the run's id and its reads.
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
fn claim_reads(row: &SqliteRow) -> Result<(String, ClaimReads), StoreError> {
    let id: String = row
        .try_get("id")
        .map_err(|e| StoreError::backend(e.to_string()))?;
    let c = |e: &dyn std::fmt::Display| corrupt(&id, e);
    let span: String = row.try_get("span").map_err(|e| c(&e))?;
    let span: Vec<Option<i64>> = serde_json::from_str(&span).map_err(|e| c(&e))?;
    let journaled: bool = row.try_get("journaled").map_err(|e| c(&e))?;
    let pending: Option<String> = row.try_get("pending").map_err(|e| c(&e))?;
    let pending = (pending.as_deref())
        .map(serde_json::from_str::<Value>)
        .transpose()
        .map_err(|e| c(&e))?;
    let reads = rows::claim_reads(&id, &span, journaled, pending)?;
    Ok((id, reads))
}

agent_sql::impl_sql_schedules!(SqliteStore, schedule_sql);
agent_sql::impl_sql_limits!(SqliteStore, limit_sql);
