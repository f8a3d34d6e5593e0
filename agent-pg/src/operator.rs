//! Operators' verbs (`OperatorStore::cancel_run`, `terminate_run`, `accept_cancel`): the run row
//! locked, read, and the plan's write made in one transaction, so no commit lands between
//! what the plan saw and what it writes.

use agent_core::graph::GraphDescription;
use agent_core::store::history::VersionPayload;
use agent_core::store::operator::{
    OperatorPlan, OperatorTransition, cancel_reaches_child, child_cancel_note, plan_cancel,
    plan_drop_signal,
};
use agent_core::store::{
    Lease, MigrationCommit, Millis, OperatorNote, RunRecord, StoreError, TransitionKind,
};
use agent_sql::commit::{CommitPlan, operator_args};
use agent_sql::heads::RunHead;
use agent_sql::reads::bind;
use agent_sql::retention::{Compacted, PrunePoint, SqlRetention};
use agent_sql::rows::{self, Applied, SqlRow};
use agent_sql::{corrupt, to_i64};
use async_trait::async_trait;
use sqlx::Row;

use crate::connect::db_err;
use crate::{PgStore, sql};

/// Lock run `run_id`'s row in `tx` and read its head: what an operator's write plans from,
/// with no commit landing before the write.
async fn locked_head(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    run_id: &str,
) -> Result<RunHead, StoreError> {
    let locked = sqlx::query(sql::LOCK_RUN)
        .bind(run_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
    if locked.is_none() {
        return Err(StoreError::NotFound(run_id.to_owned()));
    }
    let row = sqlx::query(sql::LOAD_RUN)
        .bind(run_id)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_err)?;
    Ok(rows::stored_run(&row)?.head)
}

/// An operator's transition written in a transaction not committed yet: the run it leaves,
/// once the transaction commits.
struct Written {
    run_id: String,
    plan: CommitPlan,
    t: Box<OperatorTransition>,
    applied: Applied,
}

/// The database's clock, in `tx`: lease expiry is judged by it, as claims judge it.
async fn db_now(tx: &mut sqlx::Transaction<'static, sqlx::Postgres>) -> Result<Millis, StoreError> {
    sqlx::query_scalar("SELECT ts_to_ms(clock_timestamp())")
        .fetch_one(&mut **tx)
        .await
        .map_err(db_err)
}

