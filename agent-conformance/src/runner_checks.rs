//! Runner-level invariants, checked on a real store: the [`fixture`] agent
//! runs through the runner, with crashes injected at every fault point.
//!
//! [`runner_conformance!`](crate::runner_conformance) expands to one test per check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::fixture::{self, Behaviour, Order, World};
use agent_core::Agent;
use agent_core::runner::{
    Crash, CrashAt, FaultHook, FaultPoint, NoFaults, Runner, RunnerConfig, RunnerError,
    SUSPECT_CLAIMS, Worker, WorkerConfig,
};
use agent_core::store::WaitingFor;
use agent_core::store::verify::verify_run;
use agent_core::store::{
    CallStatus, Claimed, EntryKind, NewRun, OperatorNote, RunRecord, RunStatus, Store,
    TransitionKind,
};
use agent_core::tool::ToolKind;

pub use super::version_checks::{
    check_compensating_v1_run_is_compensated_by_v2, check_older_runner_leaves_newer_runs_alone,
    check_v1_run_interrupted_mid_step_finishes_on_v2,
};

pub use super::child_checks::{
    check_cancelled_parent_cancels_its_children, check_children_budget, check_children_join_all,
    check_children_join_first_cancels_the_rest, check_crash_sweep_children,
    check_failed_child_reaches_the_parent,
};

const LEASE: Duration = Duration::from_millis(150);

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: LEASE,
        ..RunnerConfig::default()
    }
}

fn runner(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
    worker: &str,
) -> Result<Runner<Order, Behaviour>, String> {
    runner_with(store, world, choice, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Result<Runner<Order, Behaviour>, String> {
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(world))
        .router(Arc::new(fixture::router(choice)))
        .config(config(worker))
        .faults(faults)
        .build()
        .map_err(|e| e.to_string())
}

/// How a fixture run should end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// Reserve, route to Pay, charge (timing out once), confirm, done.
    Paid,
    /// The card is declined: `on_error` into `Failed`, reservations released.
    Declined,
    /// The router cancels: reservations released.
    Cancelled,
}

impl Scenario {
    fn choice(self) -> &'static str {
        if self == Self::Cancelled {
            "Cancelled"
        } else {
            "Pay"
        }
    }

    fn world(self) -> Arc<World> {
        let world = Arc::new(World::default());
        world.configure(|w| match self {
            Self::Paid => w.charge_timeouts = 1,
            Self::Declined => w.fail_charges = true,
            Self::Cancelled => {}
        });
        world
    }

    fn final_status(self) -> RunStatus {
        if self == Self::Paid {
            RunStatus::Completed
        } else {
            RunStatus::Compensated
        }
    }
}

/// Versions form one chain `0..=n`, every move is a declared edge, every journaled tool
/// call was legal in its state.
async fn check_history(store: &dyn Store, record: &RunRecord) -> Result<(), String> {
    let graph = Order::graph();
    let history = store.history(&record.id).await.map_err(|e| e.to_string())?;
    let versions: Vec<u64> = history.iter().map(|t| t.version).collect();
    let expected: Vec<u64> = (0..=record.version).collect();
    if versions != expected {
        return Err(format!(
            "versions {versions:?}, expected one chain {expected:?}"
        ));
    }
    for t in &history {
        let legal = match t.kind {
            TransitionKind::Start => t.version == 0,
            TransitionKind::Status
            | TransitionKind::Cancel
            | TransitionKind::Terminate
            | TransitionKind::SignalDropped => t.from_state == t.to_state,
            TransitionKind::Step | TransitionKind::Error => {
                graph.has_edge(&t.from_state, &t.to_state)
            }
            // An operator's reset goes back to a state the run was in, not along an edge.
            TransitionKind::Repair => graph.state(&t.to_state).is_some(),
            // A migration maps a state of an older version to one of this version's: it
            // names who wrote it, and leads to a state the graph has.
            TransitionKind::Migrated => {
                t.note.as_ref().is_some_and(|n| n.by == "migration")
                    && graph.state(&t.to_state).is_some()
            }
        };
        if !legal {
            return Err(format!(
                "v{} {:?} `{}` -> `{}` is not a declared edge",
                t.version, t.kind, t.from_state, t.to_state
            ));
        }
    }
    let journal = store
        .journal(&record.id, None)
        .await
        .map_err(|e| e.to_string())?;
    for e in journal.iter().filter(|e| e.kind == EntryKind::Tool) {
        if !graph.allows_tool(&e.state, &e.name) {
            return Err(format!(
                "tool `{}` journaled in state `{}` where it is not allowed",
                e.name, e.state
            ));
        }
    }
    Ok(())
}

