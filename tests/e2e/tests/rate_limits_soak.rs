//! Issue 42, rate limits shared by every worker: three worker processes ask a model through
//! the real OpenAI router under one limit kept in the store, against a provider stand-in
//! (`e2e::limited::Provider`) that enforces its own limit with 429s. One process is killed
//! with SIGKILL and replaced at a third of the runs; at two thirds the provider has an
//! outage of 429s with `retry-after-ms`.
//!
//! What must hold:
//! - every run completes, and the stand-in answered each run's question once, but for the
//!   questions whose answer the killed process had not committed (at most its runs in
//!   flight);
//! - the workers together never ask faster than the limit's promise (burst 1 + the rate
//!   over any window), measured where the requests arrive: the stand-in refuses none for
//!   its own limit, which allows a quarter more than the rate for the time between a turn
//!   and its request's arrival;
//! - the outage is waited out: each run asked into it is refused once (its 429's
//!   `retry-after-ms` pauses the limit for every worker, and its next ask comes after the
//!   outage), the refusals are at most the turns that fell in it (the rate over its length,
//!   with the same quarter for arrival), and no run fails for them.

#![allow(clippy::cast_precision_loss)] // figures printed, of a few thousand runs

use std::path::Path;
use std::time::{Duration, Instant};

use agent_core::runner::RunnerConfig;
use agent_core::store::Store;
use e2e::db::{TestDb, database_url};
use e2e::limited::{self, Provider, Quote};
use e2e::procs::{Agents, LimitedOpts, WorkerOpts, WorkerProc, wait_all_final};
use e2e::size;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");
const PROCESSES: usize = 3;
const IN_FLIGHT: usize = 16;

async fn completed(db: &TestDb) -> u64 {
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM runs WHERE status = 'completed'")
        .fetch_one(&db.pool)
        .await
        .expect("count the completed runs");
    u64::try_from(n).unwrap_or(0)
}

