//! The [`Store`] contract on PostgreSQL: each method one statement where it can be (its
//! text in `sql.rs`, or in `agent_sql::sql` when SQLite shares it), the methods that are
//! the same on both SQL stores written once in [`agent_sql::reads`] and
//! [`agent_sql::dialect`] (this store's dialect in `lib.rs`).
//!
//! [`Store`]: agent_core::store::Store

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_core::store::{
    ClaimReads, Claimed, EntryKind, EventWakes, HistoryStore, Lease, Millis, NewRun, RepairCommit,
    RunFilter, RunRecord, RunStatus, StoreError, ToolStats,
};
use agent_sql::dialect::{ClaimedRow, ListingTail, claimed_row, quarantine_unreadable};
use agent_sql::{corrupt, ms, rows, to_i64, to_u64};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::error::db_err;
use crate::group_commit::PgGroupCommit;
use crate::{PgStore, limit_sql, schedule_sql, sql};

agent_sql::impl_sql_store!(PgStore {
    history {
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
    }
    runs {
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

        async fn wait_for_work(&self, timeout: Duration) {
            self.ensure_listener();
            // Polling, nothing wakes the wait: it ends by the interval.
            let timeout = match &self.wakeups {
                crate::pooler::Wakeups::Poll(every) => timeout.min(*every),
                crate::pooler::Wakeups::Listen(_) => timeout,
            };
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
                .bind(commit.expected_status.as_str())
                .bind(commit.kind.as_str())
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
    }
    events {
        async fn event_wakes(&self) -> Result<Option<EventWakes>, StoreError> {
            match &self.wakeups {
                crate::pooler::Wakeups::Poll(_) => Ok(Some(self.events.subscribe_here())),
                crate::pooler::Wakeups::Listen(listen) => {
                    self.events.subscribe(&self.pool, listen).await.map(Some)
                }
            }
        }
    }
});

/// `sql` (`LIST_RUNS` or `COUNT_RUNS`, which share their parameters) bound to `filter`,
/// then to the key to list after, if any (`LIST_RUNS_AFTER`).
pub(crate) fn filtered<'q>(
    sql: &'static str,
    filter: &'q RunFilter,
    limit: Option<i64>,
    tail: ListingTail<'q>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let statuses: Vec<&'static str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    let query = sqlx::query(sql)
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
        .bind(&filter.fingerprint);
    match tail {
        ListingTail::Nothing => query,
        ListingTail::After(key) => query.bind(key.created_at).bind(&key.id),
        ListingTail::LabelKey(key) => query.bind(key),
    }
}

impl PgStore {
    /// `query`'s rows, read on a connection held outside the pool: a worker's claim and
    /// its reads come one after the other, and through the pool the second waited for the
    /// first's connection to be handed back by a task of its own, or for a new one, behind
    /// the steps the claim had just started (W3 in `BENCHMARKS.md`).
    async fn fetch_held(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let held = self.group.connections();
        let (mut conn, opened) = held.take(self.pool.raw()).await?;
        let rows = query.fetch_all(self.pool.on(&mut conn)).await;
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
            match claimed_row(&self.heads, row, worker)? {
                ClaimedRow::Claimed(lease, record) => out.push((lease, record)),
                // A run whose stored data no longer reads must not keep the others from
                // being claimed: quarantine it for an operator and go on.
                ClaimedRow::Unreadable { run_id, message } => {
                    quarantine_unreadable(self, &run_id, &message).await?;
                }
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

agent_sql::impl_sql_schedules!(PgStore, schedule_sql);
agent_sql::impl_sql_limits!(PgStore, limit_sql);
