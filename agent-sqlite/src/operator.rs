//! Operators' verbs (`OperatorStore::cancel_run`, `terminate_run`, `accept_cancel`): the run read
//! and the plan's write in one `BEGIN IMMEDIATE` transaction, so nothing commits between
//! what the plan saw and what it writes.

use agent_core::graph::GraphDescription;
use agent_core::store::history::VersionPayload;
use agent_core::store::operator::{
    OperatorPlan, OperatorTransition, cancel_reaches_child, child_cancel_note, plan_cancel,
    plan_drop_signal,
};
use agent_core::store::{
    Lease, MigrationCommit, Millis, OperatorNote, RunRecord, StoreError, now_ms,
};
use agent_sql::commit::{CommitPlan, operator_args};
use agent_sql::heads::RunHead;
use agent_sql::reads::bind;
use agent_sql::retention::{Compacted, PrunePoint, SqlRetention};
use agent_sql::rows::{self, Applied};
use agent_sql::{corrupt, to_i64};
use async_trait::async_trait;
use sqlx::Row;

use crate::{SqliteStore, db_err, sql};

impl SqliteStore {
    /// Read run `run_id`, ask `plan` what to do, and do it, in one write transaction.
    /// `request` is the note a cancel request records.
    pub(crate) async fn operator_action(
        &self,
        run_id: &str,
        request: Option<&OperatorNote>,
        plan: impl FnOnce(&RunRecord, Millis) -> Result<OperatorPlan, StoreError>,
    ) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let head = head_in(&mut tx, run_id).await?;
        match plan(&head.record, now)? {
            OperatorPlan::Unchanged => Ok(head.record),
            OperatorPlan::RequestCancel => {
                let note = request.ok_or_else(|| {
                    StoreError::Backend("a cancel request without a note".to_owned())
                })?;
                sqlx::query(sql::REQUEST_CANCEL)
                    .bind(run_id)
                    .bind(&note.by)
                    .bind(&note.reason)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
                tx.commit().await.map_err(db_err)?;
                let mut record = head.record;
                record.cancel_requested = Some(note.clone());
                record.updated_at = now;
                Ok(record)
            }
            OperatorPlan::Transition(t) => {
                let (plan, payload) = CommitPlan::operator(head, &t);
                let applied = write_transition(&mut tx, run_id, &t, &plan, &payload, now).await?;
                tx.commit().await.map_err(db_err)?;
                self.work.notify_waiters();
                self.events.wake(run_id);
                let lease = t.lease(run_id);
                Ok(plan.applied(&lease, &t.commit, applied, &self.heads))
            }
        }
    }
}

/// An operator's transition written in a transaction not committed yet: the run it leaves,
/// once the transaction commits.
struct Written {
    run_id: String,
    plan: CommitPlan,
    t: Box<OperatorTransition>,
    applied: Applied,
}

impl SqliteStore {
    /// `OperatorStore::cancel_run`: the run's cancel ([`plan_cancel`]), then the same for each of
    /// its children a cancel reaches ([`cancel_reaches_child`]), and theirs, in one write
    /// transaction: no child commits a step after its parent's cancel.
    pub(crate) async fn cancel_with_children(
        &self,
        run_id: &str,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let mut written = Vec::new();
        let head = head_in(&mut tx, run_id).await?;
        let plan = plan_cancel(&head.record, note, now)?;
        let parent = cancel_in(&mut tx, head, plan, note, now, &mut written).await?;
        let mut parents = vec![run_id.to_owned()];
        while let Some(p) = parents.pop() {
            let graph = self.graph_in(&mut tx, &p).await?;
            let children = sqlx::query(agent_sql::sql::CHILDREN_TO_CANCEL.as_str())
                .bind(&p)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?;
            for row in children {
                let c = |e: sqlx::Error| corrupt(&p, e);
                let child: String = row.try_get("id").map_err(c)?;
                let state: Option<String> = row.try_get("to_state").map_err(c)?;
                if !cancel_reaches_child(graph.as_ref(), state.as_deref()) {
                    continue;
                }
                let child_note = child_cancel_note(&p, note);
                let head = match head_in(&mut tx, &child).await {
                    Ok(head) => head,
                    // Its first claim quarantines it; it must not keep its parent running.
                    Err(StoreError::Corrupt { .. }) => continue,
                    Err(e) => return Err(e),
                };
                match plan_cancel(&head.record, &child_note, now) {
                    Ok(plan) => {
                        cancel_in(&mut tx, head, plan, &child_note, now, &mut written).await?;
                    }
                    Err(StoreError::RunIsFinal { .. }) => {}
                    Err(e) => return Err(e),
                }
                parents.push(child);
            }
        }
        tx.commit().await.map_err(db_err)?;
        self.work.notify_waiters();
        let mut record = parent;
        for w in written {
            self.events.wake(&w.run_id);
            let lease = w.t.lease(&w.run_id);
            let applied = w.plan.applied(&lease, &w.t.commit, w.applied, &self.heads);
            if w.run_id == run_id {
                record = Some(applied);
            }
        }
        record.ok_or_else(|| StoreError::Backend(format!("the cancel of `{run_id}` wrote nothing")))
    }

