//! Schedules on a real store ([`agent_core::schedule`]): each tick starts exactly one
//! run with several tickers at once and across a crash between starting a tick's run and
//! advancing the schedule; the overlap and catch-up policies; pause, resume, trigger and
//! backfill; daylight-saving transitions, on a clock the check moves by hand.
//!
//! The fixture agent's runs are started and never driven, so a tick's run stays
//! `running` until the check ends it (terminate) to let the next one start.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDate;
use serde_json::{Value, json};

use super::fixture::{self, Behaviour, Order, World};
use agent_core::runner::{JsonStarter, Runner, RunnerConfig, Worker, WorkerConfig};
use agent_core::schedule::{
    self, BUFFER_RECHECK_MS, CatchUp, NewSchedule, OverlapPolicy, SCHEDULE_LABEL, Schedule,
    ScheduleError, ScheduleSpec, SpecError, TICK_LABEL, tick::tick_without_advancing, tick_due,
    tick_schedule, tick_text,
};
use agent_core::store::{
    Labels, Millis, OperatorNote, RunFilter, RunRecord, RunStatus, Store, now_ms,
};

type CheckResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

const SECOND: Millis = 1_000;
const HOUR: Millis = 3_600_000;

fn starter(store: &Arc<dyn Store>) -> Result<Arc<Runner<Order, Behaviour>>, String> {
    let world = Arc::new(World::default());
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(&world))
        .router(Arc::new(fixture::router("Pay")))
        .config(RunnerConfig {
            worker_id: "scheduler".to_owned(),
            ..RunnerConfig::default()
        })
        .build()
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn start_state() -> Value {
    serde_json::to_value(fixture::initial(&["sku-1"])).unwrap_or(Value::Null)
}

fn every(id: &str, every_ms: u64, overlap: OverlapPolicy, catch_up: CatchUp) -> NewSchedule {
    NewSchedule {
        id: id.to_owned(),
        agent: "Order".to_owned(),
        spec: ScheduleSpec::Interval {
            every_ms,
            anchor_ms: 0,
        },
        jitter_ms: 0,
        overlap,
        catch_up,
        paused: false,
        initial_state: start_state(),
        labels: Labels::from([("team".to_owned(), "billing".to_owned())]),
    }
}

async fn create(
    store: &Arc<dyn Store>,
    starter: &Runner<Order, Behaviour>,
    new: NewSchedule,
    now: Millis,
) -> Result<Schedule, String> {
    schedule::create_schedule(store.as_ref(), new, Some(starter), now)
        .await
        .map_err(|e| format!("create schedule: {e}"))
}

async fn load(store: &Arc<dyn Store>, id: &str) -> Result<Schedule, String> {
    store
        .load_schedule(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("schedule `{id}` is gone"))
}

/// Tick the schedule as stored now, at `now`.
async fn tick(
    store: &Arc<dyn Store>,
    starter: &Runner<Order, Behaviour>,
    id: &str,
    now: Millis,
) -> Result<schedule::TickReport, String> {
    let s = load(store, id).await?;
    tick_schedule(store.as_ref(), starter, &s, now)
        .await
        .map_err(|e| format!("tick at {}: {e}", tick_text(now)))
}

/// The runs of a schedule, by tick.
async fn runs_of(store: &Arc<dyn Store>, id: &str) -> Result<Vec<RunRecord>, String> {
    let filter = RunFilter {
        labels: Labels::from([(SCHEDULE_LABEL.to_owned(), id.to_owned())]),
        ..RunFilter::default()
    };
    let mut runs = store.list_runs(&filter).await.map_err(|e| e.to_string())?;
    runs.sort_by(|a, b| a.labels.get(TICK_LABEL).cmp(&b.labels.get(TICK_LABEL)));
    Ok(runs)
}

async fn ticks_of(store: &Arc<dyn Store>, id: &str) -> Result<Vec<String>, String> {
    Ok(runs_of(store, id)
        .await?
        .iter()
        .map(|r| r.labels.get(TICK_LABEL).cloned().unwrap_or_default())
        .collect())
}

