//! Issue 7, item 3: PostgreSQL restarts under load. On a throwaway cluster of our own (never
//! the machine's server), worker processes drive the shop's runs while the test restarts
//! PostgreSQL with `pg_ctl restart -m immediate` at random intervals, then once with
//! `-m fast`. Pass: every run completes, no worker process exits, every invariant holds;
//! the reconnect time (server ready to the next commit) is reported.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::check::{Expect, check};
use e2e::db::{Cluster, TestDb, unavailable};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, wait_all_final};
use e2e::stats::Summary;
use e2e::{now_ms, size};
use rand::Rng;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn postgres_restarts_under_load() {
    let cluster = match tokio::task::spawn_blocking(|| Cluster::start(&target_dir()))
        .await
        .expect("cluster task")
    {
        Ok(c) => Arc::new(c),
        Err(e) => {
            unavailable("postgres_restarts_under_load", &e);
            return;
        }
    };
    let url = cluster.url();
    let runs = size("E2E_PGR_RUNS", 2_000, 10_000);
    let restarts = size("E2E_PGR_RESTARTS", 4, 20);
    let db = TestDb::create(&url, "pgr").await;
    create_runs(&db, 0, runs).await;
    let mut procs = Vec::new();
    for i in 0..2 {
        let mut o = WorkerOpts::new(&url, &db.schema, &format!("pgr-{i}"));
        o.lease_ms = 2_000;
        o.poll_ms = 100;
        o.tool_latency = (5, 20);
        procs.push(WorkerProc::spawn(Path::new(BIN), &o));
    }
    let started = Instant::now();
    let mut windows = Vec::new();
    for i in 0..=restarts {
        let wait = rand::rng().random_range(300..1_200);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let mode = if i == restarts { "fast" } else { "immediate" };
        let open: (i64,) = sqlx::query_as(
            "SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'compensated')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap_or((-1,));
        let c = Arc::clone(&cluster);
        let t0 = now_ms();
        let took = tokio::task::spawn_blocking(move || {
            c.pg_ctl(&["restart", "-m", mode, "-w", "-t", "60"])
        })
        .await
        .expect("pg_ctl task")
        .unwrap_or_else(|e| panic!("{e}"));
        let t1 = now_ms();
        windows.push((mode, t0, t1, open.0, took));
    }
    let finished = wait_all_final(&db, runs, Duration::from_mins(5)).await;
    let wall = started.elapsed();
    let mut exited = Vec::new();
    for p in &mut procs {
        if !p.alive() {
            exited.push(p.opts.worker_id.clone());
        }
    }
    let mut reports = Vec::new();
    for p in procs {
        let (code, r) = p.stop(Duration::from_secs(30));
        assert_eq!(code, Some(0), "a worker exited badly");
        reports.push(r.expect("worker report"));
    }
    assert!(finished, "runs still open after the restarts");
    assert!(exited.is_empty(), "worker processes exited: {exited:?}");

    // A fresh pool: the test's own connections died with the server.
    let pool = e2e::db::pool(&url, &db.schema, 4).await.expect("reconnect");
    let mut reconnect = Vec::new();
    let mut outage = Vec::new();
    for (mode, t0, t1, open, took) in &windows {
        let next: (Option<i64>,) = sqlx::query_as(
            "SELECT min(ts_to_ms(created_at)) FROM transitions WHERE ts_to_ms(created_at) > $1",
        )
        .bind(t1)
        .fetch_one(&pool)
        .await
        .expect("next commit");
        let r = next.0.map(|n| n - t1);
        println!(
            "  restart -m {mode}: {open} runs open, pg_ctl took {} ms, first commit {} ms after \
             the server was ready",
            took.as_millis(),
            r.map_or_else(|| "never".to_owned(), |v| v.to_string())
        );
        if *open > 0 {
            outage.push(t1 - t0);
            if let Some(r) = r {
                reconnect.push(r);
            }
        }
    }
    let workers: HashSet<String> = reports.iter().map(|r| r.worker_id.clone()).collect();
    let report = check(
        &pool,
        &Expect {
            runs,
            // An answer whose journal write met the restart is asked again; allowed, counted.
            crashed_workers: workers,
            ..Expect::default()
        },
    )
    .await;
    println!(
        "pg restarts: {runs} runs, 2 worker processes, lease 2000 ms, {} restarts ({restarts} \
         immediate + 1 fast) in {:.1} s; outage (pg_ctl restart) {}; reconnect (ready -> next \
         commit) {}; worker errors {} (runs resumed), leases lost {}; questions asked again {}; \
         executions deduplicated by key {}",
        windows.len(),
        wall.as_secs_f64(),
        Summary::of(&outage),
        Summary::of(&reconnect),
        reports.iter().map(|r| r.errors).sum::<u64>(),
        reports.iter().map(|r| r.leases_lost).sum::<u64>(),
        report.reasked,
        report.deduplicated,
    );
    println!("  check: {report:?}");
    report.assert_clean();
    assert!(
        windows.iter().filter(|w| w.3 > 0).count() >= 2,
        "too few restarts happened under load; raise E2E_PGR_RUNS"
    );
}