/// Effects: each key applied once; what was applied matches the scenario; compensations
/// released exactly the reservations, last first.
fn check_world(world: &World, scenario: Scenario) -> Result<(), String> {
    let w = world.state();
    let mut seen = BTreeSet::new();
    for (tool, key) in &w.applied {
        if !seen.insert(key) {
            return Err(format!("effect `{tool}` with key {key} applied twice"));
        }
    }
    let count = |tool: &str| w.applied.iter().filter(|(t, _)| t == tool).count();
    let (charges, releases) = match scenario {
        Scenario::Paid => (1, 0),
        Scenario::Declined | Scenario::Cancelled => (0, 2),
    };
    if count("Reserve") != 2 || count("Charge") != charges || count("Release") != releases {
        return Err(format!("{scenario:?}: applied {:?}", w.applied));
    }
    if releases > 0 {
        if !w.held.is_empty() {
            return Err(format!(
                "reservations still held after compensation: {:?}",
                w.held
            ));
        }
        let mut last_first = w.reserved.clone();
        last_first.reverse();
        if w.released != last_first {
            return Err(format!(
                "released {:?}; expected the reservations {:?} last first",
                w.released, w.reserved
            ));
        }
    }
    Ok(())
}

async fn start(runner: &Runner<Order, Behaviour>, run_id: &str) -> Result<(), String> {
    runner
        .start(run_id, fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    // Sent before the run reaches its wait: it must be kept.
    runner
        .signal(run_id, "confirm", json!({ "ok": true }))
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Every scenario completes with every effect applied exactly once and a clean history.
///
/// # Errors
/// What went wrong.
pub async fn check_runs_complete_with_effects_once(store: Arc<dyn Store>) -> Result<(), String> {
    for scenario in [Scenario::Paid, Scenario::Declined, Scenario::Cancelled] {
        let world = scenario.world();
        let r = runner(&store, &world, scenario.choice(), "w1")?;
        let run_id = format!("plain-{scenario:?}");
        start(&r, &run_id).await?;
        let record = r.run(&run_id).await.map_err(|e| e.to_string())?;
        if record.status != scenario.final_status() {
            return Err(format!(
                "{scenario:?}: status {} ({:?})",
                record.status, record.error
            ));
        }
        check_world(&world, scenario)?;
        check_history(store.as_ref(), &record).await?;
    }
    Ok(())
}

/// Crash at every fault point, at its 1st, 2nd and 3rd hit, in every scenario; resume with
/// a fresh runner on another worker. Every run completes; every effect applied once; the
/// LLM is asked again only when the crash fell between its answer and the journal;
/// versions form one chain; compensations ran once each, in reverse order.
///
/// # Errors
/// What went wrong, naming the fault point.
pub async fn check_crash_sweep(store: Arc<dyn Store>) -> Result<(), String> {
    let mut fired = BTreeMap::new();
    for scenario in [Scenario::Paid, Scenario::Declined, Scenario::Cancelled] {
        for point in FaultPoint::ALL {
            for nth in 0..3 {
                let world = scenario.world();
                let router = Arc::new(fixture::router(scenario.choice()));
                let hook = Arc::new(CrashAt::new(point, nth));
                let run_id = format!("sweep-{scenario:?}-{point}-{nth}");
                let crashy = Runner::<Order, Behaviour>::builder(
                    Arc::clone(&store),
                    Behaviour,
                    fixture::tools(&world),
                )
                .router(router.clone())
                .config(config("crashy"))
                .faults(hook.clone())
                .build()
                .map_err(|e| e.to_string())?;
                start(&crashy, &run_id).await?;
                let first = crashy.run(&run_id).await;
                let record = match first {
                    Ok(record) if !hook.fired() => record,
                    Err(RunnerError::Crashed(_)) if hook.fired() => {
                        *fired.entry(point).or_insert(0) += 1;
                        // The crashed worker's lease must expire before another takes over.
                        tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
                        let healthy = Runner::<Order, Behaviour>::builder(
                            Arc::clone(&store),
                            Behaviour,
                            fixture::tools(&world),
                        )
                        .router(router.clone())
                        .config(config("healthy"))
                        .build()
                        .map_err(|e| e.to_string())?;
                        healthy
                            .run(&run_id)
                            .await
                            .map_err(|e| format!("{run_id}: resume failed: {e}"))?
                    }
                    other => {
                        return Err(format!(
                            "{run_id}: unexpected first outcome {other:?} (fired: {})",
                            hook.fired()
                        ));
                    }
                };
                let ctx = |e: String| format!("{run_id}: {e}");
                if record.status != scenario.final_status() {
                    return Err(ctx(format!(
                        "status {} ({:?})",
                        record.status, record.error
                    )));
                }
                check_world(&world, scenario).map_err(ctx)?;
                check_history(store.as_ref(), &record).await.map_err(ctx)?;
                let reasked = u64::from(hook.fired() && point == FaultPoint::LlmAnswered);
                if router.calls() != 2 + reasked {
                    return Err(ctx(format!(
                        "router asked {} times, expected {}",
                        router.calls(),
                        2 + reasked
                    )));
                }
            }
        }
    }
    // Fault points that a step always passes must have fired (the sweep tested something).
    for point in [
        FaultPoint::RunClaimed,
        FaultPoint::LlmSent,
        FaultPoint::LlmAnswered,
        FaultPoint::ToolSent,
        FaultPoint::ToolAnswered,
        FaultPoint::CommitSent,
        FaultPoint::CommitApplied,
        FaultPoint::CompensationRegistered,
        FaultPoint::CompensationSent,
    ] {
        if fired.get(&point).copied().unwrap_or(0) == 0 {
            return Err(format!("fault point {point} never fired"));
        }
    }
    Ok(())
}

/// The crash sweep over a step of parallel calls ([`fixture::Fanout`]: three reservations
/// made at once with `Ctx::call_each`), with and without one of them failing: crash at every
/// fault point a parallel step passes, at its 1st to 4th hit, and resume on another worker.
/// Every reservation is applied once, by its key; a failed one sends the run to its
/// compensating state, where the completed ones are released once each, last index first,
/// whatever order the calls finished in.
///
/// # Errors
/// What went wrong, naming the fault point.
pub async fn check_crash_sweep_parallel_calls(store: Arc<dyn Store>) -> Result<(), String> {
    use fixture::{Fanout, FanoutBehaviour};
    let items = ["a", "bb", "ccc"];
    let fanout = |world: &Arc<World>, worker: &str, faults: Arc<dyn FaultHook>| {
        Runner::<Fanout, FanoutBehaviour>::builder(
            Arc::clone(&store),
            FanoutBehaviour,
            fixture::tools(world),
        )
        .config(config(worker))
        .faults(faults)
        .build()
        .map_err(|e| e.to_string())
    };
    let mut fired = BTreeMap::new();
    for failing in [None, Some("bb")] {
        for point in [
            FaultPoint::RunClaimed,
            FaultPoint::ToolSent,
            FaultPoint::ToolAnswered,
            FaultPoint::CommitSent,
            FaultPoint::CommitApplied,
            FaultPoint::CompensationRegistered,
            FaultPoint::CompensationSent,
        ] {
            for nth in 0..4 {
                let world = Arc::new(World::default());
                world.configure(|w| w.fail_reserve_of = failing.map(str::to_owned));
                let hook = Arc::new(CrashAt::new(point, nth));
                let run_id = format!("parallel-{failing:?}-{point}-{nth}");
                let ctx = |e: String| format!("{run_id}: {e}");
                let crashy = fanout(&world, "crashy", hook.clone())?;
                let initial = Fanout::Reserving {
                    items: items.iter().map(|s| (*s).to_owned()).collect(),
                };
                crashy
                    .start(&run_id, initial)
                    .await
                    .map_err(|e| ctx(e.to_string()))?;
                let record = match crashy.run(&run_id).await {
                    Ok(record) if !hook.fired() => record,
                    Err(RunnerError::Crashed(_)) if hook.fired() => {
                        *fired.entry(point).or_insert(0) += 1;
                        tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
                        fanout(&world, "healthy", Arc::new(NoFaults))?
                            .run(&run_id)
                            .await
                            .map_err(|e| ctx(format!("resume failed: {e}")))?
                    }
                    other => {
                        return Err(ctx(format!(
                            "unexpected first outcome {other:?} (fired: {})",
                            hook.fired()
                        )));
                    }
                };
                let w = world.state();
                let mut keys = BTreeSet::new();
                for (tool, key) in &w.applied {
                    if !keys.insert(key) {
                        return Err(ctx(format!("effect `{tool}` with key {key} applied twice")));
                    }
                }
                let sku_of = |r: &String| r.split('-').nth(1).unwrap_or_default().to_owned();
                let mut reserved: Vec<String> = w.reserved.iter().map(sku_of).collect();
                reserved.sort_unstable();
                let released: Vec<String> = w.released.iter().map(sku_of).collect();
                let (status, want_reserved, want_released) = match failing {
                    None => (RunStatus::Completed, vec!["a", "bb", "ccc"], vec![]),
                    Some(_) => (RunStatus::Compensated, vec!["a", "ccc"], vec!["ccc", "a"]),
                };
                if record.status != status || reserved != want_reserved || released != want_released
                {
                    return Err(ctx(format!(
                        "status {} ({:?}); reserved {reserved:?}, released {released:?}; \
                         expected {status}, reserved {want_reserved:?}, released {want_released:?}",
                        record.status, record.error
                    )));
                }
                if failing.is_some() && !w.held.is_empty() {
                    return Err(ctx(format!("reservations still held: {:?}", w.held)));
                }
                let report = verify_run(store.as_ref(), &record)
                    .await
                    .map_err(|e| ctx(e.to_string()))?;
                if !report.ok {
                    return Err(ctx(format!("the hash chain does not verify: {report:?}")));
                }
            }
        }
    }
    // Each of the three calls passes its points in both scenarios (the failing one too: it
    // is journaled before it is sent); the two compensations pass theirs once.
    for (point, at_least) in [
        (FaultPoint::ToolSent, 6),
        (FaultPoint::ToolAnswered, 6),
        (FaultPoint::CompensationRegistered, 2),
        (FaultPoint::CompensationSent, 2),
    ] {
        if fired.get(&point).copied().unwrap_or(0) < at_least {
            return Err(format!(
                "fault point {point} fired fewer than {at_least} times: {fired:?}"
            ));
        }
    }
    Ok(())
}

/// A worker whose lease was taken over is fenced: its journal writes and its commit are
/// rejected, and it executes no write.
///
/// # Errors
/// What went wrong.
pub async fn check_stale_worker_is_fenced(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Scenario::Paid.world();
    let zombie = runner(&store, &world, "Pay", "zombie")?;
    let healthy = runner(&store, &world, "Pay", "healthy")?;
    start(&zombie, "fenced").await?;
    let Claimed {
        mut lease, record, ..
    } = store
        .claim_run("fenced", "zombie", Duration::from_millis(1))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("could not claim")?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let done = healthy.run("fenced").await.map_err(|e| e.to_string())?;
    if done.status != RunStatus::Completed {
        return Err(format!("healthy worker ended in {}", done.status));
    }
    let before = world.state().executions;
    match zombie.step(&mut lease, record).await {
        Err(RunnerError::LeaseLost(_)) => {}
        other => return Err(format!("stale worker was not stopped: {other:?}")),
    }
    if world.state().executions != before {
        return Err("the stale worker executed a write".into());
    }
    check_world(&world, Scenario::Paid)?;
    check_history(store.as_ref(), &done).await
}

/// A run whose state no longer deserializes, or whose state left the graph, is quarantined
/// before any tool call; a healthy run next to it completes.
///
/// # Errors
/// What went wrong.
pub async fn check_quarantine(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Scenario::Paid.world();
    let r = runner(&store, &world, "Pay", "w")?;
    store
        .register_agent(Order::graph())
        .await
        .map_err(|e| e.to_string())?;
    let fingerprint = Order::graph().fingerprint();
    for (id, state_name, state, fp, code) in [
        (
            "bad-json",
            "Start",
            json!({ "Start": { "items": 5 } }),
            fingerprint.clone(),
            "state.corrupt",
        ),
        (
            "gone-state",
            "Gone",
            json!({ "Gone": {} }),
            "0ld".to_owned(),
            "graph.incompatible",
        ),
        (
            "name-mismatch",
            "Pay",
            json!({ "Start": { "items": [] } }),
            fingerprint.clone(),
            "state.corrupt",
        ),
    ] {
        store
            .create_run(NewRun::new(id, Order::NAME, fp, state_name, state))
            .await
            .map_err(|e| e.to_string())?;
        let record = r.run(id).await.map_err(|e| e.to_string())?;
        let got = record.error.as_ref().map(|e| e.code.as_str());
        if record.status != RunStatus::Quarantined || got != Some(code) {
            return Err(format!(
                "{id}: {} {:?}, expected quarantined with {code}",
                record.status, record.error
            ));
        }
    }
    if !world.state().applied.is_empty() || world.state().reads != 0 {
        return Err("a tool ran for a quarantined run".into());
    }
    start(&r, "healthy").await?;
    let record = r.run("healthy").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("healthy run ended {}", record.status));
    }
    Ok(())
}