async fn end(store: &Arc<dyn Store>, run_id: &str) -> CheckResult {
    store
        .terminate_run(run_id, &OperatorNote::new("check", "let the next tick run"))
        .await
        .map(drop)
        .map_err(|e| format!("terminate {run_id}: {e}"))
}

/// Four tickers tick the same schedule at each of 20 ticks, all at once: 20 runs, one
/// per tick, named after it, labelled with it.
///
/// # Errors
/// A tick without its run, or with two.
pub async fn check_schedule_ticks_once_with_concurrent_tickers(
    store: Arc<dyn Store>,
) -> CheckResult {
    let starter = starter(&store)?;
    let id = "every-second";
    create(
        &store,
        &starter,
        every(id, 1000, OverlapPolicy::AllowAll, CatchUp::Last),
        0,
    )
    .await?;
    for k in 1..=20 {
        let now = k * SECOND;
        let mut tickers = Vec::new();
        for _ in 0..4 {
            let (store, starter) = (Arc::clone(&store), Arc::clone(&starter));
            tickers.push(tokio::spawn(async move {
                let due = store
                    .due_schedules("Order", now, 10)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut reports = Vec::new();
                for s in due {
                    reports.push(
                        tick_schedule(store.as_ref(), starter.as_ref(), &s, now)
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                Ok::<_, String>(reports)
            }));
        }
        for ticker in tickers {
            ticker.await.map_err(|e| e.to_string())??;
        }
    }
    let runs = runs_of(&store, id).await?;
    ensure!(runs.len() == 20, "20 ticks started {} runs", runs.len());
    let ids: BTreeSet<_> = runs.iter().map(|r| r.id.clone()).collect();
    let s = load(&store, id).await?;
    let expected: BTreeSet<_> = (1..=20).map(|k| s.run_id_of(k * SECOND)).collect();
    ensure!(ids == expected, "the runs are {ids:?}, not one per tick");
    ensure!(
        runs.iter()
            .all(|r| r.labels.get("team").map(String::as_str) == Some("billing")),
        "a tick's run lacks the schedule's labels"
    );
    ensure!(
        s.next_tick == Some(21 * SECOND) && s.last_tick == Some(20 * SECOND),
        "the schedule stands at {:?} after tick {:?}",
        s.next_tick,
        s.last_tick
    );
    Ok(())
}

/// A ticker that dies after starting a tick's run and before advancing the schedule
/// leaves the schedule at that tick; the next ticker starts no second run for it, and
/// does not count it as overlapping (it is the tick's own run).
///
/// # Errors
/// Two runs for the tick, or a schedule that did not advance past it.
pub async fn check_schedule_crash_before_advancing_starts_no_second_run(
    store: Arc<dyn Store>,
) -> CheckResult {
    let starter = starter(&store)?;
    let id = "crashy";
    create(
        &store,
        &starter,
        every(id, 1000, OverlapPolicy::Skip, CatchUp::Last),
        0,
    )
    .await?;
    let before = load(&store, id).await?;
    let crashed = tick_without_advancing(store.as_ref(), starter.as_ref(), &before, SECOND)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        crashed.started.len() == 1,
        "the crashed pass started {:?}",
        crashed.started
    );
    let after_crash = load(&store, id).await?;
    ensure!(
        after_crash == before,
        "the crashed pass changed the schedule: {after_crash:?}"
    );
    let report = tick(&store, &starter, id, SECOND + 5).await?;
    ensure!(
        report.started == crashed.started && report.skipped.is_empty(),
        "the next pass did {report:?} (the crashed one started {:?})",
        crashed.started
    );
    let runs = runs_of(&store, id).await?;
    ensure!(runs.len() == 1, "one tick has {} runs", runs.len());
    let s = load(&store, id).await?;
    ensure!(
        s.next_tick == Some(2 * SECOND) && s.last_run_id == Some(runs[0].id.clone()),
        "the schedule did not advance past the tick: {s:?}"
    );
    // The same stale read ticked again (a worker that read before the advance) changes
    // nothing: the run exists and the compare-and-set loses.
    let stale = tick_schedule(store.as_ref(), starter.as_ref(), &before, SECOND + 9)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        stale.lost_race,
        "a stale read advanced the schedule: {stale:?}"
    );
    ensure!(
        runs_of(&store, id).await?.len() == 1,
        "a stale read started a second run"
    );
    Ok(())
}

