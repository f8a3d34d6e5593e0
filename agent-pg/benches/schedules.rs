//! Schedule tick delay (issue 41): how late a tick's run is created against the tick's
//! due time, with 1, 100 and 1,000 schedules coming due at the same instant on one worker,
//! on PostgreSQL and SQLite, in the same run.
//!
//! ```sh
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres' \
//!     cargo bench -p durable-agents-pg --bench schedules
//! SCHEDULES_FULL=1 ...            # 10 ticks per size instead of 3
//! SCHEDULES_COUNTS=1,100,5000 ... # other sizes
//! ```
//!
//! For each size, that many schedules tick on the same instants every 2 s, or every 10 ms
//! per schedule when that is longer (10 s for 1,000), so that one worker keeps up (an
//! interval anchored at 0, no jitter, overlap `allow_all`), each tick starting a run of a one-step
//! agent. One worker (16 runs at once, poll interval 500 ms) ticks them before each claim
//! and drives their runs. It sleeps until the store's next schedule due time, so the delay
//! is its wake-up, the passes over the due schedules (100 per pass) and one run creation
//! each, not a poll. Only ticks after the worker started are counted (the ticks due while
//! the schedules were being created are catch-up, not delay). Printed per size: min / p50 /
//! p99 / max of run `created_at` minus the tick, in milliseconds, and the ratio of each
//! size's p50 and p99 to one schedule's.
//!
//! Then one pass over 100 due schedules (`SCHEDULES_PASS`), timed two ways in the same
//! run, alternated over 5 rounds: one schedule after the other (`tick_schedule` in a loop,
//! as passes ticked before `TICKS_AT_ONCE`) and `tick_due` (that many at once); printed:
//! the median pass of each and their ratio.

// Figures are durations in milliseconds: `as f64` loses nothing a printed figure shows.
#![allow(clippy::cast_precision_loss)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::runner::{Runner, RunnerConfig, Worker, WorkerConfig};
use agent_core::schedule::{
    CatchUp, NewSchedule, OverlapPolicy, ScheduleSpec, TICK_LABEL, TICKS_AT_ONCE, create_schedule,
    tick_due, tick_schedule, tick_text,
};
use agent_core::store::{RunFilter, Store, now_ms};
use agent_core::{Ctx, StepResult, ToolBox};
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

/// The interval of `n` schedules: 2 s, or 10 ms per schedule when longer, so that one
/// worker ticks them all within an interval (about 5 ms a tick on PostgreSQL: two reads,
/// the run's creation and the schedule's compare-and-set) and never falls a tick behind,
/// which the catch-up policy would skip.
fn every_ms(n: usize) -> i64 {
    i64::try_from(n)
        .unwrap_or(i64::MAX)
        .saturating_mul(10)
        .max(2_000)
}

#[derive(Clone, Debug, Serialize, Deserialize, agent_core::Agent)]
enum Beat {
    #[agent(initial, to(Done))]
    Due,
    #[agent(terminal)]
    Done,
}

struct Step;

impl BeatHandlers for Step {
    async fn due(&self, ctx: Ctx<'_, beat::Due>, _: beat::Due) -> StepResult<beat::Due> {
        Ok(ctx.to(beat::Done))
    }
}

enum Opened {
    Pg(Arc<PgStore>),
    Sqlite(Arc<SqliteStore>, String),
}

impl Opened {
    async fn open(pg_url: Option<&str>, tag: &str) -> Self {
        if let Some(url) = pg_url {
            let schema = format!("bench_schedules_{}_{tag}", std::process::id());
            let store = PgStore::connect(url, &schema).await.expect("connect");
            store.migrate().await.expect("migrate");
            return Self::Pg(Arc::new(store));
        }
        let path = std::env::temp_dir()
            .join(format!("schedules-{}-{tag}.db", std::process::id()))
            .display()
            .to_string();
        Self::Sqlite(
            Arc::new(SqliteStore::open(&path).await.expect("open")),
            path,
        )
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Pg(_) => "PostgreSQL",
            Self::Sqlite(..) => "SQLite",
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Pg(s) => s.clone(),
            Self::Sqlite(s, _) => s.clone(),
        }
    }

    async fn remove(self) {
        match self {
            Self::Pg(s) => s.drop_schema().await.expect("drop schema"),
            Self::Sqlite(s, path) => {
                s.close().await;
                for suffix in ["", "-wal", "-shm", ".lock"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
            }
        }
    }
}

