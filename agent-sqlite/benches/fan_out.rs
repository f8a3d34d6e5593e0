//! Child agents: a parent that starts 100 children of 10 steps each and waits for them all,
//! against the same 1,000 steps as one run, on a SQLite file and, when `DATABASE_URL` is
//! set, on PostgreSQL (a schema of its own, dropped at the end); and the wake-up latency
//! from the last child's final commit to the parent's next commit, idle (a tree of 3
//! children, nothing else running) and under load (the 100-children tree).
//!
//! Both shapes are driven by workers as in production (16 runs at once each, polling every
//! 20 ms between the stores' notifications). The steps commit without tool calls, so the
//! figures are the framework's own cost.
//!
//! ```sh
//! cargo bench -p durable-agents-sqlite --bench fan_out
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//!     cargo bench -p durable-agents-sqlite --bench fan_out
//! ```
//!
//! `FAN_OUT_ROUNDS` sets the rounds per shape (default 3; the idle wake-up takes 10 times as
//! many); the figures are medians, the latencies p50 and p99 over every round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_agents::runner::{Runner, RunnerConfig, Worker, WorkerConfig};
use durable_agents::sqlite::SqliteStore;
use durable_agents::store::{RunFilter, Store};
use durable_agents::tool::ToolBox;
use durable_agents::{Ctx, StepResult};
use serde::{Deserialize, Serialize};

/// A child: counts to `limit`, one committed step per count.
#[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
enum Counter {
    #[agent(initial, to(Counting, Done))]
    Counting { n: u64, limit: u64 },
    #[agent(terminal)]
    Done { n: u64 },
}

/// The parent: starts the children and waits for them all.
#[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
enum Tree {
    #[agent(initial, children(Counter), to(Joined))]
    Splitting { children: u64, steps: u64 },
    #[agent(terminal)]
    Joined { total: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Handlers;

impl CounterHandlers for Handlers {
    async fn counting(
        &self,
        ctx: Ctx<'_, counter::Counting>,
        counter::Counting { n, limit }: counter::Counting,
    ) -> StepResult<counter::Counting> {
        let n = n + 1;
        Ok(if n >= limit {
            ctx.to(counter::Done { n })
        } else {
            ctx.to(counter::Counting { n, limit })
        })
    }
}

impl TreeHandlers for Handlers {
    async fn splitting(
        &self,
        ctx: Ctx<'_, tree::Splitting>,
        tree::Splitting { children, steps }: tree::Splitting,
    ) -> StepResult<tree::Splitting> {
        let states = (0..children).map(|_| Counter::Counting { n: 0, limit: steps });
        let mut total = 0;
        for child in ctx.spawn_all::<Counter>(states).await? {
            if let Some(Counter::Done { n }) = child.completed() {
                total += n;
            }
        }
        Ok(ctx.to(tree::Joined { total }))
    }
}

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        max_children_per_step: 1_000,
        ..RunnerConfig::default()
    }
}

