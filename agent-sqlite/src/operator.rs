//! Operators' verbs on SQLite: the dialect of [`agent_sql::operator`], whose verbs
//! (`OperatorStore::cancel_run`, `terminate_run`, `drop_signal`, `RunStore::accept_cancel`,
//! `migrate_run`) read the run and make the plan's write in one `BEGIN IMMEDIATE`
//! transaction, so nothing commits between what the plan saw and what it writes.

use agent_core::store::history::VersionPayload;
use agent_core::store::operator::OperatorTransition;
use agent_core::store::{
    MigrationCommit, Millis, OperatorNote, StepCommit, StoreError, WaitingFor, now_ms,
};
use agent_sql::commit::{CommitPlan, operator_args};
use agent_sql::heads::{HeadCache, RunHead};
use agent_sql::operator::{OperatorTx, SqlOperator};
use agent_sql::reads::{Arg, bind, fetch_all};
use agent_sql::retention::{Compacted, PrunePoint, SqlRetention};
use agent_sql::rows::{self, Applied};
use agent_sql::{corrupt, to_i64};
use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, Transaction};

use crate::{SqliteStore, db_err, sql};

/// An operator's transaction on SQLite: a write transaction, which holds the database.
#[derive(Debug)]
pub struct SqliteOperatorTx(Transaction<'static, Sqlite>);

#[async_trait]
impl SqlOperator for SqliteStore {
    type Tx = SqliteOperatorTx;

    async fn operator_tx(&self) -> Result<SqliteOperatorTx, StoreError> {
        Ok(SqliteOperatorTx(self.write_tx().await?))
    }

    fn heads(&self) -> &HeadCache {
        &self.heads
    }

    fn written(&self, run_id: &str) {
        self.work.notify_waiters();
        self.events.wake(run_id);
    }
}

#[async_trait]
impl OperatorTx for SqliteOperatorTx {
    type Row = SqliteRow;

    agent_sql::statements!(OperatorTx, sql);

    async fn fetch(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<SqliteRow>, StoreError> {
        fetch_all(&mut *self.0, sql, args).await.map_err(db_err)
    }

    async fn head(&mut self, run_id: &str) -> Result<RunHead, StoreError> {
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(run_id)
            .fetch_optional(&mut *self.0)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        Ok(rows::stored_run(&row)?.head)
    }

    /// This process's clock, which every claim of the one-process store uses too.
    async fn now(&mut self) -> Result<Millis, StoreError> {
        Ok(now_ms())
    }

    async fn request_cancel(
        &mut self,
        run_id: &str,
        note: &OperatorNote,
        now: Millis,
    ) -> Result<Millis, StoreError> {
        sqlx::query(sql::REQUEST_CANCEL)
            .bind(run_id)
            .bind(&note.by)
            .bind(&note.reason)
            .bind(now)
            .execute(&mut *self.0)
            .await
            .map_err(db_err)?;
        Ok(now)
    }

    async fn write_transition(
        &mut self,
        run_id: &str,
        t: &OperatorTransition,
        plan: &CommitPlan,
        payload: VersionPayload,
        now: Millis,
    ) -> Result<Applied, StoreError> {
        let (payload_kind, body) = match &payload {
            VersionPayload::Snapshot(v) => ("snapshot", v.to_string()),
            VersionPayload::Patch(v) => ("patch", v.to_string()),
        };
        let snapshot_state = payload.is_snapshot().then_some(body.as_str());
        let commit = &t.commit;
        let row = bind(
            sqlx::query(sql::OPERATOR_RUN),
            &operator_args(run_id, t, plan),
        )
        .bind(now)
        .bind(snapshot_state)
        .fetch_optional(&mut *self.0)
        .await
        .map_err(db_err)?
        .ok_or_else(|| {
            StoreError::backend(format!("run `{run_id}` moved inside its write transaction"))
        })?;
        let c = |e: sqlx::Error| corrupt(run_id, e);
        let applied = Applied {
            lease_owner: row.try_get("lease_owner").map_err(c)?,
            lease_expires_at: row.try_get("lease_expires_at").map_err(c)?,
            updated_at: now,
        };
        sqlx::query(sql::INSERT_OPERATOR_TRANSITION)
            .bind(run_id)
            .bind(to_i64(plan.version))
            .bind(&commit.from_state)
            .bind(&commit.to_state)
            .bind(commit.kind.as_str())
            .bind(commit.status.as_str())
            .bind(to_i64(t.epoch))
            .bind(now)
            .bind(&plan.hash)
            .bind(payload_kind)
            .bind(&body)
            .bind(&t.note.by)
            .bind(&t.note.reason)
            .bind(commit.error.as_ref().map(|e| e.code.as_str()))
            .bind(commit.error.as_ref().map(|e| e.message.as_str()))
            .execute(&mut *self.0)
            .await
            .map_err(db_err)?;
        Ok(applied)
    }

    async fn keep_wait_and_drop(
        &mut self,
        run_id: &str,
        commit: &StepCommit,
        version: u64,
        signal_id: i64,
    ) -> Result<(), StoreError> {
        let version = to_i64(version);
        for statement in [sql::KEEP_WAIT_ROW, sql::MIGRATED_TRANSITION] {
            sqlx::query(statement)
                .bind(run_id)
                .bind(commit.waiting_for.as_ref().map(WaitingFor::as_str))
                .bind(commit.wake_at)
                .bind(version)
                .execute(&mut *self.0)
                .await
                .map_err(db_err)?;
        }
        sqlx::query(sql::CONSUME_SIGNAL)
            .bind(signal_id)
            .bind(version)
            .execute(&mut *self.0)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn migrated(&mut self, run_id: &str, m: &MigrationCommit) -> Result<(), StoreError> {
        sqlx::query(sql::MIGRATED_ROW)
            .bind(run_id)
            .bind(i64::from(m.to_agent_version))
            .bind(&m.fingerprint)
            .bind(to_i64(m.version()))
            .bind(m.resume_base.map(to_i64))
            .bind(m.waiting_for.as_ref().map(WaitingFor::as_str))
            .bind(m.wake_at)
            .bind(&m.to_state)
            .execute(&mut *self.0)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::MIGRATED_TRANSITION)
            .bind(run_id)
            .bind(m.waiting_for.as_ref().map(WaitingFor::as_str))
            .bind(m.wake_at)
            .bind(to_i64(m.version()))
            .execute(&mut *self.0)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        self.0.commit().await.map_err(db_err)
    }

    async fn rollback(self) {
        // Best effort: a connection that fails here is dropped, and its lock with it.
        let _ = self.0.rollback().await;
    }
}

#[async_trait]
impl SqlRetention for SqliteStore {
    /// One write transaction (one turn of the one writer for the batch) of seven
    /// statements, the batch's ids bound as a JSON array.
    async fn delete_expired(&self, ids: &[String], before: Millis) -> Result<u64, StoreError> {
        let ids = json_text(&ids)?;
        let mut tx = self.write_tx().await?;
        // The deleted records' positions are never drawn again (followers past them).
        sqlx::query(sql::RAISE_POSITION_FLOOR)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let deleted: Vec<String> = sqlx::query_scalar(sql::RETENTION.delete_expired_runs.as_str())
            .bind(&ids)
            .bind(before)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        if deleted.is_empty() {
            return Ok(0);
        }
        let gone = json_text(&deleted)?;
        for statement in &sql::RETENTION.delete_runs_rows {
            sqlx::query(statement.as_str())
                .bind(&gone)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        for id in &deleted {
            self.heads.forget(id);
            self.events.wake(id);
        }
        Ok(deleted.len() as u64)
    }

    /// One write transaction of four statements, the batch bound as one JSON array of
    /// `[id, cutoff, state]`.
    async fn compact(&self, points: Vec<PrunePoint>) -> Result<Compacted, StoreError> {
        let batch: Vec<(&str, i64, String)> = points
            .iter()
            .map(|p| (p.id.as_str(), to_i64(p.cutoff), p.state.to_string()))
            .collect();
        let batch = json_text(&batch)?;
        let mut tx = self.write_tx().await?;
        // The removed records' positions are never drawn again (followers past them).
        sqlx::query(sql::RAISE_POSITION_FLOOR)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::RETENTION.snapshots.as_str())
            .bind(&batch)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let versions_of: Vec<String> = sqlx::query_scalar(sql::RETENTION.versions.as_str())
            .bind(&batch)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::RETENTION.outputs.as_str())
            .bind(&batch)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let entries = sqlx::query(sql::RETENTION.journal.as_str())
            .bind(&batch)
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

/// `value` as JSON text, as a batch is bound.
fn json_text(value: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::backend(e.to_string()))
}
