//! Issue 4, "Multi-worker test on PostgreSQL": four workers (two of them separate OS
//! processes) share 1,000 runs of the shop agent; every run completes exactly once, no
//! version chain forks, every write effect is applied exactly once. A few runs have a
//! corrupted state row and must be quarantined without a tool call (invariant 6).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, run_worker, wait_all_final};
use e2e::{shop, size};

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_share_runs_exactly_once() {
    let Some(url) = database_url("multi_worker").await else {
        return;
    };
    let runs = size("E2E_MW_RUNS", 1_000, 1_000);
    let in_flight = size("E2E_MW_IN_FLIGHT", 64, 256);
    let db = TestDb::create(&url, "mw").await;
    create_runs(&db, 0, runs).await;
    let corrupted: HashSet<String> = (0..runs)
        .step_by(usize::try_from(runs / 5).unwrap_or(200).max(1))
        .map(shop::run_id)
        .collect();
    for id in &corrupted {
        sqlx::query(r#"UPDATE runs SET state = '{"Start": 42}' WHERE id = $1"#)
            .bind(id)
            .execute(&db.pool)
            .await
            .expect("corrupt a run");
    }

    let started = Instant::now();
    let mut procs = Vec::new();
    for i in 0..2 {
        let mut o = WorkerOpts::new(&url, &db.schema, &format!("proc-{i}"));
        o.concurrency = usize::try_from(in_flight).unwrap_or(64);
        o.store_pool = 8;
        o.exit_when_done = runs;
        procs.push(WorkerProc::spawn(Path::new(BIN), &o));
    }
    let mut local = Vec::new();
    for i in 0..2 {
        let mut o = WorkerOpts::new(&url, &db.schema, &format!("local-{i}"));
        o.exit_when_done = runs;
        local.push(tokio::spawn(async move {
            run_worker(&o, std::future::pending()).await
        }));
    }
    let done = wait_all_final(&db, runs, Duration::from_mins(5)).await;
    let wall = started.elapsed();
    let mut reports = Vec::new();
    for p in procs {
        let (code, report) = p.wait_report(Duration::from_secs(30));
        assert_eq!(code, Some(0), "a worker process failed");
        reports.push(report.expect("the worker process printed its report"));
    }
    for l in local {
        reports.push(l.await.expect("in-process worker"));
    }
    assert!(done, "runs still open after 300 s");

    let report = check(
        &db.pool,
        &Expect {
            runs,
            corrupted: corrupted.clone(),
            ..Expect::default()
        },
    )
    .await;
    let driven: u64 = reports.iter().map(|r| r.runs_driven).sum();
    println!(
        "multi-worker: {runs} runs, 4 workers (2 processes x {in_flight} in flight, 2 \
         in-process x 16): wall {:.2} s, {:.0} runs/s",
        wall.as_secs_f64(),
        f64::from(u32::try_from(runs).unwrap_or(u32::MAX)) / wall.as_secs_f64()
    );
    for r in &reports {
        println!(
            "  {}: driven {} leases lost {} errors {} peak RSS {} KiB",
            r.worker_id, r.runs_driven, r.leases_lost, r.errors, r.vm_hwm_kb
        );
    }
    println!("  check: {report:?}");
    report.assert_clean();
    assert_eq!(report.reasked, 0, "no crash, so no question asked twice");
    assert_eq!(
        report.steps_taken_over, 0,
        "no crash, so no step re-executed"
    );
    assert!(driven >= runs, "every run driven ({driven} < {runs})");
    assert!(
        reports.iter().filter(|r| r.runs_driven > 0).count() >= 3,
        "the runs were shared: {reports:?}"
    );
    db.drop().await;
}
