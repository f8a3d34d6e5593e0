//! One step: run the handler (after the router loop in a `route = llm` state, or the
//! saga in a compensating run), then commit the transition it returned.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::caches::ReadCache;
use super::cx::{Recorded, StepCx, with_heartbeat};
use super::{Inner, Known, RunnerError, StepOutcome, children, route, saga};
use crate::agent::{Agent, Failure, Handle, Join, StepError, Wake};
use crate::graph::{Routing, StateDescription, TimerDescription};
use crate::store::WaitingFor;
use crate::store::{
    EntryKind, JournalEntry, Lease, Millis, RunFailure, RunRecord, RunStatus, StepCommit,
    StoreError, TransitionKind, now_ms,
};

/// Execute one step of a claimed, checked run.
///
/// The paths most steps do not take (the saga, the router loop, failures, waits) are boxed
/// where they are awaited: a future is as large as its largest path, and every run in
/// flight holds this one while its handler waits for a tool (issue 22, W4: thousands of
/// runs in one worker). For the same reason the record stays boxed, and the handler's part
/// is a block of its own, so that its space is not kept beside the commit's.
pub(super) async fn execute<A, H>(
    inner: &Inner,
    handlers: &H,
    lease: &mut Lease,
    mut record: Box<RunRecord>,
    state: A,
    known: Known,
    read_cache: &ReadCache,
) -> Result<StepOutcome, RunnerError>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    let graph = inner.graph;
    let desc = graph
        .state(&record.state_name)
        .expect("check_loaded verified the state exists");

    if record.status == RunStatus::Compensating {
        return Box::pin(saga::compensate(inner, lease, *record, desc)).await;
    }
    if desc.terminal {
        let status = if desc.compensate {
            RunStatus::Compensating
        } else {
            RunStatus::Completed
        };
        let record =
            Box::pin(inner.commit_status(lease, &record, status, record.error.clone())).await?;
        return Ok(if status.is_final() {
            StepOutcome::Finished(record)
        } else {
            StepOutcome::Committed(record)
        });
    }
    // How the step ends ([`StepEnd`]): the budget and the wait for a signal may end it
    // before its handler runs (`break 'step`); else the handler's result and what the step
    // recorded. Acted on by the one `match` below.
    //
    // The signal the step consumes, committed with its move.
    let mut consumed = None;
    let end = 'step: {
        if let Some(max) = graph.max_steps
            && record.version >= max
        {
            let e = StepError::Budget(format!("the agent allows at most {max} steps per run"));
            break 'step StepEnd::Fail(e);
        }

        // A waiting state runs only once its signal (or its timeout) is there.
        let mut wake = None;
        if let Some(w) = &desc.wait {
            // The signals the claim read, if it read them and the awaited one is among them
            // (it is still pending: only the lease holder consumes). Otherwise one may have
            // come since: read them.
            let claimed = match &known {
                Known::Claimed(reads) => (reads.pending_signals.as_ref())
                    .and_then(|p| p.iter().find(|s| s.name == w.signal))
                    .cloned(),
                Known::Nothing | Known::Fresh => None,
            };
            let found = match claimed {
                Some(sig) => Some(sig),
                None => (inner.store.pending_signals(&record.id).await?)
                    .into_iter()
                    .find(|s| s.name == w.signal),
            };
            if let Some(sig) = found {
                // A payload sealed with a key this worker lacks holds the run: nothing runs
                // on a payload it cannot read.
                let mut payload = sig.payload;
                if let Err(e) = inner.config.seal_keys.open_all(&mut payload) {
                    break 'step StepEnd::Quarantine(RunFailure {
                        code: e.code().into(),
                        message: format!("signal `{}`: {e}", sig.name),
                    });
                }
                wake = Some(Wake::Signal(payload));
                consumed = Some(sig.id);
            } else if record.wake_at.is_some_and(|t| t <= now_ms()) {
                wake = Some(Wake::TimedOut);
            } else {
                // A run not yet stored as waiting (it starts here, or an operator or a
                // migration put it here) starts its timer now.
                let due = if record.status == RunStatus::Waiting {
                    record.wake_at
                } else {
                    due_at(desc, &state)
                };
                break 'step StepEnd::Wait(WaitingFor::signal(&w.signal), due);
            }
        } else if desc.timer.is_some() {
            // A state with a timer alone runs once it is due. The due time is the stored
            // one once the run waits for it; a run not yet waiting (it starts here, or an
            // operator or a migration put it here) starts its timer now. A field that holds
            // no time is no timer: the handler runs at once.
            let due = if record.status == RunStatus::Waiting
                && record.waiting_for == Some(WaitingFor::Timer)
            {
                record.wake_at
            } else {
                due_at(desc, &state)
            };
            if due.is_some_and(|t| t > now_ms()) {
                break 'step StepEnd::Wait(WaitingFor::Timer, due);
            }
        }

        // A step that waited for its children resumes at the version it began at: the wait
        // was committed as the next one. So does the first step after a migration that
        // carried a step of the old version over (its completed calls, by index).
        let migrated_base = record.migration_resume_base();
        let base = match migrated_base {
            Some(base) => base,
            None if children::waits_for_children(&record) => record.version.saturating_sub(1),
            None => record.version,
        };
        // Nothing to read when the step is fresh, or the claim found no entry at this
        // version and the step resumes at it (not after its children, nor after a migration
        // that carried an interrupted step over).
        let resumes_earlier = base != record.version;
        let nothing_journaled = match &known {
            Known::Fresh => migrated_base.is_none(),
            Known::Claimed(reads) => !resumes_earlier && !reads.journaled_at_version,
            Known::Nothing => false,
        };
        let journal: BTreeMap<u32, JournalEntry> = if nothing_journaled {
            BTreeMap::new()
        } else {
            inner
                .store
                .journal(&record.id, Some(base))
                .await?
                .into_iter()
                .filter(|e| e.kind != EntryKind::Compensation)
                .map(|e| (e.seq, e))
                .collect()
        };
        // The handler's part of the step, inside the block that ends in the step's end: its
        // context and futures are freed before the commit, and so is their space in this
        // future, which waits there with the other runs' commits (a worker holds thousands
        // of steps at that point).
        let cx = StepCx::new(
            inner,
            &record,
            desc,
            lease.clone(),
            journal,
            wake,
            read_cache,
        )
        .resumed_at(base);

        let handler = async {
            if desc.route == Routing::Llm {
                let (to, args) = Box::pin(route::decide(&cx, A::NAME)).await?;
                let _ = cx.route_name.set(to);
                let _ = cx.route_args.set(args);
            }
            state.handle(handlers, &cx).await
        };
        let budgeted = async {
            match desc.timeout_ms {
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), handler)
                    .await
                    .unwrap_or_else(|_| {
                        Err(StepError::Budget(format!(
                            "state `{}` took longer than its {ms} ms budget",
                            desc.name
                        )))
                    }),
                None => handler.await,
            }
        };
        let result = with_heartbeat(&cx, budgeted)
            .await
            .unwrap_or_else(|| Err(StepError::Interrupted("the lease was lost".into())));
        let end = StepEnd::of(&cx, result).await;
        *lease = cx.lease();
        // What the handler spent (its journal's asks and calls) goes into the run's spend,
        // stored by the commit that ends the step; one waiting for its children resumes at
        // the version it began at and counts its entries when it ends. Taken after the
        // step's last wait, so that no run in flight keeps it while it waits.
        let spent = cx.spent();
        drop(cx);
        if !matches!(end, StepEnd::Suspend(_) | StepEnd::Defer(..)) {
            record.spend = record.spend.plus(spent);
        }
        end
    };
    match end {
        StepEnd::Abort(e) => Err(e),
        StepEnd::Quarantine(error) => {
            let record =
                Box::pin(inner.commit_status(lease, &record, RunStatus::Quarantined, Some(error)))
                    .await?;
            Ok(StepOutcome::after_commit(record))
        }
        StepEnd::Wait(..) if record.status == RunStatus::Waiting => {
            Ok(StepOutcome::Waiting(*record))
        }
        StepEnd::Wait(waiting_for, due) => {
            Box::pin(commit_wait(inner, lease, &record, waiting_for, due)).await
        }
        StepEnd::Suspend(join) => Box::pin(wait_for_children(inner, lease, *record, join)).await,
        StepEnd::Defer(until, why) => Box::pin(defer(inner, lease, *record, until, why)).await,
        StepEnd::Fail(e) => Box::pin(fail::<A>(inner, lease, &record, desc, &e)).await,
        StepEnd::Commit { next, reads } => {
            let to = next.state_name();
            let mut value = serde_json::to_value(&next).map_err(|e| {
                StoreError::backend(format!("state `{to}` does not serialize: {e}"))
            })?;
            // A state holding a secret that cannot be stored sealed is not committed.
            if let Err(e) = inner.seal_state(&mut value, to) {
                let e = StepError::Handler(e.to_string());
                return Box::pin(fail::<A>(inner, lease, &record, desc, &e)).await;
            }
            // Nor is one past the size bound: the step fails, the run keeps its last state.
            let limit = inner.config.max_payload_bytes;
            if let Err(why) = super::payload::fits(&value, limit, &format!("the state `{to}`")) {
                let e = StepError::Budget(why);
                return Box::pin(fail::<A>(inner, lease, &record, desc, &e)).await;
            }
            // The state the step began in is not needed past here (the commit carries the
            // new one, and the paths that keep the old one are behind): freed before the
            // commit, which waits with the other runs' commits, so that a run holds one
            // state there, not two.
            let mut record = record;
            record.state = Value::Null;
            let due = graph.state(to).and_then(|target| due_at(target, &next));
            drop(next);
            let record = enter(
                inner,
                lease,
                &record,
                Entering {
                    to,
                    value,
                    due,
                    kind: TransitionKind::Step,
                    error: None,
                    consumed,
                },
                &reads,
            )
            .await?;
            Ok(StepOutcome::after_commit(record))
        }
    }
}

