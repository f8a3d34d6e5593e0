//! Issue 7, item 2: races and zombies.
//!
//! - The same run started and driven by several workers at once, for many runs: at most one
//!   executor per step (no step's calls come from two workers), no fork, every effect once.
//! - A worker process paused with SIGSTOP past its lease while another takes over, then
//!   resumed with SIGCONT: its stale commits are rejected (it loses its leases), it makes no
//!   further tool call, no fork, every effect once.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::runner::{RunnerConfig, RunnerError};
use agent_core::store::Store;
use agent_pg::PgStore;
use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, held_runs, recovery_times, wait_all_final};
use e2e::service::{Latency, Service};
use e2e::stats::Summary;
use e2e::{now_ms, shop, size};
use sqlx::postgres::PgPoolOptions;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_run_on_several_workers_at_once() {
    let Some(url) = database_url("races").await else {
        return;
    };
    let runs = size("E2E_RACE_RUNS", 200, 2_000);
    let racers = 4;
    let db = TestDb::create(&url, "race").await;
    let mut runners = Vec::new();
    for i in 0..racers {
        let store =
            PgStore::connect_with(&url, &db.schema, PgPoolOptions::new().max_connections(4))
                .await
                .expect("connect");
        let pool = e2e::db::pool(&url, &db.schema, 3).await.expect("connect");
        let worker = format!("racer-{i}");
        let svc = Arc::new(Service::new(
            pool,
            &worker,
            Latency::ms(0, 5),
            Latency::ms(1, 10),
        ));
        let store: Arc<dyn Store> = Arc::new(store);
        runners.push(shop::runner(
            store,
            &svc,
            RunnerConfig {
                worker_id: worker,
                lease_ttl: Duration::from_secs(10),
                ..RunnerConfig::default()
            },
        ));
    }
    let started = Instant::now();
    let (mut drove, mut refused) = (0_u64, 0_u64);
    // Several runs at a time, each started and driven by every racer at once.
    let batch = 8;
    let mut next = 0;
    while next < runs {
        let mut set = tokio::task::JoinSet::new();
        for i in next..(next + batch).min(runs) {
            let id = shop::run_id(i);
            for r in &runners {
                let r = r.clone();
                let id = id.clone();
                set.spawn(async move {
                    r.start(&id, shop::initial(&id)).await.expect("start");
                    match r.run(&id).await {
                        Ok(rec) => (rec.lease_owner.is_none() && rec.status.is_final(), false),
                        Err(RunnerError::LeaseLost(_)) => (false, true),
                        Err(e) => panic!("run {id}: {e}"),
                    }
                });
            }
        }
        while let Some(r) = set.join_next().await {
            let (_, lost) = r.expect("racer");
            if lost {
                refused += 1;
            } else {
                drove += 1;
            }
        }
        next += batch;
    }
    // Runs whose holder was refused mid-way are finished by any racer.
    for i in 0..runs {
        let id = shop::run_id(i);
        let _ = runners[0].run(&id).await;
    }
    assert!(
        wait_all_final(&db, runs, Duration::from_mins(1)).await,
        "runs still open"
    );
    let report = check(
        &db.pool,
        &Expect {
            runs,
            ..Expect::default()
        },
    )
    .await;
    println!(
        "races: {runs} runs each started and driven by {racers} workers at once in {:.1} s: \
         {refused} attempts refused (lease held by another racer), {drove} returned; \
         steps executed by two workers {}; questions asked twice {}",
        started.elapsed().as_secs_f64(),
        report.steps_taken_over,
        report.reasked
    );
    println!("  check: {report:?}");
    report.assert_clean();
    assert_eq!(
        report.steps_taken_over, 0,
        "a step was executed by two workers"
    );
    assert_eq!(report.reasked, 0, "a question was asked twice");
    assert!(refused > 0, "the racers never collided");
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_paused_past_its_lease() {
    let Some(url) = database_url("zombie").await else {
        return;
    };
    let rounds = size("E2E_ZOMBIE_ROUNDS", 3, 10);
    for round in 0..rounds {
        zombie_round(&url, round).await;
    }
}

#[allow(clippy::too_many_lines)]
async fn zombie_round(url: &str, round: u64) {
    let runs = size("E2E_ZOMBIE_RUNS", 60, 200);
    let lease_ms = 1_000;
    let db = TestDb::create(url, "zombie").await;
    create_runs(&db, 0, runs).await;
    let mut z = WorkerOpts::new(url, &db.schema, "zombie");
    z.lease_ms = lease_ms;
    z.poll_ms = 100;
    z.concurrency = 8;
    z.tool_latency = (50, 250);
    let zombie = WorkerProc::spawn(Path::new(BIN), &z);
    // Let it get going: leases held and calls in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let calls: (i64,) =
            sqlx::query_as("SELECT count(*) FROM e2e_calls WHERE worker = 'zombie'")
                .fetch_one(&db.pool)
                .await
                .expect("count calls");
        if calls.0 >= 20 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    zombie.signal("STOP");
    let stopped_at = now_ms();
    let held = held_runs(&db.pool, "zombie").await;
    assert!(!held.is_empty(), "the zombie held no lease when paused");
    // Past its lease, another worker takes over and finishes everything.
    let mut t = WorkerOpts::new(url, &db.schema, "taker");
    t.lease_ms = lease_ms;
    t.poll_ms = 100;
    t.exit_when_done = runs;
    let taker = WorkerProc::spawn(Path::new(BIN), &t);
    assert!(
        wait_all_final(&db, runs, Duration::from_mins(2)).await,
        "the taker did not finish the runs"
    );
    let (code, taker_report) = taker.wait_report(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the taker failed");
    let takeovers = recovery_times(&db.pool, stopped_at, &held).await;
    // Resume the zombie: it must notice it lost every lease and make no call.
    zombie.signal("CONT");
    let resumed_at = now_ms();
    tokio::time::sleep(Duration::from_millis(3 * lease_ms)).await;
    let (code, zombie_report) = zombie.stop(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the zombie exited badly");
    let zombie_report = zombie_report.expect("zombie report");
    let late: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT run_id, version, tool FROM e2e_calls WHERE worker = 'zombie' AND started_ms > $1",
    )
    .bind(resumed_at)
    .fetch_all(&db.pool)
    .await
    .expect("late calls");
    let late_commits: (i64,) = sqlx::query_as(
        "SELECT count(*) FROM transitions WHERE ts_to_ms(created_at) > $1 AND kind <> 'start'",
    )
    .bind(resumed_at)
    .fetch_one(&db.pool)
    .await
    .expect("late commits");
    let report = check(
        &db.pool,
        &Expect {
            runs,
            crashed_workers: HashSet::from(["zombie".to_owned()]),
            ..Expect::default()
        },
    )
    .await;
    println!(
        "zombie round {round}: {runs} runs, lease {lease_ms} ms; paused holding {} runs; \
         taker's takeover after the pause {}; after SIGCONT the zombie lost {} leases \
         (stale writes rejected), made {} tool calls, {} commits landed; executions \
         deduplicated by key {}, steps executed by both {}",
        held.len(),
        Summary::of(&takeovers),
        zombie_report.leases_lost,
        late.len(),
        late_commits.0,
        report.deduplicated,
        report.steps_taken_over,
    );
    println!("  taker: {taker_report:?}\n  check: {report:?}");
    report.assert_clean();
    assert!(
        late.is_empty(),
        "the zombie called tools after SIGCONT: {late:?}"
    );
    assert_eq!(
        late_commits.0, 0,
        "a commit landed after every run was final"
    );
    assert!(
        zombie_report.leases_lost >= 1,
        "the zombie's stale writes were not rejected: {zombie_report:?}"
    );
    db.drop().await;
}

/// A tool call or an LLM answer that takes longer than the lease. A worker that holds a run
/// must keep its lease alive while it waits (a heartbeat renews it);
/// otherwise a second worker claims the run and executes the same step at the same time, and
/// with two workers the step ping-pongs until the run is dead-lettered (found by this test,
/// fixed by the runner's heartbeat; see RELIABILITY.md, 2.).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_longer_than_the_lease_keep_one_executor() {
    let Some(url) = database_url("long_calls").await else {
        return;
    };
    let runs = size("E2E_LONG_RUNS", 8, 40);
    let db = TestDb::create(&url, "long").await;
    create_runs(&db, 0, runs).await;
    let mut procs = Vec::new();
    for name in ["slow-a", "slow-b"] {
        let mut o = WorkerOpts::new(&url, &db.schema, name);
        o.lease_ms = 1_000;
        o.poll_ms = 100;
        o.concurrency = 4;
        o.tool_latency = (1_500, 1_800);
        o.llm_latency = (1_500, 1_800);
        o.exit_when_done = runs;
        procs.push(WorkerProc::spawn(Path::new(BIN), &o));
    }
    let finished = wait_all_final(&db, runs, Duration::from_mins(3)).await;
    let mut reports = Vec::new();
    for p in procs {
        let (_, r) = p.stop(Duration::from_secs(30));
        reports.push(r);
    }
    assert!(finished, "runs still open");
    let report = check(
        &db.pool,
        &Expect {
            runs,
            ..Expect::default()
        },
    )
    .await;
    println!(
        "calls longer than the lease (1000 ms lease, 1500-1800 ms calls): steps executed by two \
         workers {}, questions asked twice {}, executions deduplicated {}; workers {reports:?}",
        report.steps_taken_over, report.reasked, report.deduplicated
    );
    println!("  check: {report:?}");
    report.assert_clean();
    assert_eq!(
        report.steps_taken_over, 0,
        "a live worker's step was taken over"
    );
    db.drop().await;
}
