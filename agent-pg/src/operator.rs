//! Operators' verbs (`Store::cancel_run`, `terminate_run`, `accept_cancel`): the run row
//! locked, read, and the plan's write made in one transaction, so no commit lands between
//! what the plan saw and what it writes.

use agent_core::store::history::VersionPayload;
use agent_core::store::operator::OperatorPlan;
use agent_core::store::{Millis, OperatorNote, RunRecord, StoreError};
use agent_sql::commit::{CommitPlan, operator_args};
use agent_sql::corrupt;
use agent_sql::reads::bind;
use agent_sql::rows::{self, SqlRow};
use sqlx::Row;

use crate::connect::db_err;
use crate::{PgStore, sql};

impl PgStore {
    /// Lock and read run `run_id`, ask `plan` what to do, and do it, in one transaction.
    /// `request` is the note a cancel request records.
    pub(crate) async fn operator_action(
        &self,
        run_id: &str,
        request: Option<&OperatorNote>,
        plan: impl FnOnce(&RunRecord, Millis) -> Result<OperatorPlan, StoreError>,
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let locked = sqlx::query(sql::LOCK_RUN)
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
        if locked.is_none() {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(run_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        let head = rows::stored_run(&row)?.head;
        // Lease expiry is judged by the database's clock, as claims judge it.
        let now: Millis = sqlx::query_scalar("SELECT ts_to_ms(clock_timestamp())")
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
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
                let (payload_kind, snapshot, patch) = match payload {
                    VersionPayload::Snapshot(_) => ("snapshot", Some(&commit.state), None),
                    VersionPayload::Patch(v) => ("patch", None, Some(v)),
                };
                let row = bind(
                    sqlx::query(sql::OPERATOR_TRANSITION),
                    &operator_args(run_id, &t, &plan),
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
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?
                .ok_or_else(|| StoreError::Backend(format!("run `{run_id}` moved while locked")))?;
                let applied = row.applied_row().map_err(c)?;
                tx.commit().await.map_err(db_err)?;
                self.event_written(run_id);
                let lease = t.lease(run_id);
                Ok(plan.applied(&lease, commit, applied, &self.heads))
            }
        }
    }
}
