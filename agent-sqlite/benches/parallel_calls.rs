//! Parallel tool calls in one step: 8 calls to a write tool that sleeps 50 ms, made with
//! `Ctx::call_each` at concurrency 8 against concurrency 1, through the real runner, on the
//! in-memory store, on a SQLite file and, when `DATABASE_URL` is set, on PostgreSQL (in a
//! schema of its own, dropped at the end). The baselines are the same 8 sleeps awaited
//! directly (sequentially and joined), measured in the same run.
//!
//! ```sh
//! cargo bench -p durable-agents-sqlite --bench parallel_calls
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//!     cargo bench -p durable-agents-sqlite --bench parallel_calls
//! ```
//!
//! `PARALLEL_CALLS_ROUNDS` sets the rounds per shape (default 10); the figures are medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_agents::events::TokenSink;
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::sqlite::SqliteStore;
use durable_agents::store::Store;
use durable_agents::store::memory::MemoryStore;
use durable_agents::tool::{Execute, Tool, ToolBox, ToolContext, ToolError, kind};
use durable_agents::{Ctx, StepResult};
use serde::{Deserialize, Serialize};

const CALLS: usize = 8;
const SLEEP: Duration = Duration::from_millis(50);

/// A write tool (journaled before and after each call, with its idempotency key) whose
/// service takes 50 ms to answer.
#[derive(Debug)]
struct SlowWrite;

impl Tool for SlowWrite {
    const NAME: &'static str = "SlowWrite";
    type Kind = kind::Write;
    type Input = usize;
    type Output = usize;
}

impl Execute for SlowWrite {
    async fn execute(&self, input: usize, _: &ToolContext) -> Result<usize, ToolError> {
        tokio::time::sleep(SLEEP).await;
        Ok(input)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
#[agent(tools(write(SlowWrite)))]
enum Fanout {
    #[agent(initial, tools(SlowWrite), max_tool_calls = 8, to(Done))]
    Calling { concurrency: usize },
    #[agent(terminal)]
    Done { sum: usize },
}

#[derive(Debug, Clone, Copy)]
struct Calls;

impl FanoutHandlers for Calls {
    async fn calling(
        &self,
        ctx: Ctx<'_, fanout::Calling>,
        fanout::Calling { concurrency }: fanout::Calling,
    ) -> StepResult<fanout::Calling> {
        let mut sum = 0;
        for r in ctx.call_each::<SlowWrite>(0..CALLS, concurrency).await {
            sum += r?;
        }
        Ok(ctx.to(fanout::Done { sum }))
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

async fn direct(concurrent: bool) -> Duration {
    let started = Instant::now();
    let cx = ToolContext {
        agent: "bench",
        run_id: String::new(),
        state: String::new(),
        version: 0,
        call_index: 0,
        attempt: 1,
        idempotency_key: None,
        tokens: TokenSink::default(),
    };
    if concurrent {
        futures::future::join_all((0..CALLS).map(|i| SlowWrite.execute(i, &cx))).await;
    } else {
        for i in 0..CALLS {
            let _ = SlowWrite.execute(i, &cx).await;
        }
    }
    started.elapsed()
}

async fn through_runner(runner: &Runner<Fanout, Calls>, id: &str, concurrency: usize) -> Duration {
    let started = Instant::now();
    runner
        .start(id, Fanout::Calling { concurrency })
        .await
        .expect("start");
    let done = runner.run(id).await.expect("run");
    let elapsed = started.elapsed();
    assert_eq!(done.state_name, "Done", "the run completes");
    elapsed
}

fn runner_on(store: Arc<dyn Store>) -> Runner<Fanout, Calls> {
    Runner::<Fanout, Calls>::builder(store, Calls, ToolBox::new().with(SlowWrite))
        .config(RunnerConfig {
            worker_id: "bench".into(),
            ..RunnerConfig::default()
        })
        .build()
        .expect("tool box matches")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("PARALLEL_CALLS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("bench.sqlite3"))
            .await
            .expect("open SQLite"),
    );
    let mut stores: Vec<(&str, Arc<dyn Store>)> = vec![
        ("in-memory", Arc::new(MemoryStore::new())),
        ("SQLite file", sqlite),
    ];
    let pg = if let Ok(url) = std::env::var("DATABASE_URL") {
        let schema = format!("bench_parallel_{}", std::process::id());
        let pg = durable_agents::postgres::PgStore::connect(&url, &schema)
            .await
            .expect("connect to DATABASE_URL");
        pg.migrate().await.expect("create the bench schema");
        let pg = Arc::new(pg);
        stores.push(("PostgreSQL", Arc::clone(&pg) as Arc<dyn Store>));
        Some(pg)
    } else {
        println!("(DATABASE_URL is not set: PostgreSQL is not measured)");
        None
    };

    let mut seq = Vec::new();
    let mut par = Vec::new();
    for _ in 0..rounds {
        seq.push(direct(false).await);
        par.push(direct(true).await);
    }
    let (direct_seq, direct_par) = (median(seq), median(par));
    println!(
        "{CALLS} calls of a write tool that sleeps {} ms, one step; medians of {rounds} rounds",
        SLEEP.as_millis()
    );
    println!("  direct, awaited one by one : {:>7.1} ms", ms(direct_seq));
    println!(
        "  direct, joined             : {:>7.1} ms   (sequential/joined {:.2}x)",
        ms(direct_par),
        direct_seq.as_secs_f64() / direct_par.as_secs_f64()
    );
    for (name, store) in stores {
        let runner = runner_on(store);
        // Warm up: connections, prepared statements, the graph's registration.
        through_runner(&runner, &format!("warm-{name}"), CALLS).await;
        let mut seq = Vec::new();
        let mut par = Vec::new();
        for r in 0..rounds {
            seq.push(through_runner(&runner, &format!("seq-{r}"), 1).await);
            par.push(through_runner(&runner, &format!("par-{r}"), CALLS).await);
        }
        let (seq, par) = (median(seq), median(par));
        println!("  {name}:");
        println!(
            "    runner, concurrency 1    : {:>7.1} ms   (direct sequential x{:.3})",
            ms(seq),
            seq.as_secs_f64() / direct_seq.as_secs_f64()
        );
        println!(
            "    runner, concurrency {CALLS}    : {:>7.1} ms   (direct joined x{:.3})",
            ms(par),
            par.as_secs_f64() / direct_par.as_secs_f64()
        );
        println!(
            "    speed-up parallel/sequential: {:.2}x (ideal {CALLS}x)",
            seq.as_secs_f64() / par.as_secs_f64()
        );
    }
    if let Some(pg) = pg {
        pg.drop_schema().await.expect("drop the bench schema");
    }
}
