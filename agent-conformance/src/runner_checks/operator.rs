//! An operator's cancel and terminate, against runs the runner drives.

use std::sync::Arc;

use super::{check_history, runner, runner_with};
use crate::fixture::{self, Behaviour, Order, World};
use agent_core::runner::{Crash, FaultHook, FaultPoint, Runner, RunnerError};
use agent_core::store::verify::verify_run;
use agent_core::store::{OperatorNote, RunRecord, RunStatus, Store, TransitionKind};

/// Reservations released once each, last first, nothing held; `Charge` applied `charges`
/// times; no effect twice.
fn compensated_once(world: &World, charges: usize) -> Result<(), String> {
    let w = world.state();
    let count = |tool: &str| w.applied.iter().filter(|(t, _)| t == tool).count();
    let mut last_first = w.reserved.clone();
    last_first.reverse();
    if count("Reserve") != 2
        || count("Charge") != charges
        || count("Release") != 2
        || !w.held.is_empty()
        || w.released != last_first
    {
        return Err(format!(
            "expected both reservations released once, last first, and {charges} charge: \
             applied {:?}, released {:?}, held {:?}",
            w.applied, w.released, w.held
        ));
    }
    Ok(())
}

/// The end of a cancelled run: `cancelled` with error `cancelled`, the history a chain of
/// declared edges ending `cancel` (with the operator's note) then the compensations' status
/// commit, verifying.
async fn ended_cancelled(
    store: &Arc<dyn Store>,
    record: &RunRecord,
    note: &OperatorNote,
) -> Result<Vec<agent_core::store::TransitionRecord>, String> {
    if record.status != RunStatus::Cancelled
        || record
            .error
            .as_ref()
            .is_none_or(|e| e.code != agent_core::store::FailureCode::Cancelled)
    {
        return Err(format!(
            "a cancelled run must end cancelled with error `cancelled`, got {} {:?}",
            record.status, record.error
        ));
    }
    check_history(store.as_ref(), record).await?;
    let history = store.history(&record.id).await.map_err(|e| e.to_string())?;
    let n = history.len();
    let tail: Vec<(TransitionKind, RunStatus)> = history[n.saturating_sub(2)..]
        .iter()
        .map(|t| (t.kind, t.status))
        .collect();
    if tail
        != [
            (TransitionKind::Cancel, RunStatus::Compensating),
            (TransitionKind::Status, RunStatus::Cancelled),
        ]
        || history[n - 2].note.as_ref() != Some(note)
    {
        return Err(format!(
            "history must end with the cancel (noted {note:?}) and its compensation: {tail:?}, \
             note {:?}",
            history[n - 2].note
        ));
    }
    let report = verify_run(store.as_ref(), record)
        .await
        .map_err(|e| e.to_string())?;
    if !report.ok {
        return Err(format!("the chain does not verify: {:?}", report.problem));
    }
    Ok(history)
}

/// A run waiting for a signal is cancelled by an operator: a worker runs its saga's
/// compensations exactly once (the charge, a write, stays), it ends `cancelled`, and running
/// it again changes nothing.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_compensates_a_waiting_run_once(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    r.start("cancel-waiting", fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    let waiting = r.run("cancel-waiting").await.map_err(|e| e.to_string())?;
    if waiting.status != RunStatus::Waiting {
        return Err(format!("expected a waiting run, got {}", waiting.status));
    }
    let note = OperatorNote::new("ops", "customer called");
    let cancelled = store
        .cancel_run("cancel-waiting", &note)
        .await
        .map_err(|e| e.to_string())?;
    if cancelled.status != RunStatus::Compensating {
        return Err(format!("cancel gave {}", cancelled.status));
    }
    let record = r.run("cancel-waiting").await.map_err(|e| e.to_string())?;
    ended_cancelled(&store, &record, &note).await?;
    compensated_once(&world, 1)?;
    let again = r.run("cancel-waiting").await.map_err(|e| e.to_string())?;
    let repeated = store
        .cancel_run("cancel-waiting", &note)
        .await
        .map_err(|e| e.to_string())?;
    if again.version != record.version || repeated.version != record.version {
        return Err("a cancelled run must not move again".into());
    }
    compensated_once(&world, 1)
}