/// The delays (ms, sorted) of the ticks of `schedules` schedules over `ticks` ticks.
async fn measure(opened: &Opened, schedules: usize, ticks: i64) -> Vec<i64> {
    let every = every_ms(schedules);
    let store = opened.store();
    let runner = runner_on(&store);
    let state = serde_json::to_value(Beat::Due).expect("state");
    for k in 0..schedules {
        create_schedule(
            store.as_ref(),
            beat_every(format!("s{k:05}"), every.unsigned_abs(), &state, "ticks"),
            Some(&runner),
            now_ms(),
        )
        .await
        .expect("create a schedule");
    }
    let worker = Arc::new(Worker::new(
        runner,
        WorkerConfig {
            concurrency: 16,
            poll_interval: Duration::from_millis(500),
            expire_own_leases_at_start: false,
            retention: None,
        },
    ));
    let started = now_ms();
    // The first tick counted: the first one after the worker is up (and has caught up).
    let first = (started / every + 2) * every;
    let last = first + (ticks - 1) * every;
    let stop = Arc::new(tokio::sync::Notify::new());
    let working = {
        let (worker, stop) = (worker.clone(), stop.clone());
        tokio::spawn(async move { worker.run_until(stop.notified()).await })
    };
    let counted: HashMap<String, i64> = (0..ticks)
        .map(|k| first + k * every)
        .map(|t| (tick_text(t), t))
        .collect();
    let filter = RunFilter {
        agent: Some("Beat".to_owned()),
        labels: [(TICK_LABEL.to_owned(), tick_text(last))].into(),
        ..RunFilter::default()
    };
    // Until every schedule's last counted tick has its run.
    let deadline = std::time::Instant::now()
        + Duration::from_millis((last - now_ms()).unsigned_abs())
        + Duration::from_mins(1);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n: u64 = store
            .count_runs(&filter)
            .await
            .expect("count")
            .iter()
            .map(|(_, n)| n)
            .sum();
        if usize::try_from(n).unwrap_or(0) >= schedules {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the last tick's runs were not all started a minute after it: the worker fell \
             behind (missed ticks are skipped)"
        );
    }
    stop.notify_one();
    working.await.expect("worker");
    let runs = store
        .list_runs(&RunFilter {
            agent: Some("Beat".to_owned()),
            ..RunFilter::default()
        })
        .await
        .expect("runs");
    let mut late: Vec<i64> = runs
        .iter()
        .filter_map(|r| {
            let tick = counted.get(r.labels.get(TICK_LABEL)?)?;
            Some(r.created_at - tick)
        })
        .collect();
    assert_eq!(
        late.len(),
        schedules * usize::try_from(ticks).unwrap_or(0),
        "one run per schedule and counted tick"
    );
    late.sort_unstable();
    late
}

/// A schedule of the bench's agent ticking every `every_ms` from 0, starting runs in
/// `state`, labelled `bench=<label>`.
fn beat_every(id: String, every_ms: u64, state: &serde_json::Value, label: &str) -> NewSchedule {
    NewSchedule {
        id,
        agent: "Beat".to_owned(),
        spec: ScheduleSpec::Interval {
            every_ms,
            anchor_ms: 0,
        },
        jitter_ms: 0,
        overlap: OverlapPolicy::AllowAll,
        catch_up: CatchUp::Skip,
        paused: false,
        initial_state: state.clone(),
        labels: [("bench".to_owned(), label.to_owned())].into(),
    }
}

/// The runner of the bench's agent on `store`.
fn runner_on(store: &Arc<dyn Store>) -> Runner<Beat, Step> {
    Runner::<Beat, Step>::builder(Arc::clone(store), Step, ToolBox::new())
        .config(RunnerConfig {
            worker_id: "schedules".to_owned(),
            ..RunnerConfig::default()
        })
        .build()
        .expect("runner")
}