/// A waiting run lives in the store: a new runner delivers the signal and finishes it.
///
/// # Errors
/// What went wrong.
pub async fn check_wait_survives_restart(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let first = runner(&store, &world, "Pay", "before-restart")?;
    first
        .start("waits", fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    let record = first.run("waits").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Waiting
        || record.waiting_for != Some(WaitingFor::signal("confirm"))
    {
        return Err(format!(
            "expected waiting for `confirm`, got {} {:?}",
            record.status, record.waiting_for
        ));
    }
    // Looking at a waiting run again and again is not a crash loop.
    for _ in 0..2 * RunnerConfig::default().max_claims_without_progress {
        let again = first.run("waits").await.map_err(|e| e.to_string())?;
        if again.status != RunStatus::Waiting {
            return Err(format!(
                "a waiting run polled repeatedly became {}",
                again.status
            ));
        }
    }
    drop(first);
    let second = runner(&store, &world, "Pay", "after-restart")?;
    second
        .signal("waits", "confirm", json!({"ok": true}))
        .await
        .map_err(|e| e.to_string())?;
    let record = second.run("waits").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {} after the signal", record.status));
    }
    if !store
        .pending_signals("waits")
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return Err("the signal was not consumed".into());
    }
    check_history(store.as_ref(), &record).await
}