/// How a step of a state with a handler ends: what the runner does with it. Built from the
/// handler's result and what the step recorded in one place ([`StepEnd::of`]); before the
/// handler runs, the budget of steps and the wait for a signal end a step too. Acted on by
/// one `match`, in [`execute`].
enum StepEnd<A> {
    /// Stop without committing anything (a crash was injected, the lease was lost, the store
    /// failed): the run is taken up again, by whoever claims it next, from its last commit.
    Abort(RunnerError),
    /// Commit the run as quarantined: what it journaled cannot be replayed (it contradicts
    /// the graph, or a sealed value does not open with this worker's keys).
    Quarantine(RunFailure),
    /// Commit the run as waiting for this signal, or for its timer, due then (unless it is
    /// already stored as waiting).
    Wait(WaitingFor, Option<Millis>),
    /// Commit the run as waiting for its children, until the join holds.
    Suspend(Join),
    /// Hand the run back until its turn under a rate limit, waiting for that; nothing is
    /// committed ([`limits`](super::limits)).
    Defer(Millis, WaitingFor),
    /// Take the state's `on_error` edge, or fail the run (compensating first).
    Fail(StepError),
    /// Commit the transition into `next`, with the reads journaled with it.
    Commit { next: A, reads: Vec<JournalEntry> },
}