    /// The registered graph of run `run_id`'s agent and fingerprint, read in `tx`.
    async fn graph_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
        run_id: &str,
    ) -> Result<Option<GraphDescription>, StoreError> {
        let head = head_in(tx, run_id).await?;
        let agent = head.record.agent.as_str();
        sqlx::query(sql::AGENT_GRAPH)
            .bind(agent)
            .bind(&head.record.fingerprint)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_err)?
            .map(|row| rows::graph(agent, &row))
            .transpose()
    }

    /// `OperatorStore::drop_signal`: the run and the signal read, the plan's `signal_dropped`
    /// version written with the run's wait kept, and the signal marked consumed at it, in
    /// one write transaction.
    pub(crate) async fn write_signal_drop(
        &self,
        run_id: &str,
        signal_id: i64,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let head = head_in(&mut tx, run_id).await?;
        let signal = sqlx::query(sql::SIGNAL_OF_RUN)
            .bind(run_id)
            .bind(signal_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::NoPendingSignal {
                run_id: run_id.to_owned(),
                signal_id,
            })?;
        let signal = rows::signal(run_id, &signal)?;
        let t = plan_drop_signal(&head.record, &signal, note, now)?;
        let (plan, payload) = CommitPlan::operator(head, &t);
        let applied = write_transition(&mut tx, run_id, &t, &plan, &payload, now).await?;
        let version = to_i64(plan.version);
        sqlx::query(sql::KEEP_WAIT_ROW)
            .bind(run_id)
            .bind(&t.commit.waiting_for)
            .bind(t.commit.wake_at)
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::MIGRATED_TRANSITION)
            .bind(run_id)
            .bind(&t.commit.waiting_for)
            .bind(t.commit.wake_at)
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::CONSUME_SIGNAL)
            .bind(signal_id)
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        self.events.wake(run_id);
        let lease = t.lease(run_id);
        Ok(plan.applied(&lease, &t.commit, applied, &self.heads))
    }

    /// `RunStore::migrate_run`: the run read, the migration checked against it
    /// ([`MigrationCommit::refusal`]), then the `migrated` version written as an operator's
    /// transition (its note chained into the hash) with the lease kept, and the row's
    /// agent version, fingerprint, resume base and wait set, in one write transaction.
    pub(crate) async fn write_migration(
        &self,
        lease: &Lease,
        m: &MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        let run_id = lease.run_id.as_str();
        let now = now_ms();
        let mut tx = self.write_tx().await?;
        let head = head_in(&mut tx, run_id).await?;
        if let Some(refused) = m.refusal(&head.record, lease.epoch) {
            return Err(refused);
        }
        let t = m.transition(lease.epoch);
        let (plan, payload) = CommitPlan::operator(head, &t);
        let applied = write_transition(&mut tx, run_id, &t, &plan, &payload, now).await?;
        sqlx::query(sql::MIGRATED_ROW)
            .bind(run_id)
            .bind(i64::from(m.to_agent_version))
            .bind(&m.fingerprint)
            .bind(to_i64(m.version()))
            .bind(m.resume_base.map(to_i64))
            .bind(&m.waiting_for)
            .bind(m.wake_at)
            .bind(&m.to_state)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql::MIGRATED_TRANSITION)
            .bind(run_id)
            .bind(&m.waiting_for)
            .bind(m.wake_at)
            .bind(to_i64(m.version()))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        self.events.wake(run_id);
        Ok(plan.migrated(lease, m, &t.commit, applied, &self.heads))
    }
}

/// Write what `plan` says for the cancel of the run `head` reads, in `tx`: the request
/// recorded, or the transition (kept in `written` for after the commit). The run as it is
/// now, or `None` when it waits in `written`.
async fn cancel_in(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    head: RunHead,
    plan: OperatorPlan,
    note: &OperatorNote,
    now: Millis,
    written: &mut Vec<Written>,
) -> Result<Option<RunRecord>, StoreError> {
    let run_id = head.record.id.clone();
    match plan {
        OperatorPlan::Unchanged => Ok(Some(head.record)),
        OperatorPlan::RequestCancel => {
            sqlx::query(sql::REQUEST_CANCEL)
                .bind(&run_id)
                .bind(&note.by)
                .bind(&note.reason)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(db_err)?;
            let mut record = head.record;
            record.cancel_requested = Some(note.clone());
            record.updated_at = now;
            Ok(Some(record))
        }
        OperatorPlan::Transition(t) => {
            let (plan, payload) = CommitPlan::operator(head, &t);
            let applied = write_transition(tx, &run_id, &t, &plan, &payload, now).await?;
            written.push(Written {
                run_id,
                plan,
                t,
                applied,
            });
            Ok(None)
        }
    }
}

/// Run `run_id`'s head read in write transaction `tx`: what an operator's write plans
/// from, with no commit landing before the write.
async fn head_in(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    run_id: &str,
) -> Result<RunHead, StoreError> {
    let row = sqlx::query(sql::LOAD_RUN)
        .bind(run_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    Ok(rows::stored_run(&row)?.head)
}

/// The run row and the transition of an operator's plan.
async fn write_transition(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    run_id: &str,
    t: &OperatorTransition,
    plan: &CommitPlan,
    payload: &VersionPayload,
    now: Millis,
) -> Result<Applied, StoreError> {
    let (payload_kind, body) = match payload {
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
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_err)?
    .ok_or_else(|| {
        StoreError::Backend(format!("run `{run_id}` moved inside its write transaction"))
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
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(applied)
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
    serde_json::to_string(value).map_err(|e| StoreError::Backend(e.to_string()))
}