/// Each overlap policy while the previous tick's run is not final: skip drops the tick,
/// buffer one keeps the latest and starts it once the previous run ends, allow all starts
/// it, cancel previous cancels the previous run and starts it.
///
/// # Errors
/// A policy that did otherwise.
pub async fn check_schedule_overlap_policies(store: Arc<dyn Store>) -> CheckResult {
    // Ten seconds apart, so that a buffered tick's recheck comes before the next tick.
    const PERIOD: Millis = 10 * SECOND;
    let starter = starter(&store)?;
    for policy in [
        OverlapPolicy::Skip,
        OverlapPolicy::BufferOne,
        OverlapPolicy::AllowAll,
        OverlapPolicy::CancelPrevious,
    ] {
        let id = format!("overlap-{policy:?}");
        create(
            &store,
            &starter,
            every(&id, 10_000, policy, CatchUp::Last),
            0,
        )
        .await?;
        let first = tick(&store, &starter, &id, PERIOD).await?;
        ensure!(
            first.started.len() == 1,
            "{policy:?}: the first tick did {first:?}"
        );
        let second = tick(&store, &starter, &id, 2 * PERIOD).await?;
        let s = load(&store, &id).await?;
        match policy {
            OverlapPolicy::Skip => {
                ensure!(
                    second.started.is_empty() && second.skipped == vec![2 * PERIOD],
                    "skip: {second:?}"
                );
                end(&store, &first.started[0]).await?;
                let third = tick(&store, &starter, &id, 3 * PERIOD).await?;
                ensure!(third.started.len() == 1, "skip: after the end, {third:?}");
                ensure!(
                    ticks_of(&store, &id).await? == vec![tick_text(PERIOD), tick_text(3 * PERIOD)],
                    "skip: the runs are of ticks {:?}",
                    ticks_of(&store, &id).await?
                );
            }
            OverlapPolicy::BufferOne => {
                ensure!(
                    second.started.is_empty() && s.buffered_tick == Some(2 * PERIOD),
                    "buffer one: {second:?}, buffered {:?}",
                    s.buffered_tick
                );
                let third = tick(&store, &starter, &id, 3 * PERIOD).await?;
                let s = load(&store, &id).await?;
                ensure!(
                    third.skipped == vec![2 * PERIOD] && s.buffered_tick == Some(3 * PERIOD),
                    "buffer one keeps the latest tick: {third:?}, buffered {:?}",
                    s.buffered_tick
                );
                end(&store, &first.started[0]).await?;
                // The buffered tick looks again shortly, before the next tick.
                let recheck = 3 * PERIOD + BUFFER_RECHECK_MS;
                ensure!(
                    s.due_at() == Some(recheck),
                    "buffer one: due again at {:?}",
                    s.due_at()
                );
                let later = tick(&store, &starter, &id, recheck).await?;
                ensure!(
                    later.started == vec![s.run_id_of(3 * PERIOD)],
                    "buffer one: once the previous run ended, {later:?}"
                );
                ensure!(
                    load(&store, &id).await?.buffered_tick.is_none(),
                    "buffer one: the started tick is still buffered"
                );
            }
            OverlapPolicy::AllowAll => {
                ensure!(second.started.len() == 1, "allow all: {second:?}");
                ensure!(
                    runs_of(&store, &id).await?.len() == 2,
                    "allow all: not two runs"
                );
            }
            OverlapPolicy::CancelPrevious => {
                ensure!(
                    second.cancelled == first.started && second.started.len() == 1,
                    "cancel previous: {second:?}"
                );
                let previous = store
                    .load_run(&first.started[0])
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("cancel previous: the first run is gone")?;
                ensure!(
                    matches!(
                        previous.status,
                        RunStatus::Compensating | RunStatus::Cancelled
                    ),
                    "cancel previous: the previous run is {}",
                    previous.status
                );
            }
        }
    }
    Ok(())
}

