//! Issue 44, traces: worker processes export their spans over OTLP to a real collector,
//! Arize Phoenix (PyPI `arize-phoenix`, found or installed by `scripts/phoenix`), and the
//! test reads them back through Phoenix's REST API. One worker is killed with SIGKILL in
//! the middle of runs and another takes them over: every run must still be one trace, its
//! spans children of the run's `invoke_agent` span, with steps from both workers in it.
//!
//! A second test runs a worker whose collector is down: its runs complete all the same.
//!
//! The first needs `PHOENIX_BIN` (`eval "$(scripts/phoenix)"`); skipped with a message without it,
//! failed under CI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_core::Agent as _;
use agent_core::store::Labels;
use agent_core::trace::RunTrace;
use e2e::brokers::free_port;
use e2e::db::{TestDb, ci, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, wait_all_final};
use e2e::shop;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

/// A Phoenix server on free ports with its own working directory, killed on drop.
struct Phoenix {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Phoenix {
    /// Start `PHOENIX_BIN serve`, or say why not (`None`; a failure under CI).
    async fn start(http: &reqwest::Client) -> Option<Self> {
        let Some(bin) = std::env::var_os("PHOENIX_BIN").filter(|b| !b.is_empty()) else {
            let why = "PHOENIX_BIN is not set; run `eval \"$(scripts/phoenix)\"` first";
            assert!(!ci(), "traces_phoenix: {why}");
            eprintln!("\n*** SKIPPED traces_phoenix: {why} ***\n");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = free_port();
        let child = Command::new(&bin)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", Path::new(&bin).display()));
        let phoenix = Self {
            child,
            port,
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            let up = http
                .get(phoenix.url("/v1/projects"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return Some(phoenix);
            }
            assert!(
                started.elapsed() < Duration::from_mins(4),
                "Phoenix did not answer within 4 minutes"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every span of the default project.
    async fn spans(&self, http: &reqwest::Client) -> Vec<Exported> {
        let mut spans = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = reqwest::Url::parse(&self.url("/v1/projects/default/spans"))
                .expect("Phoenix's URL");
            url.query_pairs_mut().append_pair("limit", "1000");
            if let Some(c) = &cursor {
                url.query_pairs_mut().append_pair("cursor", c);
            }
            let page: Value = http
                .get(url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .expect("Phoenix answers for the spans")
                .json()
                .await
                .expect("the spans as JSON");
            let data = page["data"].as_array().cloned().unwrap_or_default();
            spans.extend(data.iter().map(Exported::read));
            cursor = page["next_cursor"].as_str().map(str::to_owned);
            if cursor.is_none() || data.is_empty() {
                return spans;
            }
        }
    }
}

/// What the test reads of a span Phoenix received.
#[derive(Clone, Debug)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent_id: Option<String>,
    attributes: Value,
}

impl Exported {
    fn read(span: &Value) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            name: text(&span["name"]),
            trace_id: text(&span["context"]["trace_id"]),
            span_id: text(&span["context"]["span_id"]),
            parent_id: span["parent_id"].as_str().map(str::to_owned),
            attributes: span["attributes"].clone(),
        }
    }

    /// An attribute, whether Phoenix nests dotted keys or keeps them flat.
    fn attr(&self, key: &str) -> Option<String> {
        let flat = self.attributes.get(key);
        let nested = key
            .split('.')
            .try_fold(&self.attributes, |v, part| v.get(part));
        flat.or(nested).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_is_one_trace_across_a_kill_and_a_takeover() {
    let Some(url) = database_url("traces_phoenix").await else {
        return;
    };
    // reqwest is built without a default TLS provider; this client speaks plain HTTP.
    #[allow(deprecated, reason = "ring is the provider the workspace compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let Some(phoenix) = Phoenix::start(&http).await else {
        return;
    };
    let runs = 8;
    let db = TestDb::create(&url, "otel").await;
    create_runs(&db, 0, runs).await;
    let endpoint = phoenix.url("");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", "e2e-worker"),
    ];

    // Worker A, slow enough that it is in the middle of runs when it is killed.
    let mut a = WorkerOpts::new(&url, &db.schema, "worker-a");
    a.concurrency = usize::try_from(runs).unwrap_or(8);
    a.tool_latency = (200, 400);
    a.llm_latency = (200, 400);
    let mut worker_a = WorkerProc::spawn_with_env(Path::new(BIN), &a, &env);
    let started = Instant::now();
    loop {
        let spans = phoenix.spans(&http).await;
        let by_a: BTreeSet<String> = spans
            .iter()
            .filter(|s| {
                s.name.starts_with("step ") && s.attr("worker").as_deref() == Some("worker-a")
            })
            .filter_map(|s| s.attr("run_id"))
            .collect();
        let unfinished = unfinished_runs(&db).await;
        if by_a.iter().any(|r| unfinished.contains(r)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "worker A exported no step of an unfinished run within 2 minutes ({} spans)",
            spans.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    worker_a.kill9();

    // Worker B takes the runs over once A's leases expire, and ends them.
    let mut b = WorkerOpts::new(&url, &db.schema, "worker-b");
    b.exit_when_done = runs;
    let worker_b = WorkerProc::spawn_with_env(Path::new(BIN), &b, &env);
    assert!(
        wait_all_final(&db, runs, Duration::from_mins(3)).await,
        "the runs did not end after the takeover"
    );
    let (code, _) = worker_b.wait_report(Duration::from_mins(1));
    assert_eq!(code, Some(0), "worker B failed");

    // Phoenix stores what it receives asynchronously: wait for the span of every run worker
    // B touched (B ended those, and flushed at its clean exit). A run worker A ended just
    // before the kill may have lost its span with A's queue: the kill loses what was not
    // exported yet.
    let ids: Vec<String> = (0..runs).map(shop::run_id).collect();
    let expected: BTreeMap<&str, RunTrace> = ids
        .iter()
        .map(|id| (id.as_str(), RunTrace::of(id, &Labels::new())))
        .collect();
    let root_name = format!("invoke_agent {}", shop::Shop::NAME);
    let started = Instant::now();
    let (spans, by_b) = loop {
        let spans = phoenix.spans(&http).await;
        let by_b: BTreeSet<String> = spans
            .iter()
            .filter(|s| s.attr("worker").as_deref() == Some("worker-b"))
            .filter_map(|s| s.attr("run_id"))
            .collect();
        let rooted: BTreeSet<String> = spans
            .iter()
            .filter(|s| s.name == root_name)
            .filter_map(|s| s.attr("run_id"))
            .collect();
        if !by_b.is_empty() && by_b.is_subset(&rooted) {
            break (spans, by_b);
        }
        assert!(
            started.elapsed() < Duration::from_mins(1),
            "the spans of the runs worker B ended did not reach Phoenix within a minute: \
             {} of {}",
            by_b.intersection(&rooted).count(),
            by_b.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };

    let mut taken_over = 0;
    let mut orphans = 0;
    let mut lost_roots = 0;
    for (id, trace) in &expected {
        let trace_id = hex(&trace.trace_id);
        let run_span = hex(&trace.span_id);
        let of_run: Vec<&Exported> = spans
            .iter()
            .filter(|s| s.attr("run_id").as_deref() == Some(*id))
            .collect();
        assert!(!of_run.is_empty(), "run {id}: no spans");
        for s in &of_run {
            assert_eq!(
                s.trace_id, trace_id,
                "run {id}: span `{}` is in another trace",
                s.name
            );
        }
        let roots: Vec<&&Exported> = of_run.iter().filter(|s| s.name == root_name).collect();
        assert!(
            roots.len() <= 1,
            "run {id}: one `invoke_agent` span at most"
        );
        if let Some(root) = roots.first() {
            assert_eq!(
                root.span_id, run_span,
                "run {id}: the run's span has the derived id"
            );
            assert_eq!(
                root.parent_id, None,
                "run {id}: the run's span is the trace's root"
            );
            assert_eq!(
                root.attr("gen_ai.operation.name").as_deref(),
                Some("invoke_agent")
            );
            assert_eq!(
                root.attr("gen_ai.agent.name").as_deref(),
                Some(shop::Shop::NAME)
            );
            let status: String = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
                .bind(*id)
                .fetch_one(&db.pool)
                .await
                .expect("the run's status");
            assert_eq!(
                root.attr("run.status"),
                Some(status),
                "run {id}: the run span's outcome"
            );
        } else {
            assert!(
                !by_b.contains(*id),
                "run {id}: worker B ended it, and its span is missing"
            );
            lost_roots += 1;
        }
        let steps: Vec<&&Exported> = of_run
            .iter()
            .filter(|s| s.name.starts_with("step "))
            .collect();
        assert!(!steps.is_empty(), "run {id}: no step spans");
        for s in of_run
            .iter()
            .filter(|s| s.name.starts_with("step ") || s.name.starts_with("run "))
        {
            assert_eq!(
                s.parent_id.as_deref(),
                Some(run_span.as_str()),
                "run {id}: `{}` is not a child of the run's span",
                s.name
            );
        }
        let workers: BTreeSet<String> = steps.iter().filter_map(|s| s.attr("worker")).collect();
        if workers.contains("worker-a") && workers.contains("worker-b") {
            taken_over += 1;
        }
        let step_ids: BTreeSet<&str> = steps.iter().map(|s| s.span_id.as_str()).collect();
        let mut cut_short = BTreeSet::new();
        for tool in of_run
            .iter()
            .filter(|s| s.name.starts_with("execute_tool "))
        {
            assert_eq!(
                tool.attr("gen_ai.operation.name").as_deref(),
                Some("execute_tool")
            );
            assert!(
                tool.attr("gen_ai.tool.name").is_some(),
                "run {id}: a tool span without its tool"
            );
            let parent = tool.parent_id.as_deref().unwrap_or_default();
            if !step_ids.contains(parent) {
                // The step the killed worker was in never ended, so its span was never
                // exported; the tool calls it finished before the kill were.
                cut_short.insert(parent.to_owned());
                orphans += 1;
            }
        }
        assert!(
            cut_short.len() <= 1,
            "run {id}: tool spans under {} missing steps; a kill cuts one step of a run short",
            cut_short.len()
        );
    }
    assert!(
        taken_over > 0,
        "no run has steps from both workers: the kill interrupted none"
    );
    eprintln!(
        "traces_phoenix: {} spans, {} runs, {taken_over} of them one trace across the kill \
         ({orphans} tool spans of steps the kill cut short, {lost_roots} run spans lost \
         with the killed worker's queue)",
        spans.len(),
        ids.len()
    );
    db.drop().await;
}

/// A collector that is down costs the worker its spans, never a step: every run completes
/// and the worker exits cleanly, its exporter's requests refused all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_holds_up_no_step() {
    let Some(url) = database_url("traces_phoenix").await else {
        return;
    };
    let runs = 24;
    let db = TestDb::create(&url, "otel_down").await;
    create_runs(&db, 0, runs).await;
    // A port nothing listens on: every export is refused.
    let down = format!("http://127.0.0.1:{}", free_port());
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", down.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let mut opts = WorkerOpts::new(&url, &db.schema, "worker-down");
    opts.exit_when_done = runs;
    let worker = WorkerProc::spawn_with_env(Path::new(BIN), &opts, &env);
    assert!(
        wait_all_final(&db, runs, Duration::from_mins(2)).await,
        "the runs did not end with the collector down"
    );
    let (code, report) = worker.wait_report(Duration::from_mins(1));
    assert_eq!(code, Some(0), "the worker failed with its collector down");
    let report = report.expect("the worker's report");
    assert!(
        report.runs_driven >= runs,
        "every run was driven by the one worker"
    );
    db.drop().await;
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

async fn unfinished_runs(db: &TestDb) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>(
        "SELECT id FROM runs WHERE status NOT IN ('completed', 'failed', 'compensated', \
         'cancelled', 'terminated', 'quarantined', 'dead_lettered')",
    )
    .fetch_all(&db.pool)
    .await
    .expect("list the runs")
    .into_iter()
    .collect()
}
