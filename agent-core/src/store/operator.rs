//! What an operator's cancel or terminate does to a run, decided here from the run as
//! stored so that every store behaves the same.
//!
//! A store reads the run inside its write (a locked row, a write transaction, its mutex),
//! asks [`plan_cancel`], [`plan_terminate`] or [`plan_accept_cancel`], and writes what the
//! plan says in the same write.

use crate::graph::GraphDescription;

pub use super::labels::{
    MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_CHARS, MAX_LABELS, validate_label, validate_labels,
};
use super::{
    ChainLink, FailureCode, Lease, Millis, OperatorNote, RunFailure, RunRecord, RunStatus,
    SignalRecord, StepCommit, StoreError, TransitionKind,
};

/// What an operator's action writes.
#[derive(Clone, Debug, PartialEq)]
pub enum OperatorPlan {
    /// Nothing: the run already is, or is becoming, what was asked. The store returns the
    /// run as it is, without a new version.
    Unchanged,
    /// Record the cancel request on the run (a worker holds a live lease on it): the
    /// holder's next commit is refused with [`StoreError::CancelRequested`] and it takes
    /// the cancel instead ([`plan_accept_cancel`]).
    RequestCancel,
    /// Write this transition.
    Transition(Box<OperatorTransition>),
}

/// An operator's transition: a new version with the run's state unchanged, chained like
/// any commit, with the operator's note.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorTransition {
    /// The version written, as a commit (`expected_version` is the run's version: the write
    /// is a compare-and-set on it like any commit).
    pub commit: StepCommit,
    /// Who and why.
    pub note: OperatorNote,
    /// The epoch of the write. Without a live lease it is the run's epoch plus one, which
    /// fences out a holder whose lease expired (its next write gets
    /// [`StoreError::LeaseLost`]); a terminate also fences a live holder out this way. The
    /// lease holder taking a cancel keeps its epoch.
    pub epoch: u64,
    /// Whether the lease stays with its holder (the holder taking a cancel goes on to
    /// compensate under it); otherwise the write ends the lease.
    pub keep_lease: bool,
}

impl OperatorTransition {
    /// What the transition's hash covers, for run `run_id`.
    #[must_use]
    pub fn link<'a>(&'a self, run_id: &'a str) -> ChainLink<'a> {
        ChainLink {
            run_id,
            version: self.commit.expected_version + 1,
            from_state: &self.commit.from_state,
            to_state: &self.commit.to_state,
            kind: self.commit.kind,
            status: self.commit.status,
            epoch: self.epoch,
            state: &self.commit.state,
            note: Some(&self.note),
        }
    }

    /// The lease the write is fenced by, for stores that plan it like a commit.
    #[must_use]
    pub fn lease(&self, run_id: &str) -> Lease {
        Lease {
            run_id: run_id.to_owned(),
            worker: String::new(),
            epoch: self.epoch,
            expires_at: 0,
        }
    }
}

fn lease_is_live(record: &RunRecord, now: Millis) -> bool {
    record.lease_owner.is_some() && record.lease_expires_at.is_some_and(|t| t > now)
}

fn transition(
    record: &RunRecord,
    kind: TransitionKind,
    status: RunStatus,
    code: FailureCode,
    note: OperatorNote,
    epoch: u64,
    keep_lease: bool,
) -> OperatorTransition {
    let verb = if kind == TransitionKind::Terminate {
        "terminated"
    } else {
        "cancelled"
    };
    OperatorTransition {
        commit: StepCommit {
            expected_version: record.version,
            from_state: record.state_name.clone(),
            to_state: record.state_name.clone(),
            state: record.state.clone(),
            kind,
            status,
            waiting_for: None,
            wake_at: None,
            error: Some(RunFailure {
                code,
                message: format!("{verb} by {}: {}", note.by, note.reason),
            }),
            consumed_signal: None,
            spend: None,
        },
        note,
        epoch,
        keep_lease,
    }
}

/// Cancel `record` at `now` for `note`:
/// - a cancelled run, a compensating one (its compensations already run) and one whose
///   cancel is already requested while its lease is live: [`OperatorPlan::Unchanged`];
/// - another final run: refused;
/// - a run held by a live lease: [`OperatorPlan::RequestCancel`];
/// - otherwise (running, waiting, or held by an expired lease): the `cancel` transition to
///   compensating with error [`FailureCode::Cancelled`], fencing out the expired holder. A request
///   recorded earlier keeps its note: the first operator to cancel is the one recorded.
///
/// # Errors
/// [`StoreError::RunIsFinal`] for a run in a final status other than cancelled.
pub fn plan_cancel(
    record: &RunRecord,
    note: &OperatorNote,
    now: Millis,
) -> Result<OperatorPlan, StoreError> {
    match record.status {
        RunStatus::Cancelled | RunStatus::Compensating => return Ok(OperatorPlan::Unchanged),
        status if status.is_final() => {
            return Err(StoreError::RunIsFinal {
                run_id: record.id.clone(),
                status,
                action: "cancelled",
            });
        }
        _ => {}
    }
    if lease_is_live(record, now) {
        return Ok(if record.cancel_requested.is_some() {
            OperatorPlan::Unchanged
        } else {
            OperatorPlan::RequestCancel
        });
    }
    let note = record
        .cancel_requested
        .clone()
        .unwrap_or_else(|| note.clone());
    Ok(OperatorPlan::Transition(Box::new(transition(
        record,
        TransitionKind::Cancel,
        RunStatus::Compensating,
        FailureCode::Cancelled,
        note,
        record.epoch + 1,
        false,
    ))))
}