/// After downtime (an hourly schedule not ticked for five and a half hours): skip
/// starts nothing and waits for the next tick, last starts the latest missed tick, up to
/// 3 the latest three, oldest first.
///
/// # Errors
/// A policy that did otherwise.
pub async fn check_schedule_catch_up_policies(store: Arc<dyn Store>) -> CheckResult {
    let starter = starter(&store)?;
    let back = 5 * HOUR + HOUR / 2;
    for (policy, expected) in [
        (CatchUp::Skip, vec![]),
        (CatchUp::Last, vec![5]),
        (CatchUp::UpTo(3), vec![3, 4, 5]),
    ] {
        let id = format!("catch-up-{policy:?}").replace(['(', ')'], "");
        create(
            &store,
            &starter,
            every(&id, 3_600_000, OverlapPolicy::AllowAll, policy),
            0,
        )
        .await?;
        let report = tick(&store, &starter, &id, back).await?;
        let want: Vec<String> = expected.iter().map(|h| tick_text(h * HOUR)).collect();
        ensure!(
            ticks_of(&store, &id).await? == want,
            "{policy:?}: the runs are of ticks {:?}, not {want:?} ({report:?})",
            ticks_of(&store, &id).await?
        );
        ensure!(
            report.skipped.len() + want.len() == 5,
            "{policy:?}: five ticks were missed, {report:?}"
        );
        let s = load(&store, &id).await?;
        ensure!(
            s.next_tick == Some(6 * HOUR),
            "{policy:?}: next tick {:?}",
            s.next_tick
        );
        // Back on time, each policy runs the next tick.
        tick(&store, &starter, &id, 6 * HOUR + SECOND).await?;
        ensure!(
            runs_of(&store, &id).await?.len() == want.len() + 1,
            "{policy:?}: the tick on time started no run"
        );
    }
    Ok(())
}

/// Pause, trigger while paused, resume (the ticks of the pause start nothing), backfill
/// a range (a tick that ran keeps its one run), a stale compare-and-set, delete.
///
/// # Errors
/// A verb that did otherwise.
pub async fn check_schedule_pause_resume_trigger_backfill(store: Arc<dyn Store>) -> CheckResult {
    let starter = starter(&store)?;
    let st = store.as_ref();
    let id = "operated";
    create(
        &store,
        &starter,
        every(id, 60_000, OverlapPolicy::AllowAll, CatchUp::Last),
        0,
    )
    .await?;
    tick(&store, &starter, id, 60 * SECOND).await?;
    let paused = schedule::pause_schedule(st, id, 61 * SECOND)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        paused.paused && paused.due_at().is_none(),
        "paused: {paused:?}"
    );
    let none = tick_due(st, starter.as_ref(), 10 * 60 * SECOND, 10)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        none.started.is_empty(),
        "a paused schedule ticked: {none:?}"
    );
    let trigger_at = 10 * 60 * SECOND + 7;
    schedule::trigger_schedule(st, id, trigger_at)
        .await
        .map_err(|e| e.to_string())?;
    let triggered = tick_due(st, starter.as_ref(), trigger_at + 5, 10)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        triggered.started == vec![format!("{id}@{}", tick_text(trigger_at))],
        "trigger while paused: {triggered:?}"
    );
    let resumed = schedule::resume_schedule(st, id, 20 * 60 * SECOND + 1)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        !resumed.paused && resumed.next_tick == Some(21 * 60 * SECOND),
        "resumed: next tick {:?}",
        resumed.next_tick
    );
    // Minutes 1 to 4: minute 1 ran, 2 to 4 fell in the pause.
    let (_, asked) =
        schedule::backfill_schedule(st, id, 60 * SECOND, 4 * 60 * SECOND, 20 * 60 * SECOND + 2)
            .await
            .map_err(|e| e.to_string())?;
    ensure!(asked == 4, "the backfill asked for {asked} ticks, not 4");
    let backfilled = tick_due(st, starter.as_ref(), 20 * 60 * SECOND + 3, 10)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(backfilled.started.len() == 4, "backfill: {backfilled:?}");
    let mut want: Vec<String> = (1..=4).map(|m| tick_text(m * 60 * SECOND)).collect();
    want.push(tick_text(trigger_at));
    ensure!(
        ticks_of(&store, id).await? == want,
        "the runs are of ticks {:?}, not {want:?}",
        ticks_of(&store, id).await?
    );
    // A write from a stale revision is refused and changes nothing.
    let s = load(&store, id).await?;
    let mut stale = s.clone();
    stale.paused = true;
    stale.revision = s.revision + 1;
    let refused = store
        .replace_schedule(&stale, s.revision.wrapping_sub(1))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(refused.is_none(), "a stale compare-and-set was applied");
    ensure!(
        !load(&store, id).await?.paused,
        "a stale write changed the schedule"
    );
    let listed = store
        .list_schedules(Some("Order"))
        .await
        .map_err(|e| e.to_string())?;
    ensure!(listed.len() == 1 && listed[0].id == id, "listed {listed:?}");
    schedule::delete_schedule(st, id)
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        store
            .load_schedule(id)
            .await
            .map_err(|e| e.to_string())?
            .is_none(),
        "deleted, yet it loads"
    );
    ensure!(
        runs_of(&store, id).await?.len() == 5,
        "deleting a schedule removed its runs"
    );
    Ok(())
}

fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> Millis {
    NaiveDate::from_ymd_opt(y, m, d)
        .and_then(|d| d.and_hms_opt(h, min, 0))
        .map_or(0, |t| t.and_utc().timestamp_millis())
}

/// A daily 02:30 in Europe/Berlin ticked by a clock moved by hand every 10 minutes
/// across both transitions of 2027: on the spring-forward day it runs once, at 03:00
/// CEST; on the fall-back day once, at the first 02:30.
///
/// # Errors
/// A day with no run or two.
pub async fn check_schedule_dst_with_a_controllable_clock(store: Arc<dyn Store>) -> CheckResult {
    let starter = starter(&store)?;
    let st = store.as_ref();
    for (id, from, to, want) in [
        (
            "berlin-spring",
            utc(2027, 3, 27, 12, 0),
            utc(2027, 3, 29, 12, 0),
            vec![utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)],
        ),
        (
            "berlin-fall",
            utc(2027, 10, 30, 12, 0),
            utc(2027, 11, 1, 12, 0),
            vec![utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)],
        ),
    ] {
        let mut new = every(id, 1000, OverlapPolicy::AllowAll, CatchUp::Last);
        new.spec = ScheduleSpec::Cron {
            expression: "30 2 * * *".to_owned(),
            time_zone: "Europe/Berlin".to_owned(),
        };
        create(&store, &starter, new, from).await?;
        let mut now = from;
        while now <= to {
            tick_due(st, starter.as_ref(), now, 10)
                .await
                .map_err(|e| e.to_string())?;
            now += 10 * 60 * SECOND;
        }
        let want: Vec<String> = want.into_iter().map(tick_text).collect();
        ensure!(
            ticks_of(&store, id).await? == want,
            "{id}: the runs are of ticks {:?}, not {want:?}",
            ticks_of(&store, id).await?
        );
    }
    Ok(())
}