/// A disabled tool fails fast with `tool.disabled`, and the run takes its error path.
///
/// # Errors
/// What went wrong.
pub async fn check_kill_switch(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    store
        .set_tool_enabled("Charge", false, Some("incident 42"))
        .await
        .map_err(|e| e.to_string())?;
    start(&r, "killed").await?;
    let record = r.run("killed").await.map_err(|e| e.to_string())?;
    store
        .set_tool_enabled("Charge", true, None)
        .await
        .map_err(|e| e.to_string())?;
    if record.status != RunStatus::Compensated || record.state_name != "Failed" {
        return Err(format!(
            "expected Failed/compensated, got {}/{}",
            record.state_name, record.status
        ));
    }
    let journal = store
        .journal("killed", None)
        .await
        .map_err(|e| e.to_string())?;
    let disabled = journal.iter().any(|e| {
        e.name == "Charge"
            && e.status == CallStatus::Failed
            && e.error_code.as_deref() == Some("tool.disabled")
    });
    if !disabled {
        return Err("no `tool.disabled` failure journaled for Charge".into());
    }
    if world.state().applied.iter().any(|(t, _)| t == "Charge") {
        return Err("the disabled tool ran".into());
    }
    Ok(())
}

/// A router that names tools not legal in its state is rejected every time, nothing runs,
/// each rejection is journaled, and after the bounded re-asks the run fails and compensates.
///
/// # Errors
/// What went wrong.
pub async fn check_illegal_router_answers(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let hostile = Arc::new(agent_core::router::ScriptedRouter::from_fn(|_| {
        agent_core::router::ScriptedRouter::choose("Charge", r#"{"cents": 1000000}"#)
    }));
    let r =
        Runner::<Order, Behaviour>::builder(Arc::clone(&store), Behaviour, fixture::tools(&world))
            .router(hostile.clone())
            .config(config("w"))
            .build()
            .map_err(|e| e.to_string())?;
    start(&r, "hostile").await?;
    let record = r.run("hostile").await.map_err(|e| e.to_string())?;
    if world.state().applied.iter().any(|(t, _)| t == "Charge") {
        return Err("a forbidden tool ran".into());
    }
    let journal = store
        .journal("hostile", None)
        .await
        .map_err(|e| e.to_string())?;
    let rejections = journal
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Decision
                && e.error_code.as_deref() == Some("decision.unknown_option")
        })
        .count();
    let expected = usize::try_from(r.config().max_reasks + 1).unwrap_or(usize::MAX);
    if rejections != expected || hostile.calls() != expected as u64 {
        return Err(format!(
            "{rejections} rejections journaled, {} asks; expected {expected}",
            hostile.calls()
        ));
    }
    if record.status != RunStatus::Compensated
        || record.error.as_ref().map(|e| e.code.as_str()) != Some("routing")
    {
        return Err(format!(
            "expected compensated with `routing`, got {} {:?}",
            record.status, record.error
        ));
    }
    check_world(&world, Scenario::Cancelled)
}