impl<A: Agent> StepEnd<A> {
    /// The end of a step whose handler returned `result`, from what the step recorded.
    ///
    /// The order of the tests below is the order of precedence, and it carries meaning:
    /// - a condition that forbids writing (abort) beats everything: nothing may be
    ///   committed, not even a failure;
    /// - a quarantine beats every outcome of the handler: what the journal says cannot be
    ///   replayed, so nothing the step did may be built on;
    /// - a failure the handler could not swallow (a budget, nondeterminism, a second join)
    ///   beats a suspension and the handler's result: the step is wrong, not unfinished;
    /// - waiting for children beats whatever the handler made of the suspension (swallowed,
    ///   mapped to another error): the step did not finish;
    /// - so does waiting for a turn under a rate limit, after it (a step that started
    ///   children commits their wait first; its next attempt takes its turn again);
    /// - then the handler's result: its error, or its move, which must be a declared edge and,
    ///   in an LLM-routed state, the transition the router chose.
    ///
    /// The reads journaled with the commit go with a [`Commit`](Self::Commit). A step that
    /// ends otherwise (it fails, waits for its children, is quarantined) writes them now,
    /// so that its next attempt replays them; if that write fails, the store's error aborts
    /// the step. One that aborts leaves them, and its reads run again on resume.
    async fn of(cx: &StepCx<'_>, result: Result<A, StepError>) -> Self {
        let Recorded {
            abort,
            quarantine,
            failure,
            suspend,
            defer,
        } = cx.take_recorded();
        if let Some(e) = abort {
            return Self::Abort(e);
        }
        let end = if let Some(e) = quarantine {
            Self::Quarantine(e)
        } else if let Some(e) = failure {
            Self::Fail(e)
        } else if let Some(join) = suspend {
            Self::Suspend(join)
        } else if let Some((until, why)) = defer {
            Self::Defer(until, why)
        } else {
            match result.and_then(|next| moves_as_declared(cx, next.state_name()).map(|()| next)) {
                Ok(next) => {
                    return Self::Commit {
                        next,
                        reads: cx.take_deferred(),
                    };
                }
                Err(e) => Self::Fail(e),
            }
        };
        // Boxed: rare, and its writes would otherwise add to the space of every step's
        // future.
        if !Box::pin(cx.write_deferred()).await
            && let Some(e) = cx.take_fatal()
        {
            return Self::Abort(e);
        }
        end
    }
}