/// Cancels (or terminates) the run at the commit of one version, from inside the runner's
/// commit (the fault point just before the commit is sent): the operator's action lands
/// while the runner holds the lease, always at the same place.
#[derive(Debug)]
struct OperatorAtCommit {
    store: Arc<dyn Store>,
    run_id: String,
    version: u64,
    note: OperatorNote,
    terminate: bool,
    answer: std::sync::Mutex<Option<Result<RunRecord, String>>>,
}

impl OperatorAtCommit {
    /// A fixture run `run_id`, started, with the hook acting when it commits out of `Pay`
    /// (version 2: its step charges, then commits into `Confirm`); the runner and the hook.
    async fn start(
        store: &Arc<dyn Store>,
        world: &Arc<World>,
        run_id: &str,
        note: &OperatorNote,
        terminate: bool,
    ) -> Result<(Runner<Order, Behaviour>, Arc<Self>), String> {
        let hook = Arc::new(Self {
            store: Arc::clone(store),
            run_id: run_id.to_owned(),
            version: 2,
            note: note.clone(),
            terminate,
            answer: std::sync::Mutex::default(),
        });
        let r = runner_with(
            store,
            world,
            "Pay",
            "w",
            Arc::clone(&hook) as Arc<dyn FaultHook>,
        )?;
        r.start(run_id, fixture::initial(&["a", "bb"]))
            .await
            .map_err(|e| e.to_string())?;
        Ok((r, hook))
    }
}

impl FaultHook for OperatorAtCommit {
    fn check(&self, point: FaultPoint, run_id: &str, version: u64) -> Result<(), Crash> {
        let mut answer = self
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if point == FaultPoint::CommitSent
            && run_id == self.run_id
            && version == self.version
            && answer.is_none()
        {
            // The hook is synchronous; the runner's task waits here for the cancel, as it
            // would wait for a slow commit.
            let done = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    if self.terminate {
                        self.store.terminate_run(run_id, &self.note).await
                    } else {
                        self.store.cancel_run(run_id, &self.note).await
                    }
                })
            });
            *answer = Some(done.map_err(|e| e.to_string()));
        }
        Ok(())
    }
}

/// An operator cancels a run while a worker runs its step: the step's commit is refused,
/// the worker writes the cancel in its place under its lease (the step's state change is
/// not applied) and compensates, once; the run ends `cancelled`.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_during_a_step_takes_its_place(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let note = OperatorNote::new("ops", "fraud suspected");
    let (r, hook) = OperatorAtCommit::start(&store, &world, "cancel-in-step", &note, false).await?;
    let record = r.run("cancel-in-step").await.map_err(|e| e.to_string())?;
    let answer = hook
        .answer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .ok_or("the run never committed from version 2")??;
    if answer.cancel_requested.as_ref() != Some(&note) || answer.version != 2 {
        return Err(format!(
            "a cancel during the step must be recorded as a request, got v{} {:?}",
            answer.version, answer.cancel_requested
        ));
    }
    let history = ended_cancelled(&store, &record, &note).await?;
    let states: Vec<&str> = history.iter().map(|t| t.to_state.as_str()).collect();
    if states != ["Start", "Decide", "Pay", "Pay", "Pay"] {
        return Err(format!(
            "the cancel must take the place of the step out of `Pay`: {states:?}"
        ));
    }
    if history[3].epoch != history[2].epoch {
        return Err("the worker holding the lease must write the cancel".into());
    }
    compensated_once(&world, 1)?;
    let again = r.run("cancel-in-step").await.map_err(|e| e.to_string())?;
    if again.version != record.version {
        return Err("a cancelled run must not move again".into());
    }
    compensated_once(&world, 1)
}

