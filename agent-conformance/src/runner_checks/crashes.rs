//! The crash sweeps: runs, parallel calls and a follower, crashed at every fault point.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::{LEASE, Scenario, check_history, check_world, config, runner, start};
use crate::fixture::{self, Behaviour, Order, World};
use agent_core::runner::{
    CrashAt, FaultHook, FaultPoint, NoFaults, Runner, RunnerError, journal_spend,
};
use agent_core::store::verify::verify_run;
use agent_core::store::{RunRecord, RunStatus, Store};
use agent_core::tool::ToolBox;

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
        check_spend(store.as_ref(), &record, &fixture::tools(&world)).await?;
        if record.spend.asks != 2 {
            return Err(format!(
                "{scenario:?}: the run asked the model twice, its spend says {}",
                record.spend
            ));
        }
    }
    Ok(())
}

/// The spend the run's commits stored is what its journal says it spent: each ask and call
/// counted once, whatever crashed in between.
async fn check_spend(store: &dyn Store, record: &RunRecord, tools: &ToolBox) -> Result<(), String> {
    let journal = store
        .journal(&record.id, None)
        .await
        .map_err(|e| e.to_string())?;
    let stored = store
        .load_run(&record.id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run vanished")?;
    let counted = journal_spend(&journal, tools);
    if stored.spend != counted || record.spend != counted {
        return Err(format!(
            "spend: stored {}, returned {}, the journal counts {counted}",
            stored.spend, record.spend
        ));
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
                check_spend(store.as_ref(), &record, &fixture::tools(&world))
                    .await
                    .map_err(ctx)?;
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