/// A read repeated with the same input within a run is served from the journal.
///
/// # Errors
/// What went wrong.
pub async fn check_read_cache(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    r.start("cached", fixture::initial(&["same", "same"]))
        .await
        .map_err(|e| e.to_string())?;
    r.signal("cached", "confirm", json!({"ok": true}))
        .await
        .map_err(|e| e.to_string())?;
    let record = r.run("cached").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {}", record.status));
    }
    // `same` twice in Start, `router-check` once in Decide.
    let reads = world.state().reads;
    if reads != 2 {
        return Err(format!(
            "{reads} read executions, expected 2 (one served from the journal)"
        ));
    }
    let journal = store
        .journal("cached", None)
        .await
        .map_err(|e| e.to_string())?;
    let lookups = journal
        .iter()
        .filter(|e| e.name == "Lookup" && e.tool_kind == Some(ToolKind::Read))
        .count();
    if lookups != 3 {
        return Err(format!("{lookups} Lookup entries journaled, expected 3"));
    }
    Ok(())
}

/// Fields configured for redaction never reach the journal or the router, while input
/// hashes still identify the real input.
///
/// # Errors
/// What went wrong.
pub async fn check_redaction(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen_by_router = Arc::clone(&seen);
    let router = agent_core::router::ScriptedRouter::from_fn(move |req| {
        if let Ok(mut s) = seen_by_router.lock() {
            s.push(serde_json::to_string(req).unwrap_or_default());
        }
        if req.tool_results.iter().any(|r| r.tool == "Lookup") {
            agent_core::router::ScriptedRouter::choose("Pay", "{}")
        } else {
            agent_core::router::ScriptedRouter::choose("Lookup", r#"{"sku":"router-check"}"#)
        }
    });
    let r =
        Runner::<Order, Behaviour>::builder(Arc::clone(&store), Behaviour, fixture::tools(&world))
            .router(Arc::new(router))
            .config(RunnerConfig {
                redact_fields: vec![
                    "cents".into(),
                    "reservation".into(),
                    "reservations".into(),
                    "sku".into(),
                ],
                seal_keys: agent_core::secrets::SealKeys::generate("conformance"),
                ..config("w")
            })
            .build()
            .map_err(|e| e.to_string())?;
    start(&r, "redacted").await?;
    let record = r.run("redacted").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {}", record.status));
    }
    let journal = store
        .journal("redacted", None)
        .await
        .map_err(|e| e.to_string())?;
    let charge = journal
        .iter()
        .find(|e| e.name == "Charge")
        .ok_or("no Charge entry")?;
    // Stored sealed, and opening to exactly what ran.
    let sealed = charge
        .input
        .get("cents")
        .and_then(agent_core::secrets::sealed_text);
    let opened = sealed.map(|s| r.config().seal_keys.open(s));
    if !matches!(opened, Some(Ok(ref v)) if *v == json!(200)) {
        return Err(format!("journaled Charge input {}", charge.input));
    }
    if charge.input_hash != agent_core::store::input_hash(&json!({ "cents": 200 })) {
        return Err("the input hash does not identify the real input".into());
    }
    let text = serde_json::to_string(&journal).map_err(|e| e.to_string())?;
    for secret in ["\"bb\"", "res-"] {
        if text.contains(secret) {
            return Err(format!("`{secret}` reached the journal"));
        }
    }
    let asked = seen.lock().map(|s| s.join("\n")).unwrap_or_default();
    if asked.is_empty() || asked.contains("res-") || asked.contains("router-check") {
        return Err(format!("a redacted value reached the router: {asked}"));
    }
    Ok(())
}

