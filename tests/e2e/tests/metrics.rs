//! A real Prometheus scrapes a worker process's `/metrics` while it drives runs to their
//! end; the test then asks Prometheus's HTTP API (`/api/v1/query`) what it stored: the
//! step counter, a bucket of the step latency histogram, and the runs by status read from
//! the store. Skipped with a message when Prometheus is not installed (`scripts/prometheus`
//! installs it), failed under CI.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::brokers::Broker;
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, wait_all_final};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");
const RUNS: u64 = 12;
/// [`RUNS`] as Prometheus counts: a float.
const RUNS_F: f64 = 12.0;

/// `text` percent-encoded for a URL's query (reqwest is built without its `query`
/// feature).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of `query` once Prometheus answers it with one series whose value satisfies
/// `ready` (it has scraped recently enough), else the last answer, as an error.
async fn query_until(
    client: &reqwest::Client,
    prometheus: &str,
    query: &str,
    ready: impl Fn(f64) -> bool,
) -> Result<f64, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: Result<Value, String> = async {
            let response = client
                .get(format!(
                    "{prometheus}/api/v1/query?query={}",
                    encoded(query)
                ))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let text = response.text().await.map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
        }
        .await;
        let value = answer.as_ref().ok().and_then(|a| {
            let result = a["data"]["result"].as_array()?;
            let [series] = result.as_slice() else {
                return None;
            };
            series["value"][1].as_str()?.parse::<f64>().ok()
        });
        match value {
            Some(v) if ready(v) => return Ok(v),
            _ if Instant::now() > deadline => {
                return Err(format!("`{query}` was answered {answer:?}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_a_workers_steps_and_their_latency() {
    let Some(url) = database_url("metrics").await else {
        return;
    };
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let Some(prometheus) = Broker::prometheus("metrics", SocketAddr::from(([127, 0, 0, 1], port)))
    else {
        return;
    };
    let db = TestDb::create(&url, "metrics").await;
    create_runs(&db, 0, RUNS).await;
    let mut opts = WorkerOpts::new(&url, &db.schema, "metrics-w1");
    opts.metrics_port = Some(port);
    let worker = WorkerProc::spawn(Path::new(BIN), &opts);
    assert!(
        wait_all_final(&db, RUNS, Duration::from_mins(2)).await,
        "the runs did not finish"
    );

    // Plain HTTP on loopback, but reqwest wants a TLS provider to build a client.
    #[allow(deprecated, reason = "ring is the provider sqlx compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let base = prometheus.url();
    // Every run takes at least three steps (Start, Decide, Pay or a compensating end).
    let steps = query_until(
        &client,
        &base,
        "sum(durable_agents_steps_total{agent=\"Shop\"})",
        |n| n >= 3.0 * RUNS_F,
    )
    .await
    .unwrap_or_else(|e| panic!("the step counter: {e}"));
    let at_least = |min: f64| -> Box<dyn Fn(f64) -> bool> { Box::new(move |n| n >= min) };
    let checks = [
        (
            "steps of `Start`",
            "sum(durable_agents_steps_total{agent=\"Shop\",state=\"Start\"})",
            at_least(RUNS_F),
        ),
        // Every step of the shop takes less than a minute: the `le="60"` bucket counts
        // them all, and the histogram's count agrees with the counter.
        (
            "steps within a minute",
            "sum(durable_agents_step_duration_seconds_bucket{agent=\"Shop\",le=\"60\"})",
            at_least(steps),
        ),
        (
            "steps in the histogram",
            "sum(durable_agents_step_duration_seconds_count{agent=\"Shop\"})",
            at_least(steps),
        ),
        // The gauges read from the store: every run is final, none is left to run.
        (
            "final runs",
            "sum(durable_agents_runs{agent=\"Shop\",status=~\"completed|compensated|failed\"})",
            at_least(RUNS_F),
        ),
        (
            "queue depth",
            "sum(durable_agents_queue_depth{agent=\"Shop\"})",
            Box::new(|n| n == 0.0),
        ),
        (
            "asks of the model",
            "sum(durable_agents_model_asks_total{agent=\"Shop\"})",
            at_least(RUNS_F),
        ),
        // Two asks a run at least (which tool, then which way), each priced.
        (
            "model spend, in millionths of a dollar",
            "sum(durable_agents_model_cost_microunits_total{agent=\"Shop\",currency=\"USD\"})",
            at_least(RUNS_F * 2.0 * e2e::shop::ASK_COST * 1e6),
        ),
    ];
    eprintln!("prometheus read: {steps} steps");
    for (what, query, ready) in checks {
        let value = query_until(&client, &base, query, ready)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        eprintln!("prometheus read: {value} {what}");
    }
    // No series carries a run id: the shop's run ids start with `order-`.
    let series: Value = client
        .get(format!(
            "{base}/api/v1/series?match[]={}",
            encoded("{__name__=~\"durable_agents_.+\"}")
        ))
        .send()
        .await
        .expect("series")
        .json()
        .await
        .expect("series JSON");
    let listed = series["data"].as_array().expect("a list of series");
    assert!(!listed.is_empty(), "no durable_agents series: {series}");
    let run_ids: Vec<String> = (0..RUNS).map(e2e::shop::run_id).collect();
    for labels in listed {
        let text = labels.to_string();
        assert!(
            !run_ids.iter().any(|id| text.contains(id.as_str())),
            "a series carries a run id: {text}"
        );
    }

    let _ = worker.stop(Duration::from_secs(20));
    db.drop().await;
}
