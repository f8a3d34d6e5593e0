//! The [`Store`] contract on PostgreSQL: each method one statement where it can be (its
//! text in `sql.rs`, or in `agent_sql::sql` when SQLite shares it), the reads that are the
//! same on both SQL stores through [`agent_sql::reads`].
//!
//! [`Store`]: agent_core::store::Store

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::store::{
    ClaimReads, Claimed, EntryKind, EventWakes, HistoryStore, Lease, Millis, NewRun, PruneReport,
    RepairCommit, RetentionPolicy, RunFailure, RunFilter, RunRecord, RunStatus, StoreError,
    ToolStats, VersionCount, now_ms,
};
use agent_sql::reads::head_of;
use agent_sql::write::SignalRow;
use agent_sql::{corrupt, lease_of, ms, rows, to_i64, to_u64};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::connect::db_err;
use crate::group_commit::PgGroupCommit;
use crate::{PgStore, sql};

agent_sql::impl_sql_store!(PgStore {
    history {
        async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
            let row = sqlx::query(sql::LOAD_RUN)
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            row.map(|r| self.run_from_row(&r)).transpose()
        }

        async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
            let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
            let query = match &filter.after {
                None => filtered(sql::LIST_RUNS, filter, limit),
                Some(key) => filtered(sql::LIST_RUNS_AFTER, filter, limit)
                    .bind(key.created_at)
                    .bind(&key.id),
            };
            let rows = query
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let (record, head) = rows::listed_run(row)?;
                if let Some(head) = head {
                    self.heads.remember(head);
                }
                out.push(record);
            }
            Ok(out)
        }

        async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError> {
            let rows = filtered(sql::COUNT_RUNS, filter, None)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            rows::status_counts(&rows)
        }

        async fn count_versions(&self, filter: &RunFilter) -> Result<Vec<VersionCount>, StoreError> {
            let rows = filtered(sql::COUNT_VERSIONS, filter, None)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            rows::version_counts(&rows)
        }

        async fn tool_stats(&self, since: Millis) -> Result<Vec<ToolStats>, StoreError> {
            let rows = sqlx::query(sql::TOOL_STATS)
                .bind(since)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            rows.iter()
                .map(|row| {
                    let c = |e: sqlx::Error| StoreError::backend(e.to_string());
                    let kind: String = row.try_get("kind").map_err(c)?;
                    let by_code: Option<Value> = row.try_get("by_code").map_err(c)?;
                    let errors_by_code = match by_code {
                        Some(v) => {
                            serde_json::from_value(v).map_err(|e| StoreError::backend(e.to_string()))?
                        }
                        None => std::collections::BTreeMap::new(),
                    };
                    Ok(ToolStats {
                        tool: row.try_get("name").map_err(c)?,
                        kind: EntryKind::parse(&kind),
                        calls: row.try_get("calls").and_then(to_u64).map_err(c)?,
                        failures: row.try_get("failures").and_then(to_u64).map_err(c)?,
                        avg_ms: row.try_get("avg_ms").map_err(c)?,
                        p50_ms: row.try_get("p50_ms").and_then(to_u64).map_err(c)?,
                        p99_ms: row.try_get("p99_ms").and_then(to_u64).map_err(c)?,
                        errors_by_code,
                    })
                })
                .collect()
        }

        async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
            let row = sqlx::query(sql::STORAGE_BYTES)
                .bind(run_id)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            let bytes: i64 = row.try_get(0).map_err(|e| corrupt(run_id, e))?;
            Ok(Some(u64::try_from(bytes).unwrap_or(0)))
        }
    }
    runs {
        async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
            let json = serde_json::to_value(graph).map_err(|e| StoreError::backend(e.to_string()))?;
            sqlx::query(sql::REGISTER_AGENT)
                .bind(&graph.agent)
                .bind(graph.fingerprint())
                .bind(json)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(())
        }

        async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
            self.create(&run, None).await
        }

        async fn create_run_claimed(
            &self,
            run: NewRun,
            worker: &str,
            ttl: Duration,
        ) -> Result<Option<Claimed>, StoreError> {
            agent_core::store::validate_labels(&run.labels)?;
            if let Some(record) = self.insert_run(&run, None, Some((worker, ttl))).await? {
                self.event_written(&record.id);
                return Ok(Some(agent_sql::created_claimed(record, worker)));
            }
            // The run exists: the same request's (a retry) or another's, as `create_run` says.
            self.create(&run, None).await?;
            self.claim_run(&run.id, worker, ttl).await
        }

        async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
            let row = sqlx::query(sql::RENEW_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .bind(&lease.worker)
                .bind(ms(ttl))
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            match row {
                Some(row) => Ok(Lease {
                    expires_at: row.try_get(0).map_err(|e| corrupt(&lease.run_id, e))?,
                    ..lease.clone()
                }),
                None => Err(self.fenced_out(lease).await?),
            }
        }

        async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
            sqlx::query(sql::RELEASE_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .bind(&self.channel)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(())
        }

        async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
            let expired = sqlx::query(sql::EXPIRE_LEASES_OF)
                .bind(worker)
                .bind(&self.channel)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(expired.len() as u64)
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
            self.waker.wake(&self.pool, &self.channel);
            self.event_written(run_id);
            Ok(id)
        }

        async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
            let row = sqlx::query(sql::QUARANTINE_UNDER_LEASE)
                .bind(&lease.run_id)
                .bind(to_i64(lease.epoch))
                .bind(error.code.as_str())
                .bind(&error.message)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            match row {
                Some(row) => {
                    let record = self.run_from_row(&row)?;
                    self.event_written(&record.id);
                    self.wake_parent(&record).await;
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
            self.ensure_listener();
            let notified = self.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // A notification that came since the last claim began (or the last wait ended)
            // was not waited for by anyone: the claim may have missed its run. Claim again.
            let now = self.notices.load(Ordering::Relaxed);
            if self.notices_seen.swap(now, Ordering::Relaxed) == now {
                let _ = tokio::time::timeout(timeout, notified).await;
                self.notices_seen
                    .store(self.notices.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }

        async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
            let ms: Option<i64> = sqlx::query_scalar(sql::NEXT_DUE)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
        }
    }
    operator {
        async fn repair_run(&self, commit: &RepairCommit) -> Result<RunRecord, StoreError> {
            let run_id = commit.run_id.as_str();
            let written = sqlx::query(sql::REPAIR_RUN)
                .bind(run_id)
                .bind(commit.state.to_string())
                .bind(&commit.to_state)
                .bind(to_i64(commit.version()))
                .bind(to_i64(commit.epoch()))
                .bind(&commit.hash)
                .bind(to_i64(commit.expected_epoch))
                .bind(to_i64(commit.last_version))
                .bind(&commit.from_state)
                .bind(&commit.note.by)
                .bind(&commit.note.reason)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            if written.rows_affected() != 1 {
                return Err(agent_sql::repair_refused(commit, self.load_run(run_id).await));
            }
            self.event_written(run_id);
            // Wake idle workers: the run is runnable again. Best effort, like every wake-up
            // (workers poll too).
            let _ = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.channel)
                .bind(run_id)
                .execute(&self.pool)
                .await;
            // Read back through `run_from_row`, which also remembers the new head.
            self.load_run(run_id)
                .await?
                .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))
        }

        async fn set_status(
            &self,
            run_id: &str,
            status: RunStatus,
            error: Option<RunFailure>,
        ) -> Result<RunRecord, StoreError> {
            let row = sqlx::query(sql::SET_STATUS)
                .bind(run_id)
                .bind(status.as_str())
                .bind(error.as_ref().map(|e| e.code.as_str()))
                .bind(error.as_ref().map(|e| e.message.as_str()))
                .bind(&self.channel)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            match row {
                Some(row) => {
                    self.event_written(run_id);
                    self.run_from_row(&row)
                }
                None => match head_of(self, run_id).await? {
                    None => Err(StoreError::NotFound(run_id.to_owned())),
                    Some((_, epoch)) => Err(StoreError::LeaseLost {
                        run_id: run_id.to_owned(),
                        epoch,
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
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(())
        }
    }
    events {
        async fn event_wakes(&self) -> Result<Option<EventWakes>, StoreError> {
            self.events.subscribe(&self.pool).await.map(Some)
        }

        async fn event_head(&self) -> Result<agent_core::store::EventCursor, StoreError> {
            // Every position drawn so far is at or below the sequence's last value (one below
            // it while it was never drawn from: `last_value` is then the next).
            let last: i64 = sqlx::query_scalar(
                "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END \
                 FROM event_positions",
            )
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            Ok(agent_core::store::EventCursor::after_position(
                u64::try_from(last).unwrap_or(0),
            ))
        }
    }
});

impl PgStore {
    /// Why a write fenced by `lease` matched no row: the run is gone, or the epoch moved.
    async fn fenced_out(&self, lease: &Lease) -> Result<StoreError, StoreError> {
        Ok(if head_of(self, &lease.run_id).await?.is_none() {
            StoreError::NotFound(lease.run_id.clone())
        } else {
            StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            }
        })
    }
}

