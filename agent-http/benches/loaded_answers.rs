//! Whether a trivial request is still answered quickly while other clients send the most
//! expensive requests the API allows, against a store with many runs: on SQLite, and on
//! PostgreSQL when `DATABASE_URL` is set, in one run of this program.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo bench -p durable-agents-http --bench loaded_answers
//! ```
//!
//! `BENCH_RUNS` sets the number of runs (20,000 by default; CI-sized), `BENCH_CLIENTS` the
//! number of clients sending expensive requests (8), `BENCH_STORES` the stores
//! (`sqlite,postgres`); `BENCH_KEEP_SCHEMA=1` keeps PostgreSQL's schema to look into. The
//! server runs as `agentctl serve` runs it, on a multi-threaded runtime of its own (its own
//! OS threads); the clients on another.
//!
//! Printed per store: the answer time of `GET /v1/runs/{id}` with no other client (idle)
//! and while the clients loop over the expensive requests (loaded), p50 and p99 of 400
//! requests each, their ratios, and each expensive request's mean answer time and count.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_core::store::{Claimed, NewRun, RunFilter, RunStatus, StepCommit, Store, TransitionKind};
use agent_http::ApiConfig;
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde_json::json;
use tokio::task::JoinSet;

extern crate durable_agents_http as agent_http;

const SAMPLES: usize = 400;
/// Versions of the one long run (history and journal pages, its inspector page).
const LONG_RUN_VERSIONS: u64 = 1500;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn commit(expected: u64) -> StepCommit {
    StepCommit {
        expected_version: expected,
        from_state: "Working".into(),
        to_state: "Working".into(),
        state: json!({ "Working": { "step": expected + 1, "notes": "some text of a step" } }),
        kind: TransitionKind::Step,
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    }
}

/// `runs` runs of three agents with labels, created by 32 tasks at once; one run in ten
/// commits three steps (events beyond the starts), one in five fails, and one long run
/// commits `LONG_RUN_VERSIONS` steps.
async fn seed(store: &Arc<dyn Store>, runs: usize) {
    let mut set = JoinSet::new();
    let tasks = 32;
    for t in 0..tasks {
        let store = Arc::clone(store);
        set.spawn(async move {
            for i in (t..runs).step_by(tasks) {
                let id = format!("run-{i:06}");
                let agent = ["Checkout", "Support", "Refund"][i % 3];
                let new = NewRun::new(&id, agent, "fp", "Working", json!({"Working": {"step": 0}}))
                    .with_label("tenant", format!("t{}", i % 50));
                store.create_run(new).await.expect("create");
                if i % 10 == 0 {
                    let Claimed { lease, .. } =
                        (store.claim_run(&id, "seed", Duration::from_mins(10)))
                            .await
                            .expect("claim")
                            .expect("free");
                    for v in 0..3 {
                        store
                            .commit_step(&lease, &commit(v), &[])
                            .await
                            .expect("commit");
                    }
                    store.release_lease(&lease).await.expect("release");
                }
                if i % 5 == 1 {
                    store
                        .set_status(&id, RunStatus::Failed, None)
                        .await
                        .expect("fail");
                }
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.expect("seed task");
    }
    let id = "long-run";
    store
        .create_run(NewRun::new(
            id,
            "Checkout",
            "fp",
            "Working",
            json!({"Working": {"step": 0}}),
        ))
        .await
        .expect("create");
    let Claimed { lease, .. } = (store.claim_run(id, "seed", Duration::from_mins(10)))
        .await
        .expect("claim")
        .expect("free");
    for v in 0..LONG_RUN_VERSIONS {
        store
            .commit_step(&lease, &commit(v), &[])
            .await
            .expect("commit");
    }
    store.release_lease(&lease).await.expect("release");
}

/// The API on a runtime and OS threads of its own, as `agentctl serve` runs it.
fn serve(store: Arc<dyn Store>) -> (String, tokio::sync::oneshot::Sender<()>) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let base = format!("http://{}", std_listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            agent_http::serve_on(store, ApiConfig::default(), listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
        });
    });
    (base, stop)
}

/// p50 and p99 of `samples`, in milliseconds.
fn quantiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    let at = |percent: usize| {
        let i = (samples.len() - 1) * percent / 100;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(50), at(99))
}

/// `SAMPLES` trivial requests one after the other.
async fn trivial(http: &reqwest::Client, url: &str) -> Vec<Duration> {
    let mut out = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let resp = http.get(url).send().await.expect("trivial request");
        assert_eq!(resp.status(), 200);
        resp.bytes().await.expect("body");
        out.push(started.elapsed());
    }
    out
}

