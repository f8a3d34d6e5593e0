//! Operators' verbs and migrations on a SQL store, written once: the run read in a write
//! transaction where no commit can land before the plan's write ([`OperatorTx::head`]),
//! the plan asked ([`agent_core::store::operator`]), its write made, then the run as it is
//! after the commit returned and the followers woken. What differs between the dialects
//! (the statements, how the row is held, whose clock judges a lease) is the store's
//! [`OperatorTx`].

use agent_core::graph::GraphDescription;
use agent_core::store::history::VersionPayload;
use agent_core::store::operator::{
    OperatorPlan, OperatorTransition, cancel_reaches_child, child_cancel_note, plan_cancel,
    plan_drop_signal,
};
use agent_core::store::{
    Lease, MigrationCommit, Millis, OperatorNote, RunRecord, SignalRecord, StepCommit, StoreError,
};
use async_trait::async_trait;

use crate::commit::CommitPlan;
use crate::heads::{HeadCache, RunHead};
use crate::reads::Arg;
use crate::rows::{self, Applied, SqlRow};
use crate::{corrupt, sql};

/// An operator's write transaction in a dialect: the statements the verbs need, each in
/// the transaction, which [`commit`](Self::commit) ends (dropping it rolls back).
#[async_trait]
pub trait OperatorTx: Send {
    /// The driver's row.
    type Row: SqlRow + Send;

    /// As [`SqlReads::AGENT_GRAPH`](crate::reads::SqlReads::AGENT_GRAPH).
    const AGENT_GRAPH: &'static str;
    /// A run's signal in the columns of [`rows::SignalRow`], `$1` the run, `$2` the
    /// signal's id.
    const SIGNAL_OF_RUN: &'static str;

    /// The rows of `sql` with `args` bound in order, in the transaction.
    async fn fetch(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Self::Row>, StoreError>;

    /// Run `run_id`'s head, read so that no commit lands on the run before this
    /// transaction's write (PostgreSQL locks the row; SQLite's write transaction holds the
    /// database). [`StoreError::NotFound`] when there is no such run.
    async fn head(&mut self, run_id: &str) -> Result<RunHead, StoreError>;

    /// Now, by the clock that judges leases (the one claims use).
    async fn now(&mut self) -> Result<Millis, StoreError>;

    /// Record `note` as the run's cancel request; the run's `updated_at` after it.
    async fn request_cancel(
        &mut self,
        run_id: &str,
        note: &OperatorNote,
        now: Millis,
    ) -> Result<Millis, StoreError>;

    /// Write the version `plan` makes of `t` on the run: the run row and the transition
    /// with its note.
    async fn write_transition(
        &mut self,
        run_id: &str,
        t: &OperatorTransition,
        plan: &CommitPlan,
        payload: VersionPayload,
        now: Millis,
    ) -> Result<Applied, StoreError>;

    /// The children a cancel of `parent` may reach (not final), each with the state that
    /// started it (`None` when it does not read).
    async fn children_to_cancel(
        &mut self,
        parent: &str,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = self
            .fetch(sql::CHILDREN_TO_CANCEL.as_str(), &[Arg::Text(parent)])
            .await?;
        rows.iter()
            .map(|row| {
                let child = row.child_row().map_err(|e| corrupt(parent, e))?;
                Ok((child.id, child.to_state))
            })
            .collect()
    }

    /// The registered graph of `run`'s agent and fingerprint.
    async fn graph(&mut self, run: &RunRecord) -> Result<Option<GraphDescription>, StoreError> {
        let args = [Arg::Text(&run.agent), Arg::OptText(Some(&run.fingerprint))];
        let rows = self.fetch(Self::AGENT_GRAPH, &args).await?;
        rows.first()
            .map(|row| rows::graph(&run.agent, row))
            .transpose()
    }

    /// Signal `signal_id` of run `run_id`, if it has one of that id.
    async fn signal(
        &mut self,
        run_id: &str,
        signal_id: i64,
    ) -> Result<Option<SignalRecord>, StoreError> {
        let args = [Arg::Text(run_id), Arg::Int(signal_id)];
        let rows = self.fetch(Self::SIGNAL_OF_RUN, &args).await?;
        rows.first()
            .map(|row| rows::signal(run_id, row))
            .transpose()
    }

    /// After the `signal_dropped` version `version` (`commit`): the run's wait kept on the
    /// row and the transition, and the signal marked consumed at that version.
    async fn keep_wait_and_drop(
        &mut self,
        run_id: &str,
        commit: &StepCommit,
        version: u64,
        signal_id: i64,
    ) -> Result<(), StoreError>;

    /// After the `migrated` version of `m`: the row's agent version, fingerprint, resume
    /// base, state name and wait, and the transition's wait.
    async fn migrated(&mut self, run_id: &str, m: &MigrationCommit) -> Result<(), StoreError>;

    /// Commit the transaction.
    async fn commit(self) -> Result<(), StoreError>;

    /// End the transaction writing nothing, now: the run row's lock is released before
    /// the verb answers. A transaction merely dropped is rolled back only when its
    /// connection is next used, and until then a claim skipping locked rows does not see
    /// the run (found by replaying the protocol model's paths, `tests/model`).
    async fn rollback(self);
}

/// End `tx` writing nothing and answer `refused`.
async fn refuse<T: OperatorTx, R>(tx: T, refused: StoreError) -> Result<R, StoreError> {
    tx.rollback().await;
    Err(refused)
}

/// What the operators' verbs need of a SQL store.
#[async_trait]
pub trait SqlOperator: Send + Sync {
    /// The store's operator transaction.
    type Tx: OperatorTx;