/// A malformed cron expression, an unknown time zone and a state that is not an initial
/// state are refused at creation, with the agent's code and without it (by the agent's
/// registered graph); the same id with another definition is refused, with the same one
/// returned.
///
/// # Errors
/// Bad input accepted, or refused for the wrong reason.
pub async fn check_schedule_bad_input_is_refused(store: Arc<dyn Store>) -> CheckResult {
    let starter = starter(&store)?;
    let st = store.as_ref();
    let dyn_starter: &dyn JsonStarter = starter.as_ref();
    let mut cron = every("bad", 1000, OverlapPolicy::Skip, CatchUp::Skip);
    cron.spec = ScheduleSpec::Cron {
        expression: "every tuesday".to_owned(),
        time_zone: "UTC".to_owned(),
    };
    let err = schedule::create_schedule(st, cron.clone(), Some(dyn_starter), 0).await;
    ensure!(
        matches!(
            err,
            Err(ScheduleError::Spec(SpecError::MalformedCron { .. }))
        ),
        "a malformed cron expression: {err:?}"
    );
    cron.spec = ScheduleSpec::Cron {
        expression: "0 8 * * MON-FRI".to_owned(),
        time_zone: "Europe/Atlantis".to_owned(),
    };
    let err = schedule::create_schedule(st, cron, Some(dyn_starter), 0).await;
    ensure!(
        matches!(err, Err(ScheduleError::Spec(SpecError::UnknownTimeZone(_)))),
        "an unknown time zone: {err:?}"
    );
    let mut not_initial = every("bad", 1000, OverlapPolicy::Skip, CatchUp::Skip);
    not_initial.initial_state = json!({ "Pay": { "cents": 5 } });
    let err = schedule::create_schedule(st, not_initial.clone(), Some(dyn_starter), 0).await;
    ensure!(
        matches!(&err, Err(ScheduleError::InitialState(m)) if m.contains("Start")),
        "a state that is not initial, with the agent's code: {err:?}"
    );
    // Without the agent's code, by its registered graph (registered by the runner's start).
    let runner_record = dyn_starter
        .start_json(
            "registers-the-graph".to_owned(),
            start_state(),
            Labels::new(),
        )
        .await
        .map_err(|e| e.to_string())?;
    ensure!(
        runner_record.agent == "Order",
        "the fixture run is of {}",
        runner_record.agent
    );
    let err = schedule::create_schedule(st, not_initial, None, 0).await;
    ensure!(
        matches!(&err, Err(ScheduleError::InitialState(m)) if m.contains("`Pay`")),
        "a state that is not initial, by the graph: {err:?}"
    );
    let good = every("good", 1000, OverlapPolicy::Skip, CatchUp::Skip);
    schedule::create_schedule(st, good.clone(), None, 0)
        .await
        .map_err(|e| format!("by the graph, a good schedule: {e}"))?;
    let again = schedule::create_schedule(st, good.clone(), None, 5).await;
    ensure!(again.is_ok(), "the same definition again: {again:?}");
    let mut other = good;
    other.jitter_ms = 10;
    let err = schedule::create_schedule(st, other, None, 5).await;
    ensure!(
        matches!(err, Err(ScheduleError::AlreadyExists(_))),
        "another definition under the same id: {err:?}"
    );
    ensure!(
        store
            .load_schedule("bad")
            .await
            .map_err(|e| e.to_string())?
            .is_none(),
        "a refused schedule was stored"
    );
    Ok(())
}

/// A [`Worker`] ticks its agent's schedules and drives the runs they start, waking for
/// each tick although it polls once an hour: its sleep is cut to the next tick.
///
/// # Errors
/// The runs of two ticks not started and driven within a minute.
pub async fn check_schedule_worker_ticks_without_polling(store: Arc<dyn Store>) -> CheckResult {
    let starter = starter(&store)?;
    let id = "worker-ticked";
    let mut new = every(id, 1000, OverlapPolicy::AllowAll, CatchUp::Last);
    new.spec = ScheduleSpec::Interval {
        every_ms: 1000,
        anchor_ms: now_ms(),
    };
    create(&store, &starter, new, now_ms()).await?;
    let worker = Worker::new(
        Arc::unwrap_or_clone(starter),
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_hours(1),
            expire_own_leases_at_start: false,
            retention: None,
        },
    );
    let two_driven = {
        let store = Arc::clone(&store);
        async move {
            loop {
                if let Ok(runs) = runs_of(&store, id).await
                    && runs.iter().filter(|r| r.version > 0).count() >= 2
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(1), worker.run_until(two_driven))
        .await
        .map_err(|_| "the worker did not start and drive two ticks' runs in a minute".to_owned())?;
    let s = load(&store, id).await?;
    for run in runs_of(&store, id).await? {
        let tick = run.labels.get(TICK_LABEL).cloned().unwrap_or_default();
        ensure!(
            s.last_tick.is_some_and(|last| tick <= tick_text(last)),
            "run {} of tick {tick} is past the schedule's last tick {:?}",
            run.id,
            s.last_tick
        );
    }
    Ok(())
}