/// An operator cancels runs while the runner drives them, at a different point each time
/// (before the claim, during a step, at the wait, after the lease is released): every run
/// ends `cancelled` with its reservations released exactly once, one `cancel` in a history
/// of declared edges, and a verifying chain.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_racing_the_runner(store: Arc<dyn Store>) -> Result<(), String> {
    let note = OperatorNote::new("ops", "race");
    for round in 0..12_u32 {
        let world = Arc::new(World::default());
        let r = Arc::new(runner(&store, &world, "Pay", "w")?);
        let id = format!("cancel-race-{round}");
        r.start(&id, fixture::initial(&["a", "bb"]))
            .await
            .map_err(|e| e.to_string())?;
        let driver = {
            let r = Arc::clone(&r);
            let id = id.clone();
            tokio::spawn(async move { r.run(&id).await })
        };
        for _ in 0..round * 3 {
            tokio::task::yield_now().await;
        }
        store
            .cancel_run(&id, &note)
            .await
            .map_err(|e| e.to_string())?;
        match driver
            .await
            .map_err(|e| format!("the runner panicked: {e}"))?
        {
            Ok(_) | Err(RunnerError::LeaseLost(_)) => {}
            Err(e) => return Err(format!("round {round}: {e}")),
        }
        // Whatever the first drive saw, driving the run again finishes the cancel.
        let record = r.run(&id).await.map_err(|e| e.to_string())?;
        let history = ended_cancelled(&store, &record, &note).await?;
        let cancels = history
            .iter()
            .filter(|t| t.kind == TransitionKind::Cancel)
            .count();
        if cancels != 1 {
            return Err(format!("round {round}: {cancels} cancel transitions"));
        }
        let w = world.state();
        let reserved = w.reserved.len();
        let mut last_first = w.reserved.clone();
        last_first.reverse();
        if !w.held.is_empty() || w.released != last_first {
            return Err(format!(
                "round {round}: {reserved} reserved, released {:?}, held {:?}",
                w.released, w.held
            ));
        }
    }
    Ok(())
}

/// An operator terminates a run while a worker runs its step: the worker's commit is
/// refused (`LeaseLost`: the terminate took a new epoch) and it stops; nothing is
/// compensated; the history ends with the `terminate`.
///
/// # Errors
/// What went wrong.
pub async fn check_terminate_during_a_step_fences_the_worker(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let note = OperatorNote::new("ops", "runaway order");
    let (r, _hook) =
        OperatorAtCommit::start(&store, &world, "terminate-in-step", &note, true).await?;
    match r.run("terminate-in-step").await {
        Err(RunnerError::LeaseLost(_)) => {}
        other => {
            return Err(format!(
                "a worker whose run is terminated mid-step must stop with LeaseLost, got \
                 {other:?}"
            ));
        }
    }
    let record = store
        .load_run("terminate-in-step")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run vanished")?;
    if record.status != RunStatus::Terminated || record.version != 3 {
        return Err(format!(
            "expected terminated at v3, got {} v{}",
            record.status, record.version
        ));
    }
    check_history(store.as_ref(), &record).await?;
    let history = store
        .history("terminate-in-step")
        .await
        .map_err(|e| e.to_string())?;
    let last = history.last().ok_or("no history")?;
    if last.kind != TransitionKind::Terminate || last.note.as_ref() != Some(&note) {
        return Err(format!("history must end with the terminate: {last:?}"));
    }
    let w = world.state();
    if !w.released.is_empty() || w.held.len() != 2 {
        return Err(format!(
            "terminate must not compensate: released {:?}, held {:?}",
            w.released, w.held
        ));
    }
    let report = verify_run(store.as_ref(), &record)
        .await
        .map_err(|e| e.to_string())?;
    if !report.ok {
        return Err(format!("the chain does not verify: {:?}", report.problem));
    }
    Ok(())
}

/// A worker running a run that an operator terminates is fenced out and stops; nothing
/// is compensated; the run stays `terminated`.
///
/// # Errors
/// What went wrong.
pub async fn check_terminate_stops_without_compensating(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    r.start("terminated", fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    let waiting = r.run("terminated").await.map_err(|e| e.to_string())?;
    if waiting.status != RunStatus::Waiting {
        return Err(format!("expected a waiting run, got {}", waiting.status));
    }
    let note = OperatorNote::new("ops", "test order");
    let t = store
        .terminate_run("terminated", &note)
        .await
        .map_err(|e| e.to_string())?;
    let after = r.run("terminated").await.map_err(|e| e.to_string())?;
    if t.status != RunStatus::Terminated || after.version != t.version {
        return Err(format!(
            "a terminated run must stay terminated: {} v{} then v{}",
            t.status, t.version, after.version
        ));
    }
    check_history(store.as_ref(), &after).await?;
    let w = world.state();
    if w.released.len() + w.held.len() != 2 || !w.released.is_empty() {
        return Err(format!(
            "terminate must not compensate: released {:?}",
            w.released
        ));
    }
    Ok(())
}