    /// Begin a write transaction for an operator's verb.
    async fn operator_tx(&self) -> Result<Self::Tx, StoreError>;

    /// The heads the store remembers: a verb's run after its commit becomes the head.
    fn heads(&self) -> &HeadCache;

    /// After a committed write to `run_id` that gives events or makes it claimable: wake
    /// its followers and the workers, as the store wakes them.
    fn written(&self, run_id: &str);
}

/// Read run `run_id`, ask `plan` what to do, and do it, in one transaction. `request` is
/// the note a cancel request records.
///
/// # Errors
/// The plan's refusal; the store's error for a failed statement.
pub async fn operator_action<S: SqlOperator>(
    store: &S,
    run_id: &str,
    request: Option<&OperatorNote>,
    plan: impl FnOnce(&RunRecord, Millis) -> Result<OperatorPlan, StoreError> + Send,
) -> Result<RunRecord, StoreError> {
    let mut tx = store.operator_tx().await?;
    let head = tx.head(run_id).await?;
    let now = tx.now().await?;
    let planned = match plan(&head.record, now) {
        Ok(planned) => planned,
        Err(refused) => return refuse(tx, refused).await,
    };
    match planned {
        OperatorPlan::Unchanged => {
            tx.rollback().await;
            Ok(head.record)
        }
        OperatorPlan::RequestCancel => {
            let note = request
                .ok_or_else(|| StoreError::backend("a cancel request without a note".to_owned()))?;
            let updated_at = tx.request_cancel(run_id, note, now).await?;
            tx.commit().await?;
            let mut record = head.record;
            record.cancel_requested = Some(note.clone());
            record.updated_at = updated_at;
            Ok(record)
        }
        OperatorPlan::Transition(t) => {
            let (plan, payload) = CommitPlan::operator(head, &t);
            let applied = tx.write_transition(run_id, &t, &plan, payload, now).await?;
            tx.commit().await?;
            store.written(run_id);
            let lease = t.lease(run_id);
            Ok(plan.applied(&lease, &t.commit, applied, store.heads()))
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

/// `OperatorStore::cancel_run`: the run's cancel ([`plan_cancel`]), then the same for each
/// of its children a cancel reaches ([`cancel_reaches_child`]), and theirs, parent first,
/// in one transaction: no child commits a step after its parent's cancel.
///
/// # Errors
/// As `OperatorStore::cancel_run`.
pub async fn cancel_with_children<S: SqlOperator>(
    store: &S,
    run_id: &str,
    note: &OperatorNote,
) -> Result<RunRecord, StoreError> {
    let mut tx = store.operator_tx().await?;
    let head = tx.head(run_id).await?;
    let now = tx.now().await?;
    let mut written = Vec::new();
    let plan = match plan_cancel(&head.record, note, now) {
        Ok(plan) => plan,
        Err(refused) => return refuse(tx, refused).await,
    };
    let graph = tx.graph(&head.record).await?;
    let parent = cancel_in(&mut tx, head, plan, note, now, &mut written).await?;
    let mut parents = vec![(run_id.to_owned(), graph)];
    while let Some((p, graph)) = parents.pop() {
        for (child, state) in tx.children_to_cancel(&p).await? {
            if !cancel_reaches_child(graph.as_ref(), state.as_deref()) {
                continue;
            }
            let child_note = child_cancel_note(&p, note);
            let head = match tx.head(&child).await {
                Ok(head) => head,
                // Its first claim quarantines it; it must not keep its parent running.
                Err(StoreError::Corrupt { .. }) => continue,
                Err(e) => return Err(e),
            };
            let child_graph = tx.graph(&head.record).await?;
            match plan_cancel(&head.record, &child_note, now) {
                Ok(plan) => {
                    cancel_in(&mut tx, head, plan, &child_note, now, &mut written).await?;
                }
                Err(StoreError::RunIsFinal { .. }) => {}
                Err(e) => return Err(e),
            }
            parents.push((child, child_graph));
        }
    }
    tx.commit().await?;
    let mut record = parent;
    for w in written {
        store.written(&w.run_id);
        let lease = w.t.lease(&w.run_id);
        let applied = w
            .plan
            .applied(&lease, &w.t.commit, w.applied, store.heads());
        if w.run_id == run_id {
            record = Some(applied);
        }
    }
    record.ok_or_else(|| StoreError::backend(format!("the cancel of `{run_id}` wrote nothing")))
}

/// Write what `plan` says for the cancel of the run `head` reads, in `tx`: the request
/// recorded, or the transition (kept in `written` for after the commit). The run as it is
/// now, or `None` when it waits in `written`.
async fn cancel_in<T: OperatorTx>(
    tx: &mut T,
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
            let updated_at = tx.request_cancel(&run_id, note, now).await?;
            let mut record = head.record;
            record.cancel_requested = Some(note.clone());
            record.updated_at = updated_at;
            Ok(Some(record))
        }
        OperatorPlan::Transition(t) => {
            let (plan, payload) = CommitPlan::operator(head, &t);
            let applied = tx
                .write_transition(&run_id, &t, &plan, payload, now)
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

/// `OperatorStore::drop_signal`: the run and the signal read, the plan's `signal_dropped`
/// version written with the run's wait kept, and the signal marked consumed at it, in one
/// transaction.
///
/// # Errors
/// As `OperatorStore::drop_signal`.
pub async fn drop_signal<S: SqlOperator>(
    store: &S,
    run_id: &str,
    signal_id: i64,
    note: &OperatorNote,
) -> Result<RunRecord, StoreError> {
    let mut tx = store.operator_tx().await?;
    let head = tx.head(run_id).await?;
    let now = tx.now().await?;
    let Some(signal) = tx.signal(run_id, signal_id).await? else {
        let refused = StoreError::NoPendingSignal {
            run_id: run_id.to_owned(),
            signal_id,
        };
        return refuse(tx, refused).await;
    };
    let t = match plan_drop_signal(&head.record, &signal, note, now) {
        Ok(t) => t,
        Err(refused) => return refuse(tx, refused).await,
    };
    let (plan, payload) = CommitPlan::operator(head, &t);
    let applied = tx.write_transition(run_id, &t, &plan, payload, now).await?;
    tx.keep_wait_and_drop(run_id, &t.commit, plan.version, signal_id)
        .await?;
    tx.commit().await?;
    store.written(run_id);
    let lease = t.lease(run_id);
    Ok(plan.applied(&lease, &t.commit, applied, store.heads()))
}

/// `RunStore::migrate_run`: the run read, the migration checked against it
/// ([`MigrationCommit::refusal`]), then the `migrated` version written as an operator's
/// transition (its note chained into the hash) with the lease kept, and the row's agent
/// version, fingerprint, resume base and wait set, in one transaction.
///
/// # Errors
/// As `RunStore::migrate_run`.
pub async fn migrate<S: SqlOperator>(
    store: &S,
    lease: &Lease,
    m: &MigrationCommit,
) -> Result<RunRecord, StoreError> {
    let run_id = lease.run_id.as_str();
    let mut tx = store.operator_tx().await?;
    let head = tx.head(run_id).await?;
    if let Some(refused) = m.refusal(&head.record, lease.epoch) {
        return refuse(tx, refused).await;
    }
    let now = tx.now().await?;
    let t = m.transition(lease.epoch);
    let (plan, payload) = CommitPlan::operator(head, &t);
    let applied = tx.write_transition(run_id, &t, &plan, payload, now).await?;
    tx.migrated(run_id, m).await?;
    tx.commit().await?;
    store.written(run_id);
    Ok(plan.migrated(lease, m, &t.commit, applied, store.heads()))
}