impl PgStore {
    /// Quarantine a run whose row does not read (`RunStore::claim_run`, `claim_next`): written
    /// without decoding anything, so that listings say what the row holds and no worker
    /// claims it again.
    async fn quarantine_unreadable(&self, run_id: &str, message: &str) -> Result<(), StoreError> {
        tracing::error!(
            run_id,
            message,
            "quarantining a run whose row does not read"
        );
        sqlx::query(sql::QUARANTINE_CORRUPT)
            .bind(run_id)
            .bind(message)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        self.event_written(run_id);
        Ok(())
    }
}

/// `sql` (`LIST_RUNS` or `COUNT_RUNS`, which share their parameters) bound to `filter`.
fn filtered<'q>(
    sql: &'static str,
    filter: &'q RunFilter,
    limit: Option<i64>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let statuses: Vec<&'static str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    sqlx::query(sql)
        .bind(&filter.agent)
        .bind(statuses)
        .bind(limit)
        .bind(i64::try_from(filter.labels.len()).unwrap_or(i64::MAX))
        .bind(sqlx::types::Json(&filter.labels))
        .bind(&filter.spawned_by)
        .bind(filter.created_after)
        .bind(filter.created_before)
        .bind(
            filter
                .agent_version
                .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        )
        .bind(&filter.fingerprint)
}