/// Whether the handler's move into `to` is one the step may commit: a declared edge and, in
/// an LLM-routed state, the transition the router chose.
fn moves_as_declared(cx: &StepCx<'_>, to: &str) -> Result<(), StepError> {
    let from = &cx.state.name;
    if !cx.inner.graph.has_edge(from, to) {
        return Err(StepError::Handler(format!(
            "`{from}` -> `{to}` is not a declared edge"
        )));
    }
    match cx.route_name.get() {
        Some(chosen) if chosen != to => Err(StepError::Routing(format!(
            "the router chose `{chosen}` but the handler moved to `{to}`"
        ))),
        _ => Ok(()),
    }
}

/// The step waits for its turn under a rate limit: hand the run back until `until`, as
/// waiting for `why`. The step's journal stays (its next attempt replays it); its spend is
/// counted when the step ends.
async fn defer(
    inner: &Inner,
    lease: &Lease,
    mut record: RunRecord,
    until: Millis,
    why: WaitingFor,
) -> Result<StepOutcome, RunnerError> {
    if !inner.store.defer_run(lease, until, &why).await? {
        return Err(RunnerError::LeaseLost(record.id));
    }
    record.lease_owner = None;
    record.lease_expires_at = None;
    record.wake_at = Some(until);
    record.waiting_for = Some(why);
    Ok(StepOutcome::Deferred(record))
}

/// The handler waits for its children: commit the run as waiting for them (once; a run
/// woken before its join holds goes back to waiting without a new version).
async fn wait_for_children(
    inner: &Inner,
    lease: &Lease,
    record: RunRecord,
    join: Join,
) -> Result<StepOutcome, RunnerError> {
    let waiting_for = children::waiting_for(join);
    if record.status == RunStatus::Waiting && record.waiting_for.as_ref() == Some(&waiting_for) {
        return Ok(StepOutcome::Waiting(record));
    }
    commit_wait(inner, lease, &record, waiting_for, None).await
}

/// Commit the run as waiting for `waiting_for` (a signal, or its children), in its state.
async fn commit_wait(
    inner: &Inner,
    lease: &Lease,
    record: &RunRecord,
    waiting_for: WaitingFor,
    wake_at: Option<Millis>,
) -> Result<StepOutcome, RunnerError> {
    let commit = StepCommit {
        expected_version: record.version,
        from_state: record.state_name.clone(),
        to_state: record.state_name.clone(),
        state: record.state.clone(),
        kind: TransitionKind::Status,
        status: RunStatus::Waiting,
        waiting_for: Some(waiting_for),
        wake_at,
        error: None,
        consumed_signal: None,
        spend: super::spend::to_commit(record.spend),
    };
    let record = inner.commit(lease, &commit, &record.id).await?;
    Ok(StepOutcome::Waiting(record))
}

/// When a run entering state `desc` now, in `state`, is woken without its signal: its
/// timer (`timer_ms` from now, or the time its `timer = field` holds), else its wait's
/// `wait_timeout_ms` from now. `None`: nothing but its signal wakes it (or, for a state
/// without a wait, it does not wait).
pub(super) fn due_at<A: Agent>(desc: &StateDescription, state: &A) -> Option<Millis> {
    let now = now_ms();
    let after = |ms: u64| now.saturating_add(Millis::try_from(ms).unwrap_or(Millis::MAX / 4));
    match &desc.timer {
        Some(TimerDescription::AfterMs(ms)) => Some(after(*ms)),
        Some(TimerDescription::Field(_)) => state.__timer_due().map(|due| due.at(now)),
        None => desc.wait.as_ref().and_then(|w| w.timeout_ms).map(after),
    }
}