async fn wait_completed(db: &TestDb, at_least: u64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while completed(db).await < at_least {
        assert!(
            Instant::now() < deadline,
            "fewer than {at_least} runs completed after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn opts(
    url: &str,
    db: &TestDb,
    worker: &str,
    base: &str,
    per_second: u64,
    runs: u64,
) -> WorkerOpts {
    let mut o = WorkerOpts::new(url, &db.schema, worker);
    o.agents = Agents::Limited;
    o.limited = Some(LimitedOpts {
        base: base.to_owned(),
        per_second: Some(per_second),
    });
    o.concurrency = IN_FLIGHT;
    o.store_pool = 4;
    o.service_pool = 2;
    o.exit_when_done = runs;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_a_providers_limit_through_a_kill_and_an_outage() {
    let Some(url) = database_url("rate_limits_soak").await else {
        return;
    };
    let runs = size("E2E_RL_RUNS", 300, 2_000);
    let per_second = size("E2E_RL_PER_SECOND", 25, 50);
    let db = TestDb::create(&url, "rl").await;
    // The promise is burst (1) + the rate in any second; a quarter more for the time between
    // a worker's turn and its request's arrival at the provider.
    let allowed = usize::try_from(per_second + 1 + per_second / 4).expect("small");
    let provider = Provider::new(allowed, Duration::from_secs(1));
    let base = provider.serve().await;

    let store: std::sync::Arc<dyn Store> = db.store.clone();
    let starter = limited::runner(store, &base, None, RunnerConfig::default());
    for i in 0..runs {
        let id = limited::run_id(i);
        (starter.start(&id, Quote::Ask { quote: id.clone() }))
            .await
            .unwrap_or_else(|e| panic!("start {id}: {e}"));
    }

    let began = Instant::now();
    let mut procs: Vec<WorkerProc> = (0..PROCESSES)
        .map(|i| {
            let o = opts(&url, &db, &format!("proc-{i}"), &base, per_second, runs);
            WorkerProc::spawn(Path::new(BIN), &o)
        })
        .collect();
    // The asks take at least runs / per_second seconds; give them five times that.
    let budget = Duration::from_secs(runs / per_second * 5 + 60);

    wait_completed(&db, runs / 3, budget).await;
    procs[0].kill9();
    let killed_at = completed(&db).await;
    let replacement = opts(&url, &db, "proc-0-again", &base, per_second, runs);
    procs.push(WorkerProc::spawn(Path::new(BIN), &replacement));

    wait_completed(&db, runs * 2 / 3, budget).await;
    let outage = Duration::from_secs(1);
    provider.outage(outage);
    let outage_at = completed(&db).await;

    let done = wait_all_final(&db, runs, budget).await;
    let wall = began.elapsed();
    let mut reports = Vec::new();
    for p in procs.into_iter().skip(1) {
        let (code, report) = p.wait_report(Duration::from_secs(30));
        assert_eq!(code, Some(0), "a worker process failed");
        reports.push(report.expect("the worker process printed its report"));
    }
    assert!(done, "runs still open after {budget:?}");

    let seen = provider.seen();
    let (accepted,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM runs WHERE status = 'completed' AND state_name = 'Accepted'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count the accepted runs");
    let answered: u64 = seen.answers.values().sum();
    let asked_again = answered.saturating_sub(runs);
    let ideal = runs as f64 / per_second as f64;
    println!(
        "rate limits soak: {runs} runs, {PROCESSES} worker processes x {IN_FLIGHT} in flight, \
         limit {per_second}/s: wall {:.1} s (the limit alone needs {ideal:.1} s); busiest second \
         {} answers (promise {}); refused for the provider's own limit {}; outage 429s {} \
         (at most {} a run); asked again after the kill {asked_again}; killed at {killed_at} \
         done, outage at {outage_at} done",
        wall.as_secs_f64(),
        seen.busiest,
        per_second + 1,
        seen.over_limit,
        seen.in_outage,
        seen.most_outage_refusals,
    );
    for r in &reports {
        println!(
            "  {}: driven {} leases lost {} errors {}",
            r.worker_id, r.runs_driven, r.leases_lost, r.errors
        );
    }

    assert_eq!(
        u64::try_from(accepted).unwrap_or(0),
        runs,
        "every run completes as the model chose"
    );
    let unanswered: Vec<String> = (0..runs)
        .map(limited::run_id)
        .filter(|id| !seen.answers.contains_key(id))
        .collect();
    assert!(unanswered.is_empty(), "never asked: {unanswered:?}");
    assert!(
        asked_again <= IN_FLIGHT as u64,
        "{asked_again} questions asked twice: only the killed process's runs in flight \
         ({IN_FLIGHT}) may be"
    );
    assert_eq!(
        seen.over_limit, 0,
        "the workers asked faster than the shared limit allows (busiest second: {})",
        seen.busiest
    );
    assert!(seen.in_outage > 0, "the outage was never met");
    assert_eq!(
        seen.most_outage_refusals, 1,
        "a run asked into the outage again before it ended"
    );
    let turns_in_outage = per_second * outage.as_secs() * 5 / 4 + 1;
    assert!(
        seen.in_outage <= turns_in_outage,
        "{} 429s in a {outage:?} outage, more than the {turns_in_outage} turns in it",
        seen.in_outage
    );
    db.drop().await;
}

/// The cost of the limits when they do not bind: the same runs asked through an in-process
/// worker with a limit far above the rate they reach (each ask then takes its turn, one
/// atomic update of the limit's row) and without one, in alternated rounds. It prints the
/// medians and their ratio, for `BENCHMARKS.md`; what it asserts is that both complete
/// every run with one answer each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_with_a_limit_that_does_not_bind_and_without() {
    let Some(url) = database_url("rate_limits_throughput").await else {
        return;
    };
    let runs = size("E2E_RL_THROUGHPUT_RUNS", 200, 2_000);
    let rounds = size("E2E_RL_ROUNDS", 2, 5);
    let provider = Provider::new(usize::MAX, Duration::from_secs(1));
    let base = provider.serve().await;
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (with_limit, sample) in times.iter_mut().enumerate() {
            let db = TestDb::create(&url, "rlt").await;
            let store: std::sync::Arc<dyn Store> = db.store.clone();
            let limit = (with_limit == 1).then(|| limited::limit(1_000_000));
            let config = RunnerConfig {
                worker_id: format!("bench-{round}-{with_limit}"),
                ..RunnerConfig::default()
            };
            let runner = limited::runner(store, &base, limit, config);
            for i in 0..runs {
                let id = format!("{}-r{round}", limited::run_id(i));
                (runner.start(&id, Quote::Ask { quote: id.clone() }))
                    .await
                    .unwrap_or_else(|e| panic!("start {id}: {e}"));
            }
            let started = Instant::now();
            let worker = agent_core::runner::Worker::new(
                runner,
                agent_core::runner::WorkerConfig {
                    concurrency: IN_FLIGHT,
                    ..agent_core::runner::WorkerConfig::default()
                },
            );
            let db_ref = &db;
            worker
                .run_until(async move {
                    while completed(db_ref).await < runs {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await;
            sample.push(started.elapsed().as_secs_f64());
            assert_eq!(completed(&db).await, runs, "every run completes");
            db.drop().await;
        }
    }
    let seen = provider.seen();
    let answered: u64 = seen.answers.values().sum();
    assert_eq!(answered, runs * rounds * 2, "one answer per run");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut without, mut with] = times;
    let (without, with) = (median(&mut without), median(&mut with));
    println!(
        "rate limits throughput: {runs} runs x {rounds} rounds, {IN_FLIGHT} in flight, in \
         process: without a limit {:.0} runs/s, with one that does not bind {:.0} runs/s \
         (with / without: {:.2})",
        runs as f64 / without,
        runs as f64 / with,
        without / with
    );
}