fn workers() -> WorkerConfig {
    WorkerConfig {
        poll_interval: Duration::from_millis(20),
        ..WorkerConfig::default()
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn percentile(xs: &mut [i64], per_cent: usize) -> i64 {
    if xs.is_empty() {
        return -1;
    }
    xs.sort_unstable();
    let i = ((xs.len() - 1) * per_cent).div_ceil(100);
    xs[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One run of `steps` steps, driven by a worker.
async fn one_run(store: &Arc<dyn Store>, id: &str, steps: u64) -> Duration {
    let runner = Runner::<Counter, Handlers>::builder(Arc::clone(store), Handlers, ToolBox::new())
        .config(config("bench-single"))
        .build()
        .expect("no tools");
    let started = Instant::now();
    runner
        .start(id, Counter::Counting { n: 0, limit: steps })
        .await
        .expect("start");
    Worker::new(runner, workers()).run_until_idle().await;
    let elapsed = started.elapsed();
    let done = store.load_run(id).await.expect("load").expect("the run");
    assert_eq!(done.state_name, "Done", "the run completes");
    elapsed
}

/// A tree of `children` children of `steps` steps: its wall time, and the wake-up latency
/// (the parent's commit after its wait, minus the last child's final commit, in ms), or
/// `None` when the children were all final before the parent's step looked (it then had
/// nothing to wait for).
async fn tree(
    store: &Arc<dyn Store>,
    id: &str,
    children: u64,
    steps: u64,
) -> (Duration, Option<i64>) {
    let parents = Runner::<Tree, Handlers>::builder(Arc::clone(store), Handlers, ToolBox::new())
        .config(config("bench-parents"))
        .build()
        .expect("no tools");
    let kids = Runner::<Counter, Handlers>::builder(Arc::clone(store), Handlers, ToolBox::new())
        .config(config("bench-children"))
        .build()
        .expect("no tools");
    let started = Instant::now();
    parents
        .start(id, Tree::Splitting { children, steps })
        .await
        .expect("start");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|done| *done).await;
    };
    let watch = async {
        loop {
            let r = store.load_run(id).await.expect("load").expect("the parent");
            if r.status.is_final() {
                let _ = tx.send(true);
                return r;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let (parent_worker, child_worker) = (
        Worker::new(parents, workers()),
        Worker::new(kids, workers()),
    );
    let (_, _, parent) = tokio::join!(
        parent_worker.run_until(stop(rx.clone())),
        child_worker.run_until(stop(rx)),
        watch,
    );
    let elapsed = started.elapsed();
    assert_eq!(parent.state_name, "Joined", "the parent completes");
    let last_child = store
        .list_runs(&RunFilter {
            spawned_by: Some(id.to_owned()),
            ..RunFilter::default()
        })
        .await
        .expect("children")
        .iter()
        .map(|c| c.updated_at)
        .max()
        .expect("children exist");
    let history = store.history(id).await.expect("history");
    let woken = (history.len() == 3).then(|| history[2].created_at - last_child);
    (elapsed, woken)
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("FAN_OUT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("bench.sqlite3"))
            .await
            .expect("open SQLite"),
    );
    let mut stores: Vec<(&str, Arc<dyn Store>)> = vec![("SQLite file", sqlite)];
    let pg = if let Ok(url) = std::env::var("DATABASE_URL") {
        let schema = format!("bench_fan_out_{}", std::process::id());
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
    println!("100 children x 10 steps against one run of 1,000 steps; medians of {rounds} rounds");
    for (name, store) in stores {
        one_run(&store, "warm-single", 10).await;
        tree(&store, "warm-tree", 3, 2).await;
        let mut single = Vec::new();
        let mut fanned = Vec::new();
        let mut loaded = Vec::new();
        for r in 0..rounds {
            single.push(one_run(&store, &format!("single-{r}"), 1_000).await);
            let (t, wake) = tree(&store, &format!("tree-{r}"), 100, 10).await;
            fanned.push(t);
            loaded.extend(wake);
        }
        let mut idle = Vec::new();
        for r in 0..rounds * 10 {
            idle.extend(tree(&store, &format!("idle-{r}"), 3, 1).await.1);
        }
        let (single, fanned) = (median(single), median(fanned));
        println!("  {name}:");
        println!("    one run, 1,000 steps       : {:>8.1} ms", ms(single));
        println!(
            "    100 children x 10 steps    : {:>8.1} ms   (x{:.2} the one run; {:+.2} ms per child)",
            ms(fanned),
            fanned.as_secs_f64() / single.as_secs_f64(),
            (ms(fanned) - ms(single)) / 100.0
        );
        println!(
            "    wake-up, idle (3 children) : p50 {} ms, p99 {} ms over {} trees",
            percentile(&mut idle, 50),
            percentile(&mut idle, 99),
            idle.len()
        );
        println!(
            "    wake-up, under load (100)  : p50 {} ms, p99 {} ms over {} trees",
            percentile(&mut loaded, 50),
            percentile(&mut loaded, 99),
            loaded.len()
        );
    }
    if let Some(pg) = pg {
        pg.drop_schema().await.expect("drop the bench schema");
    }
}