/// Whether an operator's cancel of a parent reaches a child it started while in state
/// `state_at_spawn` (the parent's state at the child's [`SpawnedBy::version`]), under the
/// parent's `graph`: every child does, except those of a state that declares
/// `children_outlive`. Without the graph or the state (pruned), the child is cancelled: a
/// cancel that stops too much is seen and undone by starting anew, a child that runs on
/// after its parent's cancel has done what it did.
///
/// [`SpawnedBy::version`]: super::SpawnedBy::version
#[must_use]
pub fn cancel_reaches_child(
    graph: Option<&GraphDescription>,
    state_at_spawn: Option<&str>,
) -> bool {
    !matches!(
        (graph, state_at_spawn),
        (Some(g), Some(s)) if g.state(s).is_some_and(|d| d.children_outlive)
    )
}

/// The note of the cancel a parent's cancel gives each of its children (and theirs): the
/// same operator, and why, naming the parent.
#[must_use]
pub fn child_cancel_note(parent: &str, note: &OperatorNote) -> OperatorNote {
    OperatorNote {
        by: note.by.clone(),
        reason: format!("its parent `{parent}` was cancelled: {}", note.reason),
    }
}

/// Terminate `record` for `note`, whoever holds it: a terminated run is
/// [`OperatorPlan::Unchanged`]; a run that ended (completed, compensated, cancelled) is
/// refused; any other run, failed, quarantined and dead-lettered ones included, gets the
/// `terminate` transition to terminated, with a new epoch that fences out a live holder
/// (its next write gets [`StoreError::LeaseLost`] and it stops). Nothing is compensated.
///
/// A failed, quarantined or dead-lettered run waits for an operator (`retry` and `resume`
/// send it back to work); terminating it is how an operator closes it out instead, so that
/// no run can be left with nothing that ends it.
///
/// # Errors
/// [`StoreError::RunIsFinal`] for a completed, compensated or cancelled run.
pub fn plan_terminate(record: &RunRecord, note: &OperatorNote) -> Result<OperatorPlan, StoreError> {
    match record.status {
        RunStatus::Terminated => Ok(OperatorPlan::Unchanged),
        status if status.has_ended() => Err(StoreError::RunIsFinal {
            run_id: record.id.clone(),
            status,
            action: "terminated",
        }),
        _ => Ok(OperatorPlan::Transition(Box::new(transition(
            record,
            TransitionKind::Terminate,
            RunStatus::Terminated,
            FailureCode::Terminated,
            note.clone(),
            record.epoch + 1,
            false,
        )))),
    }
}

/// Drop the pending `signal` of `record` at `now` for `note`
/// ([`OperatorStore::drop_signal`](super::OperatorStore::drop_signal)): the `signal_dropped` transition,
/// which keeps the run's state, status, error and wait, and records who dropped which signal
/// and why (its note's reason names the signal, then gives `note`'s reason). The store marks
/// the signal consumed at the transition's version in the same write, so no step ever reads
/// it. The write takes a new epoch, fencing out a holder whose lease expired.
///
/// `signal` must be a pending signal of `record`'s run; the store reads it in its write.
///
/// # Errors
/// [`StoreError::RunIsHeld`] while a live lease holds the run (its holder may be consuming
/// the signal); [`StoreError::RunIsFinal`] for a run that ended (completed, compensated,
/// cancelled, terminated); [`StoreError::NoPendingSignal`] when `signal` is not a pending
/// signal of the run.
pub fn plan_drop_signal(
    record: &RunRecord,
    signal: &SignalRecord,
    note: &OperatorNote,
    now: Millis,
) -> Result<OperatorTransition, StoreError> {
    if signal.run_id != record.id || signal.consumed_at_version.is_some() {
        return Err(StoreError::NoPendingSignal {
            run_id: record.id.clone(),
            signal_id: signal.id,
        });
    }
    if record.status.has_ended() {
        return Err(StoreError::RunIsFinal {
            run_id: record.id.clone(),
            status: record.status,
            action: "changed",
        });
    }
    if lease_is_live(record, now) {
        return Err(StoreError::RunIsHeld {
            run_id: record.id.clone(),
            action: "dropping a signal",
        });
    }
    let note = OperatorNote {
        by: note.by.clone(),
        reason: format!(
            "dropped signal #{} `{}`: {}",
            signal.id, signal.name, note.reason
        ),
    };
    Ok(OperatorTransition {
        commit: StepCommit {
            expected_version: record.version,
            from_state: record.state_name.clone(),
            to_state: record.state_name.clone(),
            state: record.state.clone(),
            kind: TransitionKind::SignalDropped,
            status: record.status,
            waiting_for: record.waiting_for.clone(),
            wake_at: record.wake_at,
            error: record.error.clone(),
            consumed_signal: Some(signal.id),
            spend: None,
        },
        note,
        epoch: record.epoch + 1,
        keep_lease: false,
    })
}

