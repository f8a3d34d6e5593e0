//! Issue 7, item 4: network faults between a worker and PostgreSQL, through the harness's
//! TCP proxy. One worker process reaches the store through the proxy, another directly (the
//! fake service is reached directly by both). Faults, in turn: a blackhole longer than the
//! lease, added latency, connection resets, results cut mid-message. Pass: the direct worker
//! takes the cut-off worker's runs over within the lease bound, the cut-off worker's stale
//! writes are rejected when the network heals, in-flight tool calls are deduplicated by
//! key, no worker process exits, every invariant holds.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, held_runs, recovery_times, wait_all_final};
use e2e::proxy::Proxy;
use e2e::stats::Summary;
use e2e::{now_ms, size};
use sqlx::postgres::PgConnectOptions;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

async fn open_runs(db: &TestDb) -> i64 {
    sqlx::query_as::<_, (i64,)>(
        "SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'compensated')",
    )
    .fetch_one(&db.pool)
    .await
    .map_or(-1, |r| r.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn network_faults_between_worker_and_database() {
    let Some(url) = database_url("network").await else {
        return;
    };
    let opts = PgConnectOptions::from_str(&url).expect("DATABASE_URL parses");
    let upstream = format!("{}:{}", opts.get_host(), opts.get_port());
    let runs = size("E2E_NET_RUNS", 1_500, 10_000);
    let lease_ms = 1_500;
    let poll_ms = 100;
    let db = TestDb::create(&url, "net").await;
    create_runs(&db, 0, runs).await;
    let proxy = Proxy::start(upstream).await;

    let worker = |id: &str, store_url: &str| {
        let mut o = WorkerOpts::new(&url, &db.schema, id);
        o.url = store_url.to_owned();
        o.lease_ms = lease_ms;
        o.poll_ms = poll_ms;
        o.tool_latency = (50, 200);
        o
    };
    let cut_off = worker("net-proxied", &proxy.url_for(&url));
    let mut w1 = WorkerProc::spawn(Path::new(BIN), &cut_off);
    let mut w2 = WorkerProc::spawn(Path::new(BIN), &worker("net-direct", &url));
    let started = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_runs(&db.pool, "net-proxied").await.len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Steady state: calls in flight at every point of a step.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Blackhole longer than the lease.
    let open_at_blackhole = open_runs(&db).await;
    let t_b = now_ms();
    proxy.blackhole(true);
    let held = held_runs(&db.pool, "net-proxied").await;
    tokio::time::sleep(Duration::from_millis(2 * lease_ms + 500)).await;
    proxy.blackhole(false);
    let takeovers = recovery_times(&db.pool, t_b, &held).await;
    let lease_left: Vec<i64> = held.iter().map(|h| h.lease_expires_ms - t_b).collect();

    // Added latency.
    let open_at_latency = open_runs(&db).await;
    proxy.set_latency(20);
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_latency(0);

    // Resets.
    let open_at_reset = open_runs(&db).await;
    for _ in 0..3 {
        proxy.reset_all();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Results cut mid-message (acknowledgements lost).
    let open_at_cut = open_runs(&db).await;
    proxy.set_cut_every(25);
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_cut_every(0);
    let cuts = proxy.cuts.load(std::sync::atomic::Ordering::SeqCst);

    let finished = wait_all_final(&db, runs, Duration::from_mins(5)).await;
    let wall = started.elapsed();
    let alive = (w1.alive(), w2.alive());
    let (c1, r1) = w1.stop(Duration::from_secs(30));
    let (c2, r2) = w2.stop(Duration::from_secs(30));
    assert!(finished, "runs still open after the faults");
    assert_eq!(
        alive,
        (true, true),
        "a worker process exited during the faults"
    );
    assert_eq!((c1, c2), (Some(0), Some(0)), "a worker exited badly");
    let (r1, r2) = (r1.expect("report"), r2.expect("report"));

    let report = check(
        &db.pool,
        &Expect {
            runs,
            crashed_workers: HashSet::from(["net-proxied".to_owned()]),
            ..Expect::default()
        },
    )
    .await;
    let took = Summary::of(&takeovers);
    println!(
        "network faults: {runs} runs, lease {lease_ms} ms, poll {poll_ms} ms, in {:.1} s; \
         open runs at blackhole/latency/reset/cut: {open_at_blackhole}/{open_at_latency}/\
         {open_at_reset}/{open_at_cut}; blackhole {} ms held {} runs, lease left {}, takeover \
         by the direct worker {took}; {cuts} results cut; proxied worker: leases lost {} \
         (stale writes rejected), errors {}; direct worker: leases lost {}, errors {}; \
         executions deduplicated by key {}; questions asked again {}",
        wall.as_secs_f64(),
        2 * lease_ms + 500,
        held.len(),
        Summary::of(&lease_left),
        r1.leases_lost,
        r1.errors,
        r2.leases_lost,
        r2.errors,
        report.deduplicated,
        report.reasked,
    );
    println!("  check: {report:?}");
    report.assert_clean();
    assert!(
        !held.is_empty(),
        "the proxied worker held nothing at the blackhole"
    );
    assert_eq!(took.n, held.len(), "a held run was never taken over");
    let bound = i64::try_from(lease_ms + poll_ms).unwrap_or(i64::MAX) + 2_000;
    assert!(
        took.max <= bound,
        "takeover took {} ms, more than lease + poll + 2 s ({bound} ms)",
        took.max
    );
    assert!(
        r1.leases_lost >= 1,
        "the cut-off worker's stale writes were not rejected: {r1:?}"
    );
    db.drop().await;
}
