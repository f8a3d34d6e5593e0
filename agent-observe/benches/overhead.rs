//! What telemetry costs a run: W1 (whole runs one after the other) and W2 (64 at once) with
//! traces, metrics and JSON logs on, against the same with them off, on SQLite and (with
//! `DATABASE_URL`) PostgreSQL.
//!
//! ```sh
//! cargo bench --workspace --bench overhead                       # SQLite
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench --workspace --bench overhead
//! OVERHEAD_ROUNDS=9 ...                                          # more rounds (default 5)
//! OVERHEAD_PARTS=1 ...                                           # traces alone, metrics alone too
//! ```
//!
//! Telemetry is installed once per process, so each measurement is a child process (this
//! program with `OVERHEAD_CHILD` set), off and on alternated round by round; the ratio of
//! each round is on over off, and the median of the rounds is printed. "On" is what a
//! deployment runs: every span exported (to an exporter that drops the batches, so the
//! figure is the process's cost, not a collector's), the Prometheus recorder installed,
//! and JSON log lines at `info` written (to a sink). Each run has 10 steps, each calling a
//! read tool, so each step makes a step span, a tool span and their metrics.

#![allow(clippy::cast_precision_loss)]

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use durable_agents::observe::{BoxMakeWriter, LogFormat, Telemetry, Traces};
use durable_agents::postgres::PgStore;
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::sqlite::SqliteStore;
use durable_agents::store::{RunStatus, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolResult, tool_fn};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde::{Deserialize, Serialize};

/// A read tool that answers at once.
#[tool_fn(read)]
async fn look(
    /// The step.
    at: u32,
) -> ToolResult<u32> {
    Ok(at)
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Look)))]
enum Count {
    #[agent(initial, tools(Look), to(Count, Done))]
    Count { at: u32 },
    #[agent(terminal)]
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Steps;

const STEPS: u32 = 10;

impl CountHandlers for Steps {
    async fn count(
        &self,
        ctx: Ctx<'_, count::Count>,
        count::Count { at }: count::Count,
    ) -> StepResult<count::Count> {
        ctx.call::<Look>(LookInput { at }).await?;
        Ok(if at + 1 >= STEPS {
            ctx.to(count::Done)
        } else {
            ctx.to(count::Count { at: at + 1 })
        })
    }
}

/// Spans exported nowhere: the process's cost of making and batching them.
#[derive(Debug)]
struct Dropped;

impl SpanExporter for Dropped {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// Runs per task and tasks, for a workload.
fn shape(workload: &str) -> (usize, usize) {
    match workload {
        "w1" => (40, 1),
        _ => (3, 64),
    }
}

async fn open(store: &str, tag: &str) -> (Arc<dyn Store>, Option<Arc<PgStore>>) {
    if store == "pg" {
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let pg = PgStore::connect(
            &url,
            &format!("bench_overhead_{}_{tag}", std::process::id()),
        )
        .await
        .expect("connect");
        pg.migrate().await.expect("migrate");
        let pg = Arc::new(pg);
        (pg.clone(), Some(pg))
    } else {
        let path = std::env::temp_dir().join(format!("overhead-{}-{tag}.db", std::process::id()));
        let sqlite = SqliteStore::open(&path).await.expect("open");
        (Arc::new(sqlite), None)
    }
}

/// One measurement: steps per second of `workload` on `store` with telemetry `mode`: `off`,
/// `on` (traces, metrics and JSON logs), or one part alone (`traces`, `metrics`).
async fn child(workload: &str, store: &str, mode: &str) -> f64 {
    if matches!(mode, "on" | "metrics") {
        durable_agents::observe::metrics::Metrics::install().expect("metrics");
    }
    let telemetry = matches!(mode, "on" | "traces").then(|| {
        Telemetry::new()
            .traces(Traces::exporter(Dropped))
            .log_format(LogFormat::Json)
            .log_filter(if mode == "on" { "info" } else { "off" })
            .log_writer(BoxMakeWriter::new(std::io::sink))
            .install()
            .expect("telemetry")
    });
    let (store_dyn, pg) = open(store, mode).await;
    let runner = Runner::<Count, Steps>::builder(store_dyn, Steps, CountTools::from_shared(&()))
        .config(RunnerConfig {
            worker_id: "overhead".to_owned(),
            ..RunnerConfig::default()
        })
        .build()
        .expect("runner");
    let (runs, tasks) = shape(workload);
    // Warm-up, untimed.
    for i in 0..3 {
        runner
            .start_and_run(&format!("warm-{i}"), Count::Count { at: 0 })
            .await
            .expect("warm-up run");
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let runner = runner.clone();
        handles.push(tokio::spawn(async move {
            let mut steps = 0;
            for r in 0..runs {
                let done = runner
                    .start_and_run(&format!("run-{t}-{r}"), Count::Count { at: 0 })
                    .await
                    .expect("run");
                assert_eq!(done.status, RunStatus::Completed);
                steps += done.version;
            }
            steps
        }));
    }
    let mut steps = 0;
    for h in handles {
        steps += h.await.expect("task");
    }
    let rate = steps as f64 / started.elapsed().as_secs_f64();
    if let Some(t) = telemetry {
        t.shutdown();
    }
    if let Some(pg) = pg {
        pg.drop_schema().await.expect("drop schema");
    }
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(workload: &str, store: &str, mode: &str) -> f64 {
    let out = Command::new(std::env::current_exe().expect("this program"))
        .env("OVERHEAD_CHILD", format!("{workload},{store},{mode}"))
        .output()
        .expect("run a child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {workload} {store} {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("rate="))
        .and_then(|r| r.trim().parse().ok())
        .expect("the child prints its rate")
}

fn main() {
    if let Ok(task) = std::env::var("OVERHEAD_CHILD") {
        let parts: Vec<&str> = task.split(',').collect();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let rate = runtime.block_on(child(parts[0], parts[1], parts[2]));
        println!("rate={rate}");
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("OVERHEAD_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let mut stores = vec!["sqlite"];
    if std::env::var("DATABASE_URL").is_ok_and(|u| !u.is_empty()) {
        stores.push("pg");
    }
    println!(
        "telemetry overhead: steps/s with traces, metrics and JSON logs on, over off ({rounds} rounds, alternated)"
    );
    // `OVERHEAD_PARTS=1`: traces alone and metrics alone too, to see where the cost is.
    let modes: &[&str] = if std::env::var("OVERHEAD_PARTS").is_ok() {
        &["on", "traces", "metrics"]
    } else {
        &["on"]
    };
    for store in &stores {
        for workload in ["w1", "w2"] {
            let mut offs = Vec::new();
            let mut by_mode: Vec<(Vec<f64>, Vec<f64>)> =
                vec![(Vec::new(), Vec::new()); modes.len()];
            for _ in 0..rounds {
                let off = measure(workload, store, "off");
                offs.push(off);
                for (mode, (rates, ratios)) in modes.iter().zip(&mut by_mode) {
                    let rate = measure(workload, store, mode);
                    rates.push(rate);
                    ratios.push(rate / off);
                }
            }
            let off = median(offs);
            for (mode, (rates, ratios)) in modes.iter().zip(by_mode) {
                let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                println!(
                    "{store:6} {workload} {mode:7}: off {off:.0} steps/s, {mode} {:.0} steps/s (medians); {mode}/off per round {}; median {:.2}",
                    median(rates),
                    shown.join(" "),
                    median(ratios),
                );
            }
        }
    }
}