/// The move a commit makes: into state `to`, stored as `value`.
struct Entering<'a> {
    to: &'a str,
    value: Value,
    /// The target's timer or wait timeout ([`due_at`]), from the typed state.
    due: Option<Millis>,
    kind: TransitionKind,
    error: Option<RunFailure>,
    consumed: Option<i64>,
}

/// Commit the move into state `to`, with the status its role gives, and the step's
/// journal entries not written yet.
async fn enter(
    inner: &Inner,
    lease: &Lease,
    record: &RunRecord,
    entering: Entering<'_>,
    entries: &[JournalEntry],
) -> Result<RunRecord, RunnerError> {
    let Entering {
        to,
        value,
        due,
        kind,
        error,
        consumed,
    } = entering;
    let target = inner
        .graph
        .state(to)
        .expect("edges of a checked graph name existing states");
    let (status, waiting_for, wake) = if target.compensate {
        (RunStatus::Compensating, None, None)
    } else if target.terminal {
        (RunStatus::Completed, None, None)
    } else if let Some(w) = &target.wait {
        (RunStatus::Waiting, Some(WaitingFor::signal(&w.signal)), due)
    } else if target.timer.is_some() && due.is_some() {
        // A timer alone: the run waits for it, holding no worker, even when it is already
        // due (the claim takes it at once), so that every run in a timer state waited.
        (RunStatus::Waiting, Some(WaitingFor::Timer), due)
    } else {
        (RunStatus::Running, None, None)
    };
    let commit = StepCommit {
        expected_version: record.version,
        from_state: record.state_name.clone(),
        to_state: to.to_owned(),
        state: value,
        kind,
        status,
        waiting_for,
        wake_at: wake,
        error,
        consumed_signal: consumed,
        spend: super::spend::to_commit(record.spend),
    };
    inner
        .commit_with_entries(lease, entries, &commit, &record.id)
        .await
}

/// A step failed: take the state's `on_budget` edge for a budget spent, else its `on_error`
/// edge, or fail the run (compensating first when its saga has completed hybrid calls).
pub(super) async fn fail<A: Agent>(
    inner: &Inner,
    lease: &Lease,
    record: &RunRecord,
    desc: &StateDescription,
    e: &StepError,
) -> Result<StepOutcome, RunnerError> {
    let error = RunFailure {
        code: e.code(),
        message: inner.redact_text(&e.to_string()),
    };
    tracing::warn!(
        run_id = %record.id,
        state = %desc.name,
        code = %error.code,
        error = %error.message,
        "step failed"
    );
    // A budget spent takes the state's `on_budget` edge where it has one, else `on_error`.
    let (edge, build): (_, fn(&str, Failure) -> Option<A>) = match (e, desc.on_budget.as_ref()) {
        (StepError::Budget(_), Some(target)) => (Some(target), A::__on_budget),
        _ => (desc.on_error.as_ref(), A::__on_error),
    };
    if let Some(target) = edge {
        let failure = Failure {
            state: desc.name.clone(),
            code: error.code.clone(),
            message: error.message.clone(),
        };
        // Built by the derive's mapping, and stored sealed where it holds a secret; one that
        // cannot be fails the run.
        let stored = build(&desc.name, failure).map(|state| {
            let mut value = serde_json::to_value(&state).map_err(|e| e.to_string())?;
            (inner.seal_state(&mut value, target)).map_err(|e| e.to_string())?;
            let due = inner.graph.state(target).and_then(|t| due_at(t, &state));
            Ok::<_, String>((value, due))
        });
        match stored {
            Some(Ok((value, due))) => {
                let record = enter(
                    inner,
                    lease,
                    record,
                    Entering {
                        to: target,
                        value,
                        due,
                        kind: TransitionKind::Error,
                        error: Some(error),
                        consumed: None,
                    },
                    &[],
                )
                .await?;
                return Ok(StepOutcome::after_commit(record));
            }
            Some(Err(e)) => {
                tracing::error!(target = %target, error = %e, "the state of the failure's edge cannot be stored; failing the run");
            }
            // Only an `Agent` written by hand lacks the derive's mapping.
            None => {
                tracing::error!(target = %target, "the agent builds no state for this edge; failing the run");
            }
        }
    }
    let has_saga = saga::has_completed_hybrids(inner.store.as_ref(), &record.id).await?;
    let status = if has_saga {
        RunStatus::Compensating
    } else {
        // A compensating run cancels them when its saga begins.
        let why = format!("its parent failed: {}", error.message);
        children::cancel_children(inner.store.as_ref(), inner.graph, record, &why).await?;
        RunStatus::Failed
    };
    let record = inner
        .commit_status(lease, record, status, Some(error))
        .await?;
    Ok(StepOutcome::after_commit(record))
}

