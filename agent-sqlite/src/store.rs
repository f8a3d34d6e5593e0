//! The [`Store`] contract on SQLite: writes in `BEGIN IMMEDIATE` transactions on the one
//! connection, statements in `sql.rs` (or in `agent_sql::sql` when PostgreSQL shares
//! them), the reads that are the same on both SQL stores through [`agent_sql::reads`].
//!
//! [`Store`]: agent_core::store::Store

use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::store::{
    ClaimReads, Claimed, HistoryStore, Lease, NewRun, PruneReport, RepairCommit, RetentionPolicy,
    RunFailure, RunFilter, RunRecord, RunStatus, StoreError, TransitionKind, VersionCount, now_ms,
};
use agent_sql::write::SignalRow;
use agent_sql::{corrupt, lease_of, ms, repair_refused, rows, to_i64};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{SqliteStore, db_err, sql};

agent_sql::impl_sql_store!(SqliteStore {
    history {
        async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
            let row = sqlx::query(sql::LOAD_RUN)
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            row.map(|r| rows::stored_run(&r).map(|s| s.head.record))
                .transpose()
        }

        async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
            let limit = filter
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let query = match &filter.after {
                None => filtered(sql::LIST_RUNS, filter, Some(limit))?,
                Some(key) => filtered(sql::LIST_RUNS_AFTER, filter, Some(limit))?
                    .bind(key.created_at)
                    .bind(&key.id),
            };
            let rows = query
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            rows.iter()
                .map(|r| rows::listed_run(r).map(|(record, _)| record))
                .collect()
        }

        async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError> {
            let rows = filtered(sql::COUNT_RUNS, filter, None)?
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            rows::status_counts(&rows)
        }

        async fn count_versions(&self, filter: &RunFilter) -> Result<Vec<VersionCount>, StoreError> {
            // On a reader: counting scans the runs, and the one write connection serves the
            // worker's claims and commits meanwhile (a worker counts at start-up).
            let rows = filtered(sql::COUNT_VERSIONS, filter, None)?
                .fetch_all(&self.readers)
                .await
                .map_err(db_err)?;
            rows::version_counts(&rows)
        }

        async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
            let bytes: i64 = sqlx::query_scalar(sql::STORAGE_BYTES)
                .bind(run_id)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(Some(u64::try_from(bytes).unwrap_or(0)))
        }
    }
    runs {
        async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
            let json = serde_json::to_string(graph).map_err(|e| StoreError::backend(e.to_string()))?;
            sqlx::query(sql::REGISTER_AGENT)
                .bind(&graph.agent)
                .bind(graph.fingerprint())
                .bind(json)
                .bind(now_ms())
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(())
        }

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

        async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
            let expires_at = now_ms().saturating_add(ms(ttl));
            let row = sqlx::query(sql::RENEW_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .bind(&lease.worker)
                .bind(expires_at)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            match row {
                Some(_) => Ok(Lease {
                    expires_at,
                    ..lease.clone()
                }),
                None => Err(self.fenced_out(lease).await?),
            }
        }

        async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
            let released = sqlx::query(sql::RELEASE_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .execute(&self.pool)
                .await
                .map_err(db_err)?
                .rows_affected();
            if released > 0 {
                self.work.notify_waiters();
            }
            Ok(())
        }

        async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
            let expired = sqlx::query(sql::EXPIRE_LEASES_OF)
                .bind(worker)
                .bind(now_ms())
                .execute(&self.pool)
                .await
                .map_err(db_err)?
                .rows_affected();
            if expired > 0 {
                self.work.notify_waiters();
            }
            Ok(expired)
        }

        async fn send_signal(
            &self,
            run_id: &str,
            name: &str,
            payload: &Value,
        ) -> Result<i64, StoreError> {
            let id = self
                .group
                .signal(SignalRow::new(run_id, name, payload, now_ms()))
                .await?
                .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
            self.work.notify_waiters();
            self.events.wake(run_id);
            Ok(id)
        }

        async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
            let mut tx = self.write_tx().await?;
            let row = sqlx::query(sql::QUARANTINE_UNDER_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .bind(error.code.as_str())
                .bind(&error.message)
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            if row.is_some() {
                Self::status_changed(&mut tx, &lease.run_id).await?;
                tx.commit().await.map_err(db_err)?;
            } else {
                drop(tx);
            }
            match row {
                Some(row) => {
                    let record = rows::stored_run(&row)?.head.record;
                    self.events.wake(&record.id);
                    // A quarantined child may end its parent's wait (see `commit_step`).
                    if record.spawned_by.is_some() {
                        self.work.notify_waiters();
                    }
                    Ok(record)
                }
                None => Err(self.fenced_out(lease).await?),
            }
        }

        async fn migrate_run(
            &self,
            lease: &Lease,
            commit: &agent_core::store::MigrationCommit,
        ) -> Result<RunRecord, StoreError> {
            agent_sql::operator::migrate(self, lease, commit).await
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
                .bind(TransitionKind::Repair.as_str())
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

        async fn set_status(
            &self,
            run_id: &str,
            status: RunStatus,
            error: Option<RunFailure>,
        ) -> Result<RunRecord, StoreError> {
            let mut tx = self.write_tx().await?;
            let row = sqlx::query(sql::SET_STATUS)
                .bind(run_id)
                .bind(status.as_str())
                .bind(error.as_ref().map(|e| e.code.as_str()))
                .bind(error.as_ref().map(|e| e.message.as_str()))
                .bind(now_ms())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            if row.is_some() {
                Self::status_changed(&mut tx, run_id).await?;
                tx.commit().await.map_err(db_err)?;
            } else {
                drop(tx);
            }
            match row {
                Some(row) => {
                    self.work.notify_waiters();
                    self.events.wake(run_id);
                    rows::stored_run(&row).map(|s| s.head.record)
                }
                None => match self.load_run(run_id).await? {
                    None => Err(StoreError::NotFound(run_id.to_owned())),
                    Some(r) => Err(StoreError::LeaseLost {
                        run_id: run_id.to_owned(),
                        epoch: r.epoch,
                    }),
                },
            }
        }

        async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError> {
            agent_sql::retention::prune(self, policy).await
        }

        async fn set_tool_enabled(
            &self,
            tool: &str,
            enabled: bool,
            reason: Option<&str>,
        ) -> Result<(), StoreError> {
            sqlx::query(sql::SET_TOOL)
                .bind(tool)
                .bind(enabled)
                .bind(reason)
                .bind(now_ms())
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(())
        }
    }
    events {
        async fn event_wakes(
            &self,
        ) -> Result<Option<agent_core::store::EventWakes>, StoreError> {
            Ok(Some(self.events.subscribe()))
        }

        async fn event_head(&self) -> Result<agent_core::store::EventCursor, StoreError> {
            let last: i64 = sqlx::query_scalar(sql::LAST_POSITION)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(agent_core::store::EventCursor::after_position(
                u64::try_from(last).unwrap_or(0),
            ))
        }
    }
});