/// The `cancel` transition the holder of `lease` writes for the cancel requested on
/// `record` (see [`RunStore::accept_cancel`](super::RunStore::accept_cancel)).
///
/// # Errors
/// [`StoreError::LeaseLost`] when the epoch moved; [`StoreError::Backend`] when no cancel
/// is requested.
pub fn plan_accept_cancel(
    record: &RunRecord,
    lease: &Lease,
) -> Result<OperatorTransition, StoreError> {
    if record.epoch != lease.epoch {
        return Err(StoreError::LeaseLost {
            run_id: lease.run_id.clone(),
            epoch: lease.epoch,
        });
    }
    let note = record
        .cancel_requested
        .clone()
        .ok_or_else(|| StoreError::backend(format!("run `{}` has no cancel request", record.id)))?;
    Ok(transition(
        record,
        TransitionKind::Cancel,
        RunStatus::Compensating,
        FailureCode::Cancelled,
        note,
        lease.epoch,
        true,
    ))
}

/// Which stopped runs an operator's re-queue takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueMode {
    /// Quarantined and dead-lettered runs (`agentctl resume`).
    Resume,
    /// Those, and failed runs, whose failed step runs again (`agentctl retry`).
    Retry,
}

/// What re-queueing a run does ([`plan_requeue`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Nothing: the run is running or compensating already.
    Already,
    /// Set this status and error ([`OperatorStore::set_status`](super::OperatorStore::set_status)).
    To(RunStatus, Option<RunFailure>),
}

/// Why a run cannot be re-queued, with what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequeueRefused {
    /// It waits for a signal: send it.
    #[error("run `{run}` is waiting for `{waiting_for}`, not stuck")]
    Waiting {
        /// The run.
        run: String,
        /// What it waits for.
        waiting_for: String,
    },
    /// It ended: start a new run, or fork this one.
    #[error("run `{run}` is {status}: there is nothing to re-run")]
    Ended {
        /// The run.
        run: String,
        /// Its final status.
        status: RunStatus,
    },
    /// It failed, and the mode was [`RequeueMode::Resume`]: retry it.
    #[error("run `{run}` failed; resuming only re-queues quarantined and dead-lettered runs")]
    Failed {
        /// The run.
        run: String,
    },
}

/// What re-queueing `run` in `mode` does: a quarantined, dead-lettered (or, retrying, a
/// failed) run goes back to running with its error cleared, or to compensating with its
/// error kept when its compensations failed ([`FailureCode::CompensationFailed`]).
///
/// # Errors
/// [`RequeueRefused`] for a run that waits, ended, or failed when only resuming.
pub fn plan_requeue(run: &RunRecord, mode: RequeueMode) -> Result<Requeue, RequeueRefused> {
    match run.status {
        RunStatus::Running | RunStatus::Compensating => Ok(Requeue::Already),
        RunStatus::Waiting => Err(RequeueRefused::Waiting {
            run: run.id.clone(),
            waiting_for: run
                .waiting_for
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        }),
        RunStatus::Completed
        | RunStatus::Compensated
        | RunStatus::Cancelled
        | RunStatus::Terminated => Err(RequeueRefused::Ended {
            run: run.id.clone(),
            status: run.status,
        }),
        RunStatus::Failed if mode == RequeueMode::Resume => Err(RequeueRefused::Failed {
            run: run.id.clone(),
        }),
        RunStatus::Failed | RunStatus::Quarantined | RunStatus::DeadLettered => {
            let compensating = run
                .error
                .as_ref()
                .is_some_and(|e| e.code == FailureCode::CompensationFailed);
            Ok(if compensating {
                // The saga still has to finish undoing the run.
                Requeue::To(RunStatus::Compensating, run.error.clone())
            } else {
                Requeue::To(RunStatus::Running, None)
            })
        }
    }
}