/// Every fault point passed, in order: what ran when, across the runs of a worker. Each
/// tool call holds its thread for a while, so that runs in flight overlap in time.
#[derive(Debug, Default)]
struct Timeline {
    events: std::sync::Mutex<Vec<(FaultPoint, String)>>,
}

impl FaultHook for Timeline {
    fn check(&self, point: FaultPoint, run_id: &str, _: u64) -> Result<(), Crash> {
        if let Ok(mut events) = self.events.lock() {
            events.push((point, run_id.to_owned()));
        }
        if point == FaultPoint::ToolSent {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// A worker runs a suspect (a run with `SUSPECT_CLAIMS` lost claims without a commit) alone: no
/// other run does anything between its claim and its last commit. The runs claimed with it
/// wait uncounted, and every run (the suspect is healthy after all) completes with its
/// count reset.
///
/// # Errors
/// What went wrong.
pub async fn check_worker_runs_suspects_alone(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let timeline = Arc::new(Timeline::default());
    let r = runner_with(&store, &world, "Pay", "suspicious", timeline.clone())?;
    // Older runs first: the suspect is claimed while some of them are in flight.
    let healthy: Vec<String> = (0..6).map(|i| format!("healthy-{i}")).collect();
    for id in &healthy {
        start(&r, id).await?;
    }
    start(&r, "suspect").await?;
    // Workers claimed it and vanished without a commit.
    for n in 0..SUSPECT_CLAIMS {
        store
            .claim_run(
                "suspect",
                &format!("vanished-{n}"),
                Duration::from_millis(1),
            )
            .await
            .map_err(|e| e.to_string())?
            .ok_or("could not claim the run with an expired lease")?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let worker = Worker::new(
        r,
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
    );
    tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
        .await
        .map_err(|_| "the worker did not finish in 30 s")?;
    for id in healthy.iter().chain(std::iter::once(&"suspect".to_owned())) {
        let record = store
            .load_run(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("run vanished")?;
        if record.status != RunStatus::Completed || record.claims_without_progress != 0 {
            return Err(format!(
                "{id} ended {} with claims_without_progress {}",
                record.status, record.claims_without_progress
            ));
        }
    }
    let events = timeline.events.lock().map_err(|e| e.to_string())?.clone();
    let mine = |e: &(FaultPoint, String)| e.1 == "suspect";
    let first = events
        .iter()
        .position(mine)
        .ok_or("the suspect never ran")?;
    let last = events
        .iter()
        .rposition(mine)
        .ok_or("the suspect never ran")?;
    if events[first].0 != FaultPoint::RunClaimed {
        return Err(format!(
            "the suspect's first event is {:?}",
            events[first].0
        ));
    }
    if let Some(other) = events[first..=last].iter().find(|e| !mine(e)) {
        return Err(format!(
            "{} ran ({:?}) while the suspect was running",
            other.1, other.0
        ));
    }
    Ok(())
}

/// A worker restarting under a stable id with `expire_own_leases_at_start` takes over at once
/// the runs its previous process held, and only those; without the setting they wait for
/// their leases.
///
/// # Errors
/// What went wrong.
pub async fn check_worker_expires_its_old_leases_at_start(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let worker_config = |expire: bool| WorkerConfig {
        concurrency: 4,
        poll_interval: Duration::from_millis(10),
        expire_own_leases_at_start: expire,
        retention: None,
    };
    let r = runner(&store, &world, "Pay", "slot-1")?;
    start(&r, "orphaned").await?;
    start(&r, "foreign").await?;
    // The previous process of `slot-1` died holding a long lease; another worker is alive.
    for (run, holder) in [("orphaned", "slot-1"), ("foreign", "slot-2")] {
        store
            .claim_run(run, holder, Duration::from_mins(10))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("could not claim a free run")?;
    }
    let status = |run: &'static str| {
        let store = Arc::clone(&store);
        async move {
            store
                .load_run(run)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{run} vanished"))
        }
    };
    let idle = |worker: Worker<Order, Behaviour>| async move {
        tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
            .await
            .map_err(|_| "the worker did not finish in 30 s".to_owned())
    };
    idle(Worker::new(r.clone(), worker_config(false))).await?;
    let waited = status("orphaned").await?;
    if waited.status.is_final() || waited.lease_owner.as_deref() != Some("slot-1") {
        return Err(format!(
            "without the setting, a run under a live lease of the same id was taken: {} {:?}",
            waited.status, waited.lease_owner
        ));
    }
    idle(Worker::new(r, worker_config(true))).await?;
    let orphaned = status("orphaned").await?;
    if orphaned.status != RunStatus::Completed {
        return Err(format!(
            "the run of the previous process ended {} (want completed at once)",
            orphaned.status
        ));
    }
    let foreign = status("foreign").await?;
    if foreign.version != 0 || foreign.lease_owner.as_deref() != Some("slot-2") {
        return Err(format!(
            "another worker's run was taken: version {}, lease {:?}",
            foreign.version, foreign.lease_owner
        ));
    }
    Ok(())
}

/// A worker with nothing to claim takes a run over when the lease of its dead holder
/// expires, not at its next poll: here the worker polls once an hour, and the run's lease
/// runs out after 300 ms ([`RunStore::next_due`](agent_core::store::RunStore::next_due)).
///
/// # Errors
/// What went wrong.
pub async fn check_worker_takes_over_when_a_lease_expires(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "survivor")?;
    start(&r, "abandoned").await?;
    store
        .claim_run("abandoned", "dead", Duration::from_millis(300))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("could not claim a free run")?;
    let worker = Worker::new(
        r,
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_hours(1),
            expire_own_leases_at_start: false,
            retention: None,
        },
    );
    let finished = {
        let store = Arc::clone(&store);
        async move {
            loop {
                if let Ok(Some(run)) = store.load_run("abandoned").await
                    && run.status.is_final()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(1), worker.run_until(finished))
        .await
        .map_err(|_| {
            "the run was not taken over when its lease expired (the worker polls once an hour)"
                .to_owned()
        })?;
    let run = store
        .load_run("abandoned")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run vanished")?;
    if run.status != RunStatus::Completed {
        return Err(format!("the run taken over ended {}", run.status));
    }
    Ok(())
}

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

/// A follower of a run, started before its first step, sees every event of the run exactly
/// once and in order, whatever crashed: the runner at each fault point (between a commit
/// and its wake-up among them), resumed by another worker. What it followed equals a read
/// of the run's events from the start once the run is final, and it never waited longer
/// than its poll for an event whose wake-up was lost.
///
/// # Errors
/// What went wrong, naming the fault point.
pub async fn check_followers_miss_nothing_across_crashes(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    use agent_core::events::{FollowConfig, Follower};
    use agent_core::store::{EventCursor, EventKind, EventScope};

    let follow = FollowConfig {
        poll: Duration::from_millis(50),
        ..FollowConfig::default()
    };
    for point in FaultPoint::ALL {
        let scenario = Scenario::Paid;
        let world = scenario.world();
        let router = Arc::new(fixture::router(scenario.choice()));
        let hook = Arc::new(CrashAt::new(point, 0));
        let run_id = format!("followed-{point}");
        let crashy = Runner::<Order, Behaviour>::builder(
            Arc::clone(&store),
            Behaviour,
            fixture::tools(&world),
        )
        .router(router.clone())
        .config(config("crashy"))
        .faults(hook.clone())
        .build()
        .map_err(|e| e.to_string())?;
        start(&crashy, &run_id).await?;
        let scope = EventScope::Run(run_id.clone());
        let mut follower = Follower::with_config(
            Arc::clone(&store),
            scope.clone(),
            EventCursor::START,
            follow.clone(),
        )
        .await
        .map_err(|e| format!("{run_id}: follower: {e}"))?;
        let reader = tokio::spawn(async move {
            let mut events = Vec::new();
            loop {
                let event = follower.next().await.map_err(|e| e.to_string())?;
                let last = matches!(event.kind, EventKind::RunFinished { .. });
                events.push(event);
                if last {
                    return Ok::<_, String>(events);
                }
            }
        });
        if let Err(e) = crashy.run(&run_id).await {
            if !(hook.fired() && matches!(e, RunnerError::Crashed(_))) {
                return Err(format!("{run_id}: first runner: {e}"));
            }
            tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
            runner(&store, &world, scenario.choice(), "healthy")?
                .run(&run_id)
                .await
                .map_err(|e| format!("{run_id}: resume failed: {e}"))?;
        }
        let seen = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .map_err(|_| format!("{run_id}: the follower did not see the run end in 10 s"))?
            .map_err(|e| format!("{run_id}: follower task: {e}"))??;
        let stored = store
            .events(&scope, EventCursor::START, 10_000)
            .await
            .map_err(|e| format!("{run_id}: events: {e}"))?;
        if seen != stored {
            let at = seen
                .iter()
                .zip(&stored)
                .position(|(a, b)| a != b)
                .unwrap_or(seen.len().min(stored.len()));
            return Err(format!(
                "{run_id}: followed {} events, the store has {}; first difference at {at}: \
                 {:?} vs {:?}",
                seen.len(),
                stored.len(),
                seen.get(at),
                stored.get(at)
            ));
        }
    }
    Ok(())
}

/// Expand to one `#[tokio::test]` per runner check, each on a fresh store from `setup`
/// (an `Arc` of a store, or an `Option` of one whose `None` skips the test).
#[macro_export]
macro_rules! runner_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::runner_conformance!(@each $setup,
            check_runs_complete_with_effects_once,
            check_crash_sweep,
            check_crash_sweep_parallel_calls,
            check_children_join_all,
            check_children_join_first_cancels_the_rest,
            check_failed_child_reaches_the_parent,
            check_cancelled_parent_cancels_its_children,
            check_children_budget,
            check_crash_sweep_children,
            check_stale_worker_is_fenced,
            check_quarantine,
            check_wait_survives_restart,
            check_kill_switch,
            check_illegal_router_answers,
            check_read_cache,
            check_redaction,
            check_worker_runs_suspects_alone,
            check_worker_expires_its_old_leases_at_start,
            check_worker_takes_over_when_a_lease_expires,
            check_cancel_compensates_a_waiting_run_once,
            check_cancel_during_a_step_takes_its_place,
            check_terminate_stops_without_compensating,
            check_terminate_during_a_step_fences_the_worker,
            check_cancel_racing_the_runner,
            check_followers_miss_nothing_across_crashes,
            check_v1_run_interrupted_mid_step_finishes_on_v2,
            check_compensating_v1_run_is_compensated_by_v2,
            check_older_runner_leaves_newer_runs_alone,
        );
    };
    (@each $setup:expr, $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let ::std::option::Option::Some(store) =
                    $crate::SetupOutput::into_store(($setup)().await)
                else {
                    return;
                };
                let store: ::std::sync::Arc<dyn $crate::__private::Store> = store;
                if let ::std::result::Result::Err(e) =
                    $crate::runner_checks::$check(store).await
                {
                    ::std::panic!("runner conformance check failed: {e}");
                }
            }
        )*
    };
}