/// The futures every run in flight holds: its step's while its handler waits for a tool,
/// and its commit's while the commit waits with the other runs' (issue 22, W4). Their
/// sizes are pinned so that growth is a decision, not an accident: a change that makes
/// one larger raises its bound here, in the same commit, saying why.
#[cfg(test)]
mod sizes {
    use std::sync::Arc;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::super::{Known, Runner, caches};
    use crate::store::memory::MemoryStore;
    use crate::store::{NewRun, RunStatus, RunStore, StepCommit, Store, TransitionKind};
    use crate::{Agent, Ctx, StepResult, ToolBox};

    #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
    #[agent(crate = ::agent_core)]
    enum Small {
        #[agent(initial, to(Done), on_error = Failed)]
        Start { n: u32 },
        #[agent(terminal)]
        Done { n: u32 },
        #[agent(terminal)]
        Failed { reason: String },
    }

    struct Handlers;

    impl SmallHandlers for Handlers {
        async fn start(
            &self,
            ctx: Ctx<'_, small::Start>,
            small::Start { n }: small::Start,
        ) -> StepResult<small::Start> {
            Ok(ctx.to(small::Done { n }))
        }
    }

    #[tokio::test]
    async fn the_step_and_commit_futures_keep_their_size() {
        let store = Arc::new(MemoryStore::new());
        let runner = Runner::<Small, Handlers>::new(
            Arc::clone(&store) as Arc<dyn Store>,
            Handlers,
            ToolBox::new(),
        )
        .unwrap();
        let state = Small::Start { n: 1 };
        store
            .create_run(NewRun::new(
                "r",
                Small::NAME,
                runner.inner.fingerprint.clone(),
                "Start",
                serde_json::to_value(&state).unwrap(),
            ))
            .await
            .unwrap();
        let crate::store::Claimed {
            mut lease, record, ..
        } = store
            .claim_run("r", "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let commit = StepCommit {
            expected_version: record.version,
            from_state: "Start".into(),
            to_state: "Done".into(),
            state: serde_json::json!({ "Done": { "n": 1 } }),
            kind: TransitionKind::Step,
            status: RunStatus::Completed,
            waiting_for: None,
            wake_at: None,
            error: None,
            consumed_signal: None,
            spend: None,
        };
        let commit_size = size_of_val(&runner.inner.commit_with_entries(&lease, &[], &commit, "r"));
        let cache = caches::unloaded_read_cache();
        let step = super::execute(
            &runner.inner,
            &Handlers,
            &mut lease,
            Box::new(record),
            state,
            Known::Nothing,
            &cache,
        );
        let step_size = size_of_val(&step);
        // Measured 1,720 B (step) and 256 B (commit) on 2026-12-06 with rustc 1.95, debug and
        // release alike; the step's was 2,272 B before it ended in one `StepEnd` (four
        // cells of `StepCx` became one, and the outcome is no longer kept as seven locals).
        // Budgets (issue 42) raised the step's to 1,848 B: the commit it awaits carries the
        // run's spend (an `Option<Spend>` of 48 B in the `StepCommit` the commit holds) and
        // the step's context the run it steps (its budget and spend), under 1% of a run in
        // flight's worker memory.
        // The bounds leave room for a field or two, not for a new path kept unboxed: raise
        // them only as a decision, in the commit that needs it.
        assert!(step_size <= 1_900, "the step's future is {step_size} bytes");
        assert!(
            commit_size <= 288,
            "the commit's future is {commit_size} bytes"
        );
    }
}