/// One pass's milliseconds over `n` schedules made due for it (created under `tag`, each
/// ticking every 10 s from a creation 10 s ago, so that its one tick is due and on time),
/// ticked one after the other or by `tick_due`.
async fn one_pass(store: &Arc<dyn Store>, n: usize, tag: &str, at_once: bool) -> f64 {
    let runner = runner_on(store);
    let state = serde_json::to_value(Beat::Due).expect("state");
    let now = now_ms();
    for k in 0..n {
        create_schedule(
            store.as_ref(),
            beat_every(format!("{tag}-{k:05}"), 10_000, &state, "pass"),
            Some(&runner),
            now - 10_000,
        )
        .await
        .expect("create a schedule");
    }
    let started = std::time::Instant::now();
    let runs = if at_once {
        tick_due(store.as_ref(), &runner, now, n)
            .await
            .expect("tick")
            .started
            .len()
    } else {
        let mut runs = 0;
        for s in store.due_schedules("Beat", now, n).await.expect("due") {
            runs += tick_schedule(store.as_ref(), &runner, &s, now)
                .await
                .expect("tick")
                .started
                .len();
        }
        runs
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(runs, n, "one run per due schedule ({tag})");
    ms
}

/// The pass A/B: medians of one after the other and of `tick_due`, alternated.
async fn pass_ab(opened: &Opened, n: usize, rounds: usize) -> (f64, f64) {
    let store = opened.store();
    let (mut serial, mut at_once) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for first in [round % 2 == 0, round % 2 == 1] {
            let tag = format!("r{round}-{}", if first { "serial" } else { "at-once" });
            let ms = one_pass(&store, n, &tag, !first).await;
            if first {
                serial.push(ms);
            } else {
                at_once.push(ms);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut serial), median(&mut at_once))
}

fn pct(sorted: &[i64], permille: usize) -> f64 {
    sorted[(sorted.len() - 1) * permille / 1_000] as f64
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = match std::env::var("SCHEDULES_COUNTS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .replace('_', "")
                    .parse()
                    .expect("SCHEDULES_COUNTS: numbers")
            })
            .collect(),
        Err(_) => vec![1, 100, 1_000],
    };
    let ticks = if std::env::var("SCHEDULES_FULL").is_ok_and(|v| v == "1") {
        10
    } else {
        3
    };
    let pg = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
    if pg.is_none() {
        eprintln!("DATABASE_URL is not set: SQLite only");
    }
    println!(
        "schedules: tick delay (run created minus tick), schedules ticking on the same \
         instants every 2 s (10 ms per schedule when longer), {ticks} ticks each, one worker"
    );
    println!(
        "\n| store | schedules due at once | runs | min | p50 | p99 | max | p50, p99 against 1 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let places = pg.as_deref().map(Some).into_iter().chain([None]);
    for url in places {
        let mut base: Option<(f64, f64)> = None;
        for &n in &sizes {
            let opened = Opened::open(url, &n.to_string()).await;
            let late = measure(&opened, n, ticks).await;
            let (p50, p99) = (pct(&late, 500), pct(&late, 990));
            let against = base.map_or(String::new(), |(b50, b99)| {
                format!("{:.2}, {:.2}", p50 / b50.max(1.0), p99 / b99.max(1.0))
            });
            base.get_or_insert((p50, p99));
            println!(
                "| {} | {n} | {} | {} | {p50} | {p99} | {} ms | {against} |",
                opened.label(),
                late.len(),
                late[0],
                late[late.len() - 1],
            );
            opened.remove().await;
        }
    }
    let n: usize = std::env::var("SCHEDULES_PASS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    println!(
        "\none pass over {n} due schedules, median of 5 alternated rounds: one after the \
         other against tick_due ({TICKS_AT_ONCE} at once)"
    );
    println!("\n| store | one after the other | tick_due | ratio |");
    println!("|---|---|---|---|");
    let places = pg.as_deref().map(Some).into_iter().chain([None]);
    for url in places {
        let opened = Opened::open(url, "pass").await;
        let (serial, at_once) = pass_ab(&opened, n, 5).await;
        println!(
            "| {} | {serial:.0} ms | {at_once:.0} ms | {:.2} |",
            opened.label(),
            serial / at_once.max(1e-9)
        );
        opened.remove().await;
    }
}