impl SqliteStore {
    /// Claim one run (`RunStore::claim_run` without its reads).
    pub(crate) async fn claim_one(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, RunRecord)>, StoreError> {
        let row = sqlx::query(sql::CLAIM_RUN.as_str())
            .bind(run_id)
            .bind(worker)
            .bind(now_ms())
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => match rows::stored_run(&row) {
                Ok(stored) => {
                    let r = self.remembered(stored.head);
                    Ok(Some((lease_of(&r, worker), r)))
                }
                Err(StoreError::Corrupt { run_id, message }) => {
                    let mut tx = self.write_tx().await?;
                    self.quarantine_unreadable(&mut tx, &run_id, &message)
                        .await?;
                    tx.commit().await.map_err(db_err)?;
                    Err(StoreError::Corrupt { run_id, message })
                }
                Err(e) => Err(e),
            },
            None if !self.exists(run_id).await? => Err(StoreError::NotFound(run_id.to_owned())),
            None => Ok(None),
        }
    }

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
                .bind(now)
                .bind(ms(ttl))
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            if let Some(row) = row {
                match rows::stored_run(&row) {
                    Ok(stored) => {
                        let r = self.remembered(stored.head);
                        out.push((lease_of(&r, worker), r));
                    }
                    // A run whose stored data no longer reads must not keep the others from
                    // being claimed: quarantine it for an operator and go on.
                    Err(StoreError::Corrupt { run_id, message }) => {
                        self.quarantine_unreadable(&mut tx, &run_id, &message)
                            .await?;
                    }
                    Err(e) => return Err(e),
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

    /// Quarantine a run whose row does not read (`RunStore::claim_run`, `claim_next`): written
    /// without decoding anything, so that listings say what the row holds and no worker
    /// claims it again.
    async fn quarantine_unreadable(
        &self,
        tx: &mut sqlx::SqliteConnection,
        run_id: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        tracing::error!(
            run_id,
            message,
            "quarantining a run whose row does not read"
        );
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

/// `sql` (`LIST_RUNS` or `COUNT_RUNS`, which share their parameters) bound to `filter`.
fn filtered<'q>(
    sql: &'static str,
    filter: &'q RunFilter,
    limit: Option<i64>,
) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>, StoreError> {
    let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    let statuses =
        serde_json::to_string(&statuses).map_err(|e| StoreError::backend(e.to_string()))?;
    let labels =
        serde_json::to_string(&filter.labels).map_err(|e| StoreError::backend(e.to_string()))?;
    Ok(sqlx::query(sql)
        .bind(&filter.agent)
        .bind(statuses)
        .bind(limit)
        .bind(i64::try_from(filter.labels.len()).unwrap_or(i64::MAX))
        .bind(labels)
        .bind(&filter.spawned_by)
        .bind(filter.created_after)
        .bind(filter.created_before)
        .bind(filter.agent_version.map(i64::from))
        .bind(&filter.fingerprint))
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
