//! Operators' verbs on PostgreSQL: the dialect of [`agent_sql::operator`], whose verbs
//! (`OperatorStore::cancel_run`, `terminate_run`, `drop_signal`, `RunStore::accept_cancel`,
//! `migrate_run`) lock the run row, read it, and make the plan's write in one transaction,
//! so no commit lands between what the plan saw and what it writes.

use agent_core::store::history::VersionPayload;
use agent_core::store::operator::OperatorTransition;
use agent_core::store::{
    MigrationCommit, Millis, OperatorNote, StepCommit, StoreError, WaitingFor,
};
use agent_sql::commit::{CommitPlan, operator_args};
use agent_sql::heads::{HeadCache, RunHead};
use agent_sql::operator::{OperatorTx, SqlOperator};
use agent_sql::reads::{Arg, bind, fetch_all};
use agent_sql::retention::{Compacted, PrunePoint, SqlRetention};
use agent_sql::rows::{self, Applied, SqlRow};
use agent_sql::{corrupt, to_i64};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row, Transaction};

use crate::error::db_err;
use crate::{PgStore, sql};

/// An operator's transaction on PostgreSQL: each run it plans from is locked first.
#[derive(Debug)]
pub struct PgOperatorTx {
    tx: Transaction<'static, Postgres>,
    /// The store's notification channel, which the transition's statement notifies.
    channel: String,
}

#[async_trait]
impl SqlOperator for PgStore {
    type Tx = PgOperatorTx;

    async fn operator_tx(&self) -> Result<PgOperatorTx, StoreError> {
        Ok(PgOperatorTx {
            tx: self.pool.begin().await.map_err(db_err)?,
            channel: self.channel.clone(),
        })
    }

    fn heads(&self) -> &HeadCache {
        &self.heads
    }

    fn written(&self, run_id: &str) {
        // The workers are woken by the transition's own statement (`NOTIFY`).
        self.event_written(run_id);
    }
}

#[async_trait]
impl OperatorTx for PgOperatorTx {
    type Row = PgRow;

    agent_sql::statements!(OperatorTx, sql);

    async fn fetch(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<PgRow>, StoreError> {
        fetch_all(&mut *self.tx, sql, args).await.map_err(db_err)
    }

    async fn head(&mut self, run_id: &str) -> Result<RunHead, StoreError> {
        let locked = sqlx::query(sql::LOCK_RUN)
            .bind(run_id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?;
        if locked.is_none() {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(run_id)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(rows::stored_run(&row)?.head)
    }

    /// The database's clock: lease expiry is judged by it, as claims judge it.
    async fn now(&mut self) -> Result<Millis, StoreError> {
        sqlx::query_scalar("SELECT ts_to_ms(clock_timestamp())")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)
    }

    async fn request_cancel(
        &mut self,
        run_id: &str,
        note: &OperatorNote,
        _now: Millis,
    ) -> Result<Millis, StoreError> {
        sqlx::query(sql::REQUEST_CANCEL)
            .bind(run_id)
            .bind(&note.by)
            .bind(&note.reason)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("updated_at")
            .map_err(|e| corrupt(run_id, e))
    }

    async fn write_transition(
        &mut self,
        run_id: &str,
        t: &OperatorTransition,
        plan: &CommitPlan,
        payload: VersionPayload,
        _now: Millis,
    ) -> Result<Applied, StoreError> {
        let commit = &t.commit;
        let (payload_kind, snapshot, patch) = match payload {
            VersionPayload::Snapshot(_) => ("snapshot", Some(&commit.state), None),
            VersionPayload::Patch(v) => ("patch", None, Some(v)),
        };
        let row = bind(
            sqlx::query(sql::OPERATOR_TRANSITION),
            &operator_args(run_id, t, plan),
        )
        .bind(snapshot)
        .bind(&commit.from_state)
        .bind(&commit.to_state)
        .bind(commit.kind.as_str())
        .bind(payload_kind)
        .bind(&patch)
        .bind(&t.note.by)
        .bind(&t.note.reason)
        .bind(&self.channel)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::backend(format!("run `{run_id}` moved while locked")))?;
        row.applied_row().map_err(|e| corrupt(run_id, e))
    }

    /// One statement: the row's and the transition's wait, and the signal consumed.
    async fn keep_wait_and_drop(
        &mut self,
        run_id: &str,
        commit: &StepCommit,
        version: u64,
        signal_id: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::KEEP_WAIT_DROP_SIGNAL)
            .bind(run_id)
            .bind(commit.waiting_for.as_ref().map(WaitingFor::as_str))
            .bind(commit.wake_at)
            .bind(to_i64(version))
            .bind(signal_id)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    /// One statement: the row and the transition's wait.
    async fn migrated(&mut self, run_id: &str, m: &MigrationCommit) -> Result<(), StoreError> {
        sqlx::query(sql::MIGRATED_ROW)
            .bind(run_id)
            .bind(i32::try_from(m.to_agent_version).unwrap_or(i32::MAX))
            .bind(&m.fingerprint)
            .bind(to_i64(m.version()))
            .bind(m.resume_base.map(to_i64))
            .bind(m.waiting_for.as_ref().map(WaitingFor::as_str))
            .bind(m.wake_at)
            .bind(&m.to_state)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await.map_err(db_err)
    }

    async fn rollback(self) {
        // Best effort: a connection that fails here is dropped, and its locks with it.
        let _ = self.tx.rollback().await;
    }
}

#[async_trait]
impl SqlRetention for PgStore {
    /// One transaction of seven statements, the batch's ids bound as a `text[]`.
    async fn delete_expired(&self, ids: &[String], before: Millis) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let deleted: Vec<String> = sqlx::query_scalar(sql::RETENTION.delete_expired_runs.as_str())
            .bind(ids)
            .bind(before)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        if deleted.is_empty() {
            return Ok(0);
        }
        for statement in &sql::RETENTION.delete_runs_rows {
            sqlx::query(statement.as_str())
                .bind(&deleted)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        for id in &deleted {
            self.heads.forget(id);
            self.event_written(id);
        }
        Ok(deleted.len() as u64)
    }

    /// One transaction of four statements, the batch bound as arrays (ids, cutoffs, and
    /// the states as a `jsonb[]`).
    async fn compact(&self, points: Vec<PrunePoint>) -> Result<Compacted, StoreError> {
        let mut ids = Vec::with_capacity(points.len());
        let mut cutoffs = Vec::with_capacity(points.len());
        let mut states = Vec::with_capacity(points.len());
        for p in points {
            ids.push(p.id);
            cutoffs.push(to_i64(p.cutoff));
            states.push(p.state);
        }
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        sqlx::query(sql::RETENTION.snapshots.as_str())
            .bind(&ids)
            .bind(&cutoffs)
            .bind(&states)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let versions_of: Vec<String> = sqlx::query_scalar(sql::RETENTION.versions.as_str())
            .bind(&ids)
            .bind(&cutoffs)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::RETENTION.outputs.as_str())
            .bind(&ids)
            .bind(&cutoffs)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let entries = sqlx::query(sql::RETENTION.journal.as_str())
            .bind(&ids)
            .bind(&cutoffs)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        tx.commit().await.map_err(db_err)?;
        Ok(Compacted {
            versions_of,
            entries,
        })
    }
}