impl PgStore {
    /// `OperatorStore::cancel_run`: the run's row locked and its cancel written ([`plan_cancel`]),
    /// then the same for each of its children a cancel reaches ([`cancel_reaches_child`]),
    /// and theirs, each row locked parent first, in one transaction: no child commits a
    /// step after its parent's cancel.
    pub(crate) async fn cancel_with_children(
        &self,
        run_id: &str,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let head = locked_head(&mut tx, run_id).await?;
        // Lease expiry is judged by the database's clock, as claims judge it.
        let now: Millis = db_now(&mut tx).await?;
        let mut written = Vec::new();
        let plan = plan_cancel(&head.record, note, now)?;
        let graph = self.graph_in(&mut tx, &head.record).await?;
        let parent = self
            .cancel_in(&mut tx, head, plan, note, &mut written)
            .await?;
        let mut parents = vec![(run_id.to_owned(), graph)];
        while let Some((p, graph)) = parents.pop() {
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
                let head = match locked_head(&mut tx, &child).await {
                    Ok(head) => head,
                    // Its first claim quarantines it; it must not keep its parent running.
                    Err(StoreError::Corrupt { .. }) => continue,
                    Err(e) => return Err(e),
                };
                let child_graph = self.graph_in(&mut tx, &head.record).await?;
                match plan_cancel(&head.record, &child_note, now) {
                    Ok(plan) => {
                        self.cancel_in(&mut tx, head, plan, &child_note, &mut written)
                            .await?;
                    }
                    Err(StoreError::RunIsFinal { .. }) => {}
                    Err(e) => return Err(e),
                }
                parents.push((child, child_graph));
            }
        }
        tx.commit().await.map_err(db_err)?;
        let mut record = parent;
        for w in written {
            self.event_written(&w.run_id);
            let lease = w.t.lease(&w.run_id);
            let applied = w.plan.applied(&lease, &w.t.commit, w.applied, &self.heads);
            if w.run_id == run_id {
                record = Some(applied);
            }
        }
        record.ok_or_else(|| StoreError::Backend(format!("the cancel of `{run_id}` wrote nothing")))
    }

    /// The registered graph of `run`'s agent and fingerprint, read in `tx`.
    async fn graph_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        run: &RunRecord,
    ) -> Result<Option<GraphDescription>, StoreError> {
        sqlx::query(sql::AGENT_GRAPH)
            .bind(&run.agent)
            .bind(&run.fingerprint)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_err)?
            .map(|row| rows::graph(&run.agent, &row))
            .transpose()
    }

    /// Write what `plan` says for the cancel of the run `head` reads (its row locked), in
    /// `tx`: the request recorded, or the transition (kept in `written` for after the
    /// commit). The run as it is now, or `None` when it waits in `written`.
    async fn cancel_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        head: RunHead,
        plan: OperatorPlan,
        note: &OperatorNote,
        written: &mut Vec<Written>,
    ) -> Result<Option<RunRecord>, StoreError> {
        let run_id = head.record.id.clone();
        match plan {
            OperatorPlan::Unchanged => Ok(Some(head.record)),
            OperatorPlan::RequestCancel => {
                let updated_at: Millis = sqlx::query(sql::REQUEST_CANCEL)
                    .bind(&run_id)
                    .bind(&note.by)
                    .bind(&note.reason)
                    .fetch_one(&mut **tx)
                    .await
                    .map_err(db_err)?
                    .try_get("updated_at")
                    .map_err(|e| corrupt(&run_id, e))?;
                let mut record = head.record;
                record.cancel_requested = Some(note.clone());
                record.updated_at = updated_at;
                Ok(Some(record))
            }
            OperatorPlan::Transition(t) => {
                let (plan, payload) = CommitPlan::operator(head, &t);
                let applied = self
                    .write_transition(tx, &run_id, &t, &plan, payload)
                    .await?;
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

    /// Lock and read run `run_id`, ask `plan` what to do, and do it, in one transaction.
    /// `request` is the note a cancel request records.
    pub(crate) async fn operator_action(
        &self,
        run_id: &str,
        request: Option<&OperatorNote>,
        plan: impl FnOnce(&RunRecord, Millis) -> Result<OperatorPlan, StoreError>,
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let head = locked_head(&mut tx, run_id).await?;
        // Lease expiry is judged by the database's clock, as claims judge it.
        let now: Millis = db_now(&mut tx).await?;
        let c = |e: sqlx::Error| corrupt(run_id, e);
        match plan(&head.record, now)? {
            OperatorPlan::Unchanged => Ok(head.record),
            OperatorPlan::RequestCancel => {
                let note = request.ok_or_else(|| {
                    StoreError::Backend("a cancel request without a note".to_owned())
                })?;
                let updated_at: Millis = sqlx::query(sql::REQUEST_CANCEL)
                    .bind(run_id)
                    .bind(&note.by)
                    .bind(&note.reason)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_err)?
                    .try_get("updated_at")
                    .map_err(c)?;
                tx.commit().await.map_err(db_err)?;
                let mut record = head.record;
                record.cancel_requested = Some(note.clone());
                record.updated_at = updated_at;
                Ok(record)
            }
            OperatorPlan::Transition(t) => {
                let (plan, payload) = CommitPlan::operator(head, &t);
                let commit = &t.commit;
                let applied = self
                    .write_transition(&mut tx, run_id, &t, &plan, payload)
                    .await?;
                tx.commit().await.map_err(db_err)?;
                self.event_written(run_id);
                let lease = t.lease(run_id);
                Ok(plan.applied(&lease, commit, applied, &self.heads))
            }
        }
    }

    /// `OperatorStore::drop_signal`: the run row locked and read with the signal, the plan's
    /// `signal_dropped` version written with the run's wait kept, and the signal marked
    /// consumed at it, in one transaction.
    pub(crate) async fn write_signal_drop(
        &self,
        run_id: &str,
        signal_id: i64,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let head = locked_head(&mut tx, run_id).await?;
        let now: Millis = db_now(&mut tx).await?;
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
        let commit = &t.commit;
        let applied = self
            .write_transition(&mut tx, run_id, &t, &plan, payload)
            .await?;
        sqlx::query(sql::KEEP_WAIT_DROP_SIGNAL)
            .bind(run_id)
            .bind(&commit.waiting_for)
            .bind(commit.wake_at)
            .bind(to_i64(plan.version))
            .bind(signal_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        self.event_written(run_id);
        let lease = t.lease(run_id);
        Ok(plan.applied(&lease, commit, applied, &self.heads))
    }

    /// `RunStore::migrate_run`: the run row locked and read, the migration checked against it
    /// ([`MigrationCommit::refusal`]), then the `migrated` version written as an operator's
    /// transition (its note chained into the hash) with the lease kept, and the row's
    /// agent version, fingerprint, resume base and wait set, in one transaction.
    pub(crate) async fn write_migration(
        &self,
        lease: &Lease,
        m: &MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        let run_id = lease.run_id.as_str();
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let head = locked_head(&mut tx, run_id).await?;
        if let Some(refused) = m.refusal(&head.record, lease.epoch) {
            return Err(refused);
        }
        let t = m.transition(lease.epoch);
        debug_assert_eq!(t.commit.kind, TransitionKind::Migrated);
        let (plan, payload) = CommitPlan::operator(head, &t);
        let commit = &t.commit;
        let applied = self
            .write_transition(&mut tx, run_id, &t, &plan, payload)
            .await?;
        sqlx::query(sql::MIGRATED_ROW)
            .bind(run_id)
            .bind(i32::try_from(m.to_agent_version).unwrap_or(i32::MAX))
            .bind(&m.fingerprint)
            .bind(to_i64(m.version()))
            .bind(m.resume_base.map(to_i64))
            .bind(&m.waiting_for)
            .bind(m.wake_at)
            .bind(&m.to_state)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        self.event_written(run_id);
        Ok(plan.migrated(lease, m, commit, applied, &self.heads))
    }

    /// Write the version an operator's transition (or a migration) plans, in `tx`, which
    /// locked the run: the run row and the transition with its note.
    async fn write_transition(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        run_id: &str,
        t: &OperatorTransition,
        plan: &CommitPlan,
        payload: VersionPayload,
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
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::Backend(format!("run `{run_id}` moved while locked")))?;
        row.applied_row().map_err(|e| corrupt(run_id, e))
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