#[allow(clippy::cast_precision_loss)] // counts and times printed as floats
async fn measure(
    kind: &str,
    store: Arc<dyn Store>,
    pg: Option<&PgStore>,
    runs: usize,
    clients: usize,
) {
    let seeded = Instant::now();
    seed(&store, runs).await;
    let seeding = seeded.elapsed();
    if let Some(pg) = pg {
        // The statistics autovacuum would gather on a store in use: without them, the
        // planner of a schema filled a minute ago takes its tables for empty.
        sqlx::query("ANALYZE")
            .execute(pg.pool())
            .await
            .expect("analyze");
    }
    // A cursor to the middle of the listing: the most a page skips.
    let middle = store
        .list_runs(&RunFilter {
            limit: Some(runs / 2),
            ..RunFilter::default()
        })
        .await
        .expect("list");
    let middle = middle.last().expect("runs");
    let mut cursor = format!("r1.{}.", middle.created_at);
    for b in middle.id.bytes() {
        use std::fmt::Write as _;
        let _ = write!(cursor, "{b:02x}");
    }
    let head = store.event_head().await.expect("head").get();
    let (base, stop) = serve(Arc::clone(&store));
    // reqwest's TLS wants a crypto provider even for plain HTTP.
    #[allow(deprecated, reason = "ring is the provider sqlx compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");
    let trivial_url = format!("{base}/v1/runs/run-000007");
    // Warm both sides up.
    trivial(&http, &trivial_url).await;
    let idle = trivial(&http, &trivial_url).await;

    let expensive: Vec<(&str, String)> = vec![
        ("runs, a page of 500", format!("{base}/v1/runs?limit=500")),
        (
            "runs, 500 from the middle",
            format!("{base}/v1/runs?limit=500&cursor={cursor}"),
        ),
        (
            "runs, 500 failed from the middle",
            format!("{base}/v1/runs?limit=500&status=failed&cursor={cursor}"),
        ),
        (
            "runs, 500 of one label",
            format!("{base}/v1/runs?limit=500&label=tenant=t7"),
        ),
        (
            "events, 1000 from the start",
            format!("{base}/v1/events?limit=1000"),
        ),
        (
            "events, 1000 from the middle",
            format!("{base}/v1/events?limit=1000&after={}", head / 2),
        ),
        (
            "events of an agent, 1000",
            format!("{base}/v1/events?agent=Refund&limit=1000"),
        ),
        (
            "a run's events, 1000",
            format!("{base}/v1/runs/long-run/events?limit=1000"),
        ),
        (
            "history, 1000",
            format!("{base}/v1/runs/long-run/history?limit=1000&from=200"),
        ),
        (
            "journal, 1000",
            format!("{base}/v1/runs/long-run/journal?limit=1000"),
        ),
        ("inspector runs page", format!("{base}/ui/?limit=500")),
        ("inspector run page", format!("{base}/ui/runs/long-run")),
    ];
    let stop_load = Arc::new(AtomicBool::new(false));
    let mut load = JoinSet::new();
    for c in 0..clients {
        let http = http.clone();
        let expensive = expensive.clone();
        let stop_load = Arc::clone(&stop_load);
        load.spawn(async move {
            let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
            let mut i = c;
            while !stop_load.load(Ordering::Relaxed) {
                let (name, url) = &expensive[i % expensive.len()];
                i += 1;
                let started = Instant::now();
                let resp = http.get(url).send().await.expect("expensive request");
                let status = resp.status();
                resp.bytes().await.expect("body");
                assert!(status.is_success(), "{name}: {status}");
                times.entry(name).or_default().push(started.elapsed());
            }
            times
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded_from = Instant::now();
    let loaded = trivial(&http, &trivial_url).await;
    let loaded_for = loaded_from.elapsed();
    stop_load.store(true, Ordering::Relaxed);
    let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    while let Some(done) = load.join_next().await {
        for (name, t) in done.expect("load task") {
            times.entry(name).or_default().extend(t);
        }
    }
    let _ = stop.send(());

    let (idle50, idle99) = quantiles(idle);
    let (load50, load99) = quantiles(loaded);
    println!(
        "\n{kind}: {runs} runs (+1 of {LONG_RUN_VERSIONS} versions), seeded in {:.1} s, \
         {clients} clients sending the expensive requests",
        seeding.as_secs_f64()
    );
    println!("  GET /v1/runs/{{id}} idle:   p50 {idle50:7.2} ms  p99 {idle99:7.2} ms");
    println!("  GET /v1/runs/{{id}} loaded: p50 {load50:7.2} ms  p99 {load99:7.2} ms");
    println!(
        "  loaded / idle:           p50 {:7.1}x    p99 {:7.1}x",
        load50 / idle50,
        load99 / idle99
    );
    let total: usize = times.values().map(Vec::len).sum();
    println!(
        "  expensive requests answered while measuring and after: {total} \
         ({:.0}/s over the {:.1} s of the loaded samples)",
        total as f64 / (loaded_for.as_secs_f64() + 1.0),
        loaded_for.as_secs_f64()
    );
    for (name, t) in &times {
        let mean = t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len() as f64 * 1000.0;
        println!("    {name:<34} {:5} answered, mean {mean:8.1} ms", t.len());
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let runs = env_usize("BENCH_RUNS", 20_000);
    let clients = env_usize("BENCH_CLIENTS", 8);
    let stores = std::env::var("BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".into());
    let dir = tempfile::tempdir().expect("tempdir");
    if stores.contains("sqlite") {
        let lite = SqliteStore::open(dir.path().join("runs.sqlite3"))
            .await
            .expect("open SQLite");
        measure("SQLite", Arc::new(lite), None, runs, clients).await;
    }
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() && stores.contains("postgres") => {
            let schema = format!("bench_loaded_{}", uuid::Uuid::new_v4().simple());
            let pg = PgStore::connect(&url, &schema).await.expect("connect");
            pg.migrate().await.expect("migrate");
            let pg = Arc::new(pg);
            let store = Arc::clone(&pg) as Arc<dyn Store>;
            measure("PostgreSQL", store, Some(&pg), runs, clients).await;
            if std::env::var("BENCH_KEEP_SCHEMA").is_ok() {
                println!("  kept schema {schema}");
            } else {
                pg.drop_schema().await.expect("drop the schema");
            }
        }
        _ => println!("\nPostgreSQL: skipped (DATABASE_URL is not set)"),
    }
}