impl PgStore {
    /// `RunStore::claim_run`.
    pub(crate) async fn claim_one(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, RunRecord)>, StoreError> {
        let row = sqlx::query(sql::CLAIM_RUN.as_str())
            .bind(run_id)
            .bind(worker)
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => match self.run_from_row(&row) {
                Ok(r) => Ok(Some((lease_of(&r, worker), r))),
                Err(StoreError::Corrupt { run_id, message }) => {
                    self.quarantine_unreadable(&run_id, &message).await?;
                    Err(StoreError::Corrupt { run_id, message })
                }
                Err(e) => Err(e),
            },
            None if head_of(self, run_id).await?.is_none() => {
                Err(StoreError::NotFound(run_id.to_owned()))
            }
            None => Ok(None),
        }
    }

    /// `query`'s rows, read on a connection held outside the pool: a worker's claim and
    /// its reads come one after the other, and through the pool the second waited for the
    /// first's connection to be handed back by a task of its own, or for a new one, behind
    /// the steps the claim had just started (W3 in `BENCHMARKS.md`).
    async fn fetch_held(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let held = self.group.connections();
        let (mut conn, opened) = held.take(&self.pool).await?;
        let rows = query.fetch_all(&mut conn).await;
        held.give_back(conn, opened, &rows);
        rows
    }

    /// The claimed runs with what their resumption reads first, in one statement for all
    /// of them ([`sql::CLAIM_READS`]). The claims stand whatever happens here: a run whose
    /// reads fail or do not decode gets `reads: None`, and the runner reads them itself.
    pub(crate) async fn with_reads(&self, claimed: Vec<(Lease, RunRecord)>) -> Vec<Claimed> {
        if claimed.is_empty() {
            return Vec::new();
        }
        let ids: Vec<&str> = claimed.iter().map(|(_, r)| r.id.as_str()).collect();
        let versions: Vec<i64> = claimed.iter().map(|(_, r)| to_i64(r.version)).collect();
        let waiting: Vec<bool> = (claimed.iter())
            .map(|(_, r)| r.status == RunStatus::Waiting)
            .collect();
        let rows = self
            .fetch_held(
                sqlx::query(sql::CLAIM_READS)
                    .bind(&ids)
                    .bind(&versions)
                    .bind(&waiting),
            )
            .await;
        agent_sql::with_claim_reads(claimed, rows.map_err(db_err), claim_reads)
    }

    /// `RunStore::claim_next`.
    pub(crate) async fn claim_batch(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<(Lease, RunRecord)>, StoreError> {
        // A worker's batch brings as many commits: a connection for each commit slot and
        // one for the claims, opened while the claim is read.
        if limit > 1 {
            self.group.open_ahead();
        }
        // What this claim can see includes every write notified so far (see
        // `wait_for_work`).
        self.notices_seen
            .store(self.notices.load(Ordering::Relaxed), Ordering::Relaxed);
        let rows = self
            .fetch_held(
                sqlx::query(sql::CLAIM_NEXT.as_str())
                    .bind(agents)
                    .bind(worker)
                    .bind(ms(ttl))
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX)),
            )
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            match self.run_from_row(row) {
                Ok(r) => out.push((lease_of(&r, worker), r)),
                // A run whose stored data no longer reads must not keep the others from
                // being claimed: quarantine it for an operator and go on.
                Err(StoreError::Corrupt { run_id, message }) => {
                    self.quarantine_unreadable(&run_id, &message).await?;
                }
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| (a.1.created_at, &a.1.id).cmp(&(b.1.created_at, &b.1.id)));
        Ok(out)
    }
}

/// One row of [`sql::CLAIM_READS`]: the run's id and its reads.
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
fn claim_reads(row: &PgRow) -> Result<(String, ClaimReads), StoreError> {
    let id: String = row
        .try_get("id")
        .map_err(|e| StoreError::backend(e.to_string()))?;
    let c = |e: sqlx::Error| corrupt(&id, e);
    let span: Vec<Option<i64>> = row.try_get("span").map_err(c)?;
    let journaled: bool = row.try_get("journaled").map_err(c)?;
    let pending: Option<Value> = row.try_get("pending").map_err(c)?;
    let reads = rows::claim_reads(&id, &span, journaled, pending)?;
    Ok((id, reads))
}
