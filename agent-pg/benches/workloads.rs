//! The workloads users compare frameworks on (issue 22), on PostgreSQL and SQLite, each
//! against floors measured in the same run.
//!
//! ```sh
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//!     cargo bench --workspace --bench workloads
//! WORKLOADS_FULL=1 ...          # the issue's sizes (10,000 in flight, 1,000,000 waiting)
//! WORKLOADS_ONLY=w1,w5 ...      # some workloads only
//! W4_IN_FLIGHT=1,10000 ...      # W4 at these numbers of runs in flight only
//! ```
//!
//! - **W1 whole runs, sequential**: runs of 10 handler steps (11 commits: the last one
//!   records the final status), one after the other, creation included
//!   (`Runner::start_and_run`; `start` then `run` measured beside it); after 5 untimed
//!   warm-up runs.
//! - **W2 whole runs, concurrent**: 64 tasks ("agents"), each doing its runs one after the
//!   other.
//! - **W3 mass resume** (PostgreSQL; SQLite's store admits one process at a time): runs stopped after their 5th step by a process killed with
//!   `SIGKILL`, resumed by a new process under the same worker id (which expires its old
//!   leases at start) and under another id (which must take each run over when its lease
//!   expires); and runs waiting for a signal, signalled all at once while a new process
//!   runs. Latencies from the process's start, from the lease's expiry, from the signal.
//! - **W4 runs in flight**: one worker process holding N runs at once, each step calling a
//!   read tool that waits 100 ms, against the same worker and runs without the tool call;
//!   steps/s, p99 and the process's RSS per run in flight. The tool is journaled with its
//!   step's commit (`ToolPolicy::journal_with_commit`); `W4_AT_ONCE=1` journals it as it
//!   returns, the default policy.
//! - **W5 waiting runs**: claim latency with nothing claimable and signal-to-commit
//!   latency with N runs waiting for a signal, bytes per waiting run, and the plan of the
//!   claim query.
//! - **W6 more workers** (PostgreSQL): 1, 2 and 4 worker processes sharing the W2 load
//!   (64 runs in flight in all); throughput, p99, and CPU per step (workers and server).
//!
//! - **Retention** (`WORKLOADS_ONLY=retention`): the W2 load with the worker's retention
//!   (`runner::Retention`) applied every 200 ms (versions older than 1 s compacted, final
//!   runs deleted 2 s after they ended) against the same load without, alternating in the
//!   same run; then the W2 load back to back for `RETENTION_SECS` seconds (default 120)
//!   with retention running, printing the store's size as it goes (steady state);
//!   `RETENTION_STORE=pg` or `sqlite` runs it on that store only (two processes can then
//!   run the stores' long steady states side by side).
//!
//! Floors: one transition as bare SQL through the pool and on a held connection, and the
//! W1 and W2 shapes as bare SQL (a run row and its first transition created, then one
//! statement per transition; on SQLite one `BEGIN IMMEDIATE` transaction each). Ratios
//! are framework over floor, measured in the same run; on a shared machine the absolute
//! figures move from one run to the next by more than the ratios do.
//!
//! Child processes (W3, W4, W6) are this same program, started with `WORKLOADS_CHILD` set.

// Figures are counts and durations turned into rates and ratios: `as f64` on them loses
// nothing that a printed figure shows.
#![allow(clippy::cast_precision_loss)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::runner::{
    Crash, FaultHook, FaultPoint, Retention, Runner, RunnerConfig, Worker, WorkerConfig,
};
use agent_core::store::{RunStatus, Store, now_ms};
use agent_core::tool::{Execute, Tool, ToolBox, ToolContext, ToolError, ToolPolicy, kind};
use agent_core::{Ctx, StepResult, Wake};
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

const POOL: u32 = 32;
const CHILD_ENV: &str = "WORKLOADS_CHILD";
const TOOL_WAIT_MS: u64 = 100;

/// A read tool that answers after the given milliseconds (a service's latency). Cheap to
/// repeat, so it is journaled with its step's commit (`journal_with_commit`); W4 also
/// runs it journaled as it returns (`W4_AT_ONCE=1`), as a model's generation is.
#[derive(Debug)]
struct Think;

impl Tool for Think {
    const NAME: &'static str = "Think";
    type Kind = kind::Read;
    /// `[milliseconds, step]`: the step keeps inputs apart.
    type Input = Vec<u64>;
    type Output = u64;
    fn policy() -> ToolPolicy {
        ToolPolicy {
            journal_with_commit: std::env::var("W4_AT_ONCE").is_err(),
            ..ToolPolicy::default()
        }
    }
}

impl Execute for Think {
    async fn execute(&self, input: Vec<u64>, _: &ToolContext) -> Result<u64, ToolError> {
        let ms = input.first().copied().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(ms)
    }
}

/// What a run of the benchmark agent does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Plan {
    /// Handler steps before `Done`.
    steps: u32,
    /// Each step calls `Think` for this long; no call when 0.
    think_ms: u64,
    /// Wait for the signal `go` after this many steps (0: never).
    pause_at: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, agent_core::Agent)]
#[agent(tools(read(Think)))]
enum Flow {
    #[agent(initial, tools(Think), to(Step, Pause, Done))]
    Step { plan: Plan, at: u32 },
    #[agent(wait = "go", to(Step, Done))]
    Pause { plan: Plan, at: u32 },
    #[agent(terminal)]
    Done { steps: u32 },
}

/// The handlers; `hang_at` makes the step at that index wait forever (a process that is
/// about to be killed).
#[derive(Debug, Clone, Copy)]
struct Steps {
    hang_at: Option<u32>,
}

impl FlowHandlers for Steps {
    async fn step(
        &self,
        ctx: Ctx<'_, flow::Step>,
        flow::Step { plan, at }: flow::Step,
    ) -> StepResult<flow::Step> {
        if self.hang_at == Some(at) {
            std::future::pending::<()>().await;
        }
        if plan.think_ms > 0 {
            ctx.call::<Think>(vec![plan.think_ms, u64::from(at)])
                .await?;
        }
        let next = at + 1;
        Ok(if next >= plan.steps {
            ctx.to(flow::Done { steps: next })
        } else if next == plan.pause_at {
            ctx.to(flow::Pause { plan, at: next })
        } else {
            ctx.to(flow::Step { plan, at: next })
        })
    }

    async fn pause(
        &self,
        ctx: Ctx<'_, flow::Pause>,
        _wake: Wake,
        flow::Pause { plan, at }: flow::Pause,
    ) -> StepResult<flow::Pause> {
        Ok(if at + 1 >= plan.steps {
            ctx.to(flow::Done { steps: at + 1 })
        } else {
            ctx.to(flow::Step { plan, at })
        })
    }
}

/// Times of commits in this process: between two commits of a run, and each commit's
/// arrival (run, version, when) for whoever waits for one.
#[derive(Debug, Default)]
struct Commits {
    last: Mutex<HashMap<String, Instant>>,
    gaps: Mutex<Vec<Duration>>,
    /// Each commit (run, version), kept only while `track` is set (W5).
    applied: Mutex<Vec<(String, u64)>>,
    track: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Commits {
    fn begin(&self, run: &str) {
        self.last
            .lock()
            .unwrap()
            .insert(run.to_owned(), Instant::now());
    }

    fn take_gaps(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.gaps.lock().unwrap())
    }

    /// Heap bytes of this bookkeeping (W4 counts them in its per-run figures): the map's
    /// table, its keys (glibc's smallest chunk is 32 bytes) and the gaps' buffer.
    fn heap_bytes(&self) -> usize {
        let last = self.last.lock().unwrap();
        let table = last.capacity() * (size_of::<(String, Instant)>() + 1);
        let keys: usize = last
            .keys()
            .map(|k| (k.len() + 8).next_multiple_of(16).max(32))
            .sum();
        table + keys + self.gaps.lock().unwrap().capacity() * size_of::<Duration>()
    }
}

impl FaultHook for Commits {
    fn check(&self, point: FaultPoint, run_id: &str, version: u64) -> Result<(), Crash> {
        if point == FaultPoint::CommitApplied {
            let now = Instant::now();
            if let Some(prev) = self.last.lock().unwrap().insert(run_id.to_owned(), now) {
                self.gaps.lock().unwrap().push(now - prev);
            }
            if self.track.load(std::sync::atomic::Ordering::Relaxed) {
                self.applied
                    .lock()
                    .unwrap()
                    .push((run_id.to_owned(), version));
                self.notify.notify_waiters();
            }
        }
        Ok(())
    }
}

fn new_runner(
    store: Arc<dyn Store>,
    worker_id: &str,
    lease: Duration,
    hang_at: Option<u32>,
) -> (Runner<Flow, Steps>, Arc<Commits>) {
    let commits = Arc::new(Commits::default());
    let runner =
        Runner::<Flow, Steps>::builder(store, Steps { hang_at }, ToolBox::new().with(Think))
            .config(RunnerConfig {
                worker_id: worker_id.to_owned(),
                lease_ttl: lease,
                ..RunnerConfig::default()
            })
            .faults(commits.clone())
            .build()
            .expect("the tool box matches the agent");
    (runner, commits)
}

fn initial(plan: Plan) -> Flow {
    Flow::Step { plan, at: 0 }
}

// ---------------------------------------------------------------------------------------
// Figures

/// Percentile by nearest rank of sorted durations, in milliseconds.
fn pct(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// `p50 / p99 / max` in milliseconds.
fn spread(mut d: Vec<Duration>) -> String {
    d.sort();
    format!(
        "min {:.2} / p50 {:.2} / p99 {:.2} / max {:.2} ms ({} samples)",
        pct(&d, 0.0),
        pct(&d, 0.5),
        pct(&d, 0.99),
        pct(&d, 1.0),
        d.len()
    )
}

#[allow(clippy::cast_precision_loss)]
fn rate(n: u64, wall: Duration) -> f64 {
    n as f64 / wall.as_secs_f64()
}

fn ms_span(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// User + system CPU time of this process and of its waited-for children, and of the
/// PostgreSQL server's processes on this machine, from `/proc` (Linux).
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    own: Duration,
    children: Duration,
    server: Duration,
}

impl Cpu {
    fn now() -> Self {
        let ticks = |stat: &str, fields: [usize; 2]| -> Duration {
            let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
                return Duration::ZERO;
            };
            let f: Vec<&str> = rest.split(' ').collect();
            let n: u64 = fields
                .iter()
                .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
                .sum();
            Duration::from_millis(n * 10)
        };
        let own_stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let mut server = Duration::ZERO;
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
                    && stat.contains("(postgres)")
                {
                    server += ticks(&stat, [11, 12]);
                }
            }
        }
        Self {
            own: ticks(&own_stat, [11, 12]),
            children: ticks(&own_stat, [13, 14]),
            server,
        }
    }
}

/// `VmRSS` and `VmHWM` of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

// ---------------------------------------------------------------------------------------
// Stores

/// Where a store is, so that a child process opens the same one.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Place {
    Pg { url: String, schema: String },
    Sqlite { path: String },
}

impl Place {
    fn label(&self) -> &'static str {
        match self {
            Self::Pg { .. } => "PostgreSQL",
            Self::Sqlite { .. } => "SQLite",
        }
    }

    async fn open(&self) -> Opened {
        match self {
            Self::Pg { url, schema } => {
                let mut store =
                    PgStore::connect_with(url, schema, PgPoolOptions::new().max_connections(POOL))
                        .await
                        .expect("connect");
                // `WORKLOADS_PER_STATEMENT=N`: another bound on commits per grouped
                // statement, to compare with the default in one build.
                if let Some(n) = std::env::var("WORKLOADS_PER_STATEMENT")
                    .ok()
                    .and_then(|n| n.parse().ok())
                {
                    store = store.with_group_commit(agent_pg::COMMITS_IN_FLIGHT, n);
                }
                store.migrate().await.expect("migrate");
                Opened::Pg(Arc::new(store))
            }
            Self::Sqlite { path } => {
                Opened::Sqlite(Arc::new(SqliteStore::open(path).await.expect("open")))
            }
        }
    }

    /// A new, empty store of the same kind.
    fn fresh(&self, tag: &str) -> Self {
        match self {
            Self::Pg { url, .. } => Self::Pg {
                url: url.clone(),
                schema: format!("bench_w_{}_{tag}", std::process::id()),
            },
            Self::Sqlite { .. } => Self::Sqlite {
                path: std::env::temp_dir()
                    .join(format!("workloads-{}-{tag}.db", std::process::id()))
                    .display()
                    .to_string(),
            },
        }
    }
}

#[derive(Clone, Debug)]
enum Opened {
    Pg(Arc<PgStore>),
    Sqlite(Arc<SqliteStore>),
}

impl Opened {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Pg(s) => s.clone(),
            Self::Sqlite(s) => s.clone(),
        }
    }

    async fn remove(&self, place: &Place) {
        match (self, place) {
            (Self::Pg(s), _) => s.drop_schema().await.expect("drop schema"),
            (Self::Sqlite(s), Place::Sqlite { path }) => {
                s.close().await;
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
            }
            (Self::Sqlite(_), Place::Pg { .. }) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// Floors: bare SQL

const PG_FLOOR_TABLES: &str = "CREATE TABLE IF NOT EXISTS floor_runs (id text PRIMARY KEY, \
     version bigint NOT NULL, state jsonb NOT NULL, \
     updated_at timestamptz NOT NULL DEFAULT clock_timestamp()); \
     CREATE TABLE IF NOT EXISTS floor_transitions (run_id text NOT NULL, version bigint NOT NULL, \
     from_state text NOT NULL, to_state text NOT NULL, created_at timestamptz NOT NULL, \
     PRIMARY KEY (run_id, version))";

const PG_FLOOR_CREATE: &str = "WITH ins AS (INSERT INTO floor_runs (id, version, state) \
     VALUES ($1, 0, $2) RETURNING id, updated_at) \
     INSERT INTO floor_transitions (run_id, version, from_state, to_state, created_at) \
     SELECT id, 0, 'Step', 'Step', updated_at FROM ins";

const PG_FLOOR_STEP: &str = "WITH upd AS (UPDATE floor_runs SET version = $2 + 1, state = $3, \
     updated_at = clock_timestamp() WHERE id = $1 AND version = $2 \
     RETURNING id, version, updated_at) \
     INSERT INTO floor_transitions (run_id, version, from_state, to_state, created_at) \
     SELECT id, version, 'Step', 'Step', updated_at FROM upd";

const LITE_FLOOR_TABLES: &str = "CREATE TABLE IF NOT EXISTS floor_runs (id TEXT PRIMARY KEY, \
     version INTEGER NOT NULL, state TEXT NOT NULL, updated_at INTEGER NOT NULL); \
     CREATE TABLE IF NOT EXISTS floor_transitions (run_id TEXT NOT NULL, \
     version INTEGER NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, \
     created_at INTEGER NOT NULL, PRIMARY KEY (run_id, version))";

/// The state a runner commits at step `at` (about the same bytes).
fn floor_state(at: u64) -> serde_json::Value {
    json!({ "Step": { "plan": { "steps": 10, "think_ms": 0, "pause_at": 0 }, "at": at } })
}

/// How a floor reaches its database.
#[derive(Clone)]
enum FloorConn {
    PgPool(sqlx::PgPool),
    PgHeld(Arc<tokio::sync::Mutex<sqlx::pool::PoolConnection<sqlx::Postgres>>>),
    /// The store's own statements on its own tables (`agent_pg::__bench`), from a held
    /// connection, their parameters made up front: what the runner adds to them is the
    /// runner's cost alone, without the difference between the floor's thin rows and the
    /// store's.
    PgStoreRows(Arc<tokio::sync::Mutex<sqlx::pool::PoolConnection<sqlx::Postgres>>>),
    Lite(sqlx::SqlitePool),
}

/// A transition hash's length of text, for the statements sent bare.
const BARE_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl FloorConn {
    async fn create(&self, id: &str) {
        match self {
            Self::PgPool(p) => {
                sqlx::query(PG_FLOOR_CREATE)
                    .bind(id)
                    .bind(floor_state(0))
                    .execute(p)
                    .await
                    .expect("floor create");
            }
            Self::PgStoreRows(c) => {
                let mut c = c.lock().await;
                let created = sqlx::query(agent_pg::__bench::INSERT_RUN)
                    .bind(id)
                    .bind("Floor")
                    .bind("floor")
                    .bind("Step")
                    .bind(floor_state(0))
                    .bind(BARE_HASH)
                    .bind(BARE_HASH)
                    .bind(None::<&str>)
                    .bind(None::<i64>)
                    .bind("floor")
                    .bind(sqlx::types::Json(serde_json::Map::new()))
                    .bind(None::<&str>)
                    .bind(None::<i64>)
                    .bind(1_i32)
                    .bind(Some("floor"))
                    .bind(Some(30_000_i64))
                    .fetch_optional(&mut **c)
                    .await
                    .expect("store-row create");
                assert!(created.is_some(), "a store-row run existed already");
            }
            Self::PgHeld(c) => {
                let mut c = c.lock().await;
                sqlx::query(PG_FLOOR_CREATE)
                    .bind(id)
                    .bind(floor_state(0))
                    .execute(&mut **c)
                    .await
                    .expect("floor create");
            }
            Self::Lite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await.expect("begin");
                let now = now_ms();
                sqlx::query(
                    "INSERT INTO floor_runs (id, version, state, updated_at) VALUES ($1, 0, $2, $3)",
                )
                .bind(id)
                .bind(floor_state(0).to_string())
                .bind(now)
                .execute(&mut *tx)
                .await
                .expect("floor run");
                sqlx::query("INSERT INTO floor_transitions VALUES ($1, 0, 'Step', 'Step', $2)")
                    .bind(id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .expect("floor transition");
                tx.commit().await.expect("commit");
            }
        }
    }

    async fn step(&self, id: &str, version: u64) {
        let v = i64::try_from(version).unwrap_or(0);
        let applied = match self {
            Self::PgPool(p) => sqlx::query(PG_FLOOR_STEP)
                .bind(id)
                .bind(v)
                .bind(floor_state(version + 1))
                .execute(p)
                .await
                .expect("floor step")
                .rows_affected(),
            Self::PgStoreRows(c) => {
                let mut c = c.lock().await;
                sqlx::query(agent_pg::__bench::commit_step())
                    .bind(id)
                    .bind(1_i64)
                    .bind(v)
                    .bind("Step")
                    .bind("Step")
                    .bind(Some(floor_state(version + 1).to_string()))
                    .bind("running")
                    .bind(None::<&str>)
                    .bind(None::<i64>)
                    .bind(None::<&str>)
                    .bind(None::<&str>)
                    .bind(BARE_HASH)
                    .bind(0_i64)
                    .bind("step")
                    .bind("snapshot")
                    .bind(None::<String>)
                    .fetch_optional(&mut **c)
                    .await
                    .expect("store-row step")
                    .map_or(0, |_| 1)
            }
            Self::PgHeld(c) => {
                let mut c = c.lock().await;
                sqlx::query(PG_FLOOR_STEP)
                    .bind(id)
                    .bind(v)
                    .bind(floor_state(version + 1))
                    .execute(&mut **c)
                    .await
                    .expect("floor step")
                    .rows_affected()
            }
            Self::Lite(p) => {
                let now = now_ms();
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await.expect("begin");
                let n = sqlx::query(
                    "UPDATE floor_runs SET version = $2 + 1, state = $3, updated_at = $4 \
                     WHERE id = $1 AND version = $2",
                )
                .bind(id)
                .bind(v)
                .bind(floor_state(version + 1).to_string())
                .bind(now)
                .execute(&mut *tx)
                .await
                .expect("floor step")
                .rows_affected();
                sqlx::query(
                    "INSERT INTO floor_transitions VALUES ($1, $2 + 1, 'Step', 'Step', $3)",
                )
                .bind(id)
                .bind(v)
                .bind(now)
                .execute(&mut *tx)
                .await
                .expect("floor transition");
                tx.commit().await.expect("commit");
                n
            }
        };
        assert_eq!(applied, 1, "a floor step lost its version");
    }
}

/// `tasks` tasks, each creating `runs` runs one after the other and committing `commits`
/// transitions to each (the bare-SQL shape of W1 and W2); or, with `create` false, one
/// existing-free run per task stepped `commits` times (the bare statement).
async fn floor(
    conn: &FloorConn,
    tag: &str,
    tasks: usize,
    runs: usize,
    commits: u64,
    create: bool,
) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let conn = conn.clone();
        let tag = tag.to_owned();
        handles.push(tokio::spawn(async move {
            let mut gaps = Vec::new();
            for r in 0..runs {
                let id = format!("{tag}-{t}-{r}");
                let mut last = Instant::now();
                conn.create(&id).await;
                if !create {
                    last = Instant::now();
                }
                for v in 0..commits {
                    conn.step(&id, v).await;
                    gaps.push(last.elapsed());
                    last = Instant::now();
                }
            }
            gaps
        }));
    }
    let mut gaps = Vec::new();
    for h in handles {
        gaps.extend(h.await.expect("floor task"));
    }
    (rate(gaps.len() as u64, started.elapsed()), gaps)
}

// ---------------------------------------------------------------------------------------
// W1, W2: whole runs through the runner

/// `tasks` tasks each starting and running `runs` runs one after the other
/// (`Runner::start_and_run`); transitions/s (creation not counted as one, its time
/// included) and the times between commits.
async fn whole_runs(
    store: &Arc<dyn Store>,
    tag: &str,
    tasks: usize,
    runs: usize,
    plan: Plan,
) -> (f64, Vec<Duration>, u64) {
    whole_runs_by(store, tag, tasks, runs, plan, true).await
}

/// [`whole_runs`], with `Runner::start` then `Runner::run` unless `fused`.
async fn whole_runs_by(
    store: &Arc<dyn Store>,
    tag: &str,
    tasks: usize,
    runs: usize,
    plan: Plan,
    fused: bool,
) -> (f64, Vec<Duration>, u64) {
    let (runner, commits) = new_runner(
        store.clone(),
        &format!("w-{tag}"),
        Duration::from_secs(30),
        None,
    );
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let runner = runner.clone();
        let commits = commits.clone();
        let tag = tag.to_owned();
        handles.push(tokio::spawn(async move {
            let mut n = 0;
            for r in 0..runs {
                let id = format!("{tag}-{t}-{r}");
                commits.begin(&id);
                let done = if fused {
                    runner.start_and_run(&id, initial(plan)).await.expect("run")
                } else {
                    runner.start(&id, initial(plan)).await.expect("start");
                    runner.run(&id).await.expect("run")
                };
                assert_eq!(done.status, RunStatus::Completed);
                n += done.version;
            }
            n
        }));
    }
    let mut transitions = 0;
    for h in handles {
        transitions += h.await.expect("runner task");
    }
    let wall = started.elapsed();
    (
        rate(transitions, wall),
        commits.take_gaps(),
        transitions / (tasks * runs) as u64,
    )
}

const PLAN10: Plan = Plan {
    steps: 10,
    think_ms: 0,
    pause_at: 0,
};

/// Keep `rate` and its `gaps` when `rate` beats the best so far.
fn keep_best(best: &mut f64, best_gaps: &mut Vec<Duration>, rate: f64, gaps: Vec<Duration>) {
    if rate > *best {
        *best = rate;
        *best_gaps = gaps;
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn w1_w2(place: &Place, opened: &Opened, sizes: &Sizes) {
    let store = opened.store();
    let (shape_conn, bare_pool, bare_held, store_rows) = match opened {
        Opened::Pg(pg) => {
            sqlx::raw_sql(PG_FLOOR_TABLES)
                .execute(pg.pool())
                .await
                .expect("floor tables");
            let held = Arc::new(tokio::sync::Mutex::new(
                pg.pool().acquire().await.expect("held"),
            ));
            let rows_held = Arc::new(tokio::sync::Mutex::new(
                pg.pool().acquire().await.expect("held"),
            ));
            (
                FloorConn::PgHeld(held.clone()),
                Some(FloorConn::PgPool(pg.pool().clone())),
                Some(FloorConn::PgHeld(held)),
                Some(FloorConn::PgStoreRows(rows_held)),
            )
        }
        Opened::Sqlite(lite) => {
            sqlx::raw_sql(LITE_FLOOR_TABLES)
                .execute(lite.pool())
                .await
                .expect("floor tables");
            (FloorConn::Lite(lite.pool().clone()), None, None, None)
        }
    };
    // Warm-up: connections, plans, caches; 5 untimed runs.
    whole_runs(&store, "warm", 1, 5, PLAN10).await;
    floor(&shape_conn, "warm", 1, 5, 11, true).await;

    let label = place.label();
    println!(
        "\n## W1 whole runs, sequential: {label}, {} runs x 10 steps (11 commits each), {} rounds",
        sizes.w1_runs, sizes.rounds
    );
    let mut ratios = (Vec::new(), Vec::new(), Vec::new());
    let mut best = (0.0_f64, 0.0_f64, 0.0_f64, 0.0_f64);
    let mut gaps_best = (Vec::new(), Vec::new());
    let mut split_best = 0.0_f64;
    let (mut rows_ratios, mut rows_best) = (Vec::new(), 0.0_f64);
    for round in 0..sizes.rounds {
        let rows = match &store_rows {
            Some(conn) => Some(
                floor(conn, &format!("r1{round}"), 1, sizes.w1_runs, 11, true)
                    .await
                    .0,
            ),
            None => None,
        };
        let (fw, fw_gaps) = floor(
            &shape_conn,
            &format!("s1{round}"),
            1,
            sizes.w1_runs,
            11,
            true,
        )
        .await;
        let bare = match &bare_held {
            Some(held) => floor(held, &format!("h1{round}"), 1, 1, 400, false).await.0,
            None => {
                floor(&shape_conn, &format!("h1{round}"), 1, 1, 400, false)
                    .await
                    .0
            }
        };
        let pool = match &bare_pool {
            Some(p) => floor(p, &format!("p1{round}"), 1, 1, 400, false).await.0,
            None => bare,
        };
        let (rn, rn_gaps, _) =
            whole_runs(&store, &format!("w1{round}"), 1, sizes.w1_runs, PLAN10).await;
        let (split, _, _) = whole_runs_by(
            &store,
            &format!("w1s{round}"),
            1,
            sizes.w1_runs,
            PLAN10,
            false,
        )
        .await;
        split_best = split_best.max(split);
        if let Some(rows) = rows {
            rows_ratios.push(rn / rows);
            rows_best = rows_best.max(rows);
        }
        ratios.0.push(rn / bare);
        ratios.1.push(rn / pool);
        ratios.2.push(rn / fw);
        keep_best(&mut best.0, &mut gaps_best.0, rn, rn_gaps);
        keep_best(&mut best.1, &mut gaps_best.1, fw, fw_gaps);
        best.2 = best.2.max(bare);
        best.3 = best.3.max(pool);
    }
    println!(
        "  runner            {:>8.0} transitions/s   {}",
        best.0,
        spread(std::mem::take(&mut gaps_best.0))
    );
    println!(
        "  runner, start then run (two statements more per run): {split_best:>8.0} transitions/s ({:.2} of start_and_run)",
        split_best / best.0
    );
    println!(
        "  W1 shape, bare SQL{:>8.0} transitions/s   {}",
        best.1,
        spread(std::mem::take(&mut gaps_best.1))
    );
    let held_label = if bare_held.is_some() {
        "held connection"
    } else {
        "one transaction each"
    };
    println!(
        "  bare statement, {held_label}: {:>8.0} transitions/s",
        best.2
    );
    if bare_pool.is_some() {
        println!(
            "  bare statement, through the pool: {:>8.0} transitions/s",
            best.3
        );
    }
    println!(
        "  ratio runner / bare statement ({held_label}): best {:.2}, per-round median {:.2} (target 0.9)",
        best.0 / best.2,
        median(ratios.0.clone())
    );
    if bare_pool.is_some() {
        println!(
            "  ratio runner / bare statement through the pool: best {:.2}, median {:.2}",
            best.0 / best.3,
            median(ratios.1)
        );
    }
    println!(
        "  ratio runner / W1 shape as bare SQL: best {:.2}, median {:.2}",
        best.0 / best.1,
        median(ratios.2)
    );
    if store_rows.is_some() {
        println!(
            "  the store's own statements on its own tables, bare (held connection): {rows_best:>8.0} transitions/s"
        );
        println!(
            "  ratio runner / the store's statements bare: best {:.2}, median {:.2}",
            best.0 / rows_best,
            median(rows_ratios)
        );
    }

    println!(
        "\n## W2 whole runs, concurrent: {label}, {} agents x {} runs x 10 steps, {} rounds",
        sizes.w2_agents, sizes.w2_runs, sizes.rounds
    );
    let pool_conn = match &bare_pool {
        Some(p) => p.clone(),
        None => shape_conn.clone(),
    };
    let mut ratios = Vec::new();
    let mut best = (0.0_f64, 0.0_f64);
    let mut best_gaps = (Vec::new(), Vec::new());
    for round in 0..sizes.rounds {
        let cpu0 = Cpu::now();
        let (fw, fw_gaps) = floor(
            &pool_conn,
            &format!("s2{round}"),
            sizes.w2_agents,
            sizes.w2_runs,
            11,
            true,
        )
        .await;
        let cpu1 = Cpu::now();
        let (rn, rn_gaps, per_run) = whole_runs(
            &store,
            &format!("w2{round}"),
            sizes.w2_agents,
            sizes.w2_runs,
            PLAN10,
        )
        .await;
        let cpu2 = Cpu::now();
        let n = (sizes.w2_agents * sizes.w2_runs) as f64 * per_run as f64;
        println!(
            "  round {round}: runner {rn:>6.0}/s, shape {fw:>6.0}/s, ratio {:.2}; CPU µs/transition worker+server: floor {:.0}+{:.0}, runner {:.0}+{:.0}",
            rn / fw,
            cpu1.own.saturating_sub(cpu0.own).as_secs_f64() * 1e6 / n,
            cpu1.server.saturating_sub(cpu0.server).as_secs_f64() * 1e6 / n,
            cpu2.own.saturating_sub(cpu1.own).as_secs_f64() * 1e6 / n,
            cpu2.server.saturating_sub(cpu1.server).as_secs_f64() * 1e6 / n,
        );
        ratios.push(rn / fw);
        keep_best(&mut best.0, &mut best_gaps.0, rn, rn_gaps);
        keep_best(&mut best.1, &mut best_gaps.1, fw, fw_gaps);
    }
    let shape = if bare_pool.is_some() {
        "through the pool"
    } else {
        "one transaction each"
    };
    println!(
        "  runner            {:>8.0} transitions/s   {}",
        best.0,
        spread(best_gaps.0)
    );
    println!(
        "  W2 shape, bare SQL {shape}: {:>8.0} transitions/s   {}",
        best.1,
        spread(best_gaps.1)
    );
    println!(
        "  ratio runner / W2 shape: best {:.2}, per-round median {:.2}",
        best.0 / best.1,
        median(ratios)
    );
}

// ---------------------------------------------------------------------------------------
// Child processes

/// What a child process does.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ChildTask {
    place: Place,
    worker_id: String,
    concurrency: usize,
    lease_ms: u64,
    poll_ms: u64,
    expire_own: bool,
    hang_at: Option<u32>,
    /// Exit once nothing is claimable and nothing in flight; otherwise work until killed.
    until_idle: bool,
    /// W4: create this many runs here and measure them (no tool, then with the tool).
    in_flight: Option<InFlight>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct InFlight {
    runs: usize,
    steps: u32,
}

/// A worker in a process of its own, and what it prints.
struct ChildProc {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildProc {
    fn spawn(task: &ChildTask) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this program"))
            .env(CHILD_ENV, serde_json::to_string(task).expect("task"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a worker process");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line the child prints (blocking this thread: use from `spawn_blocking`
    /// or when nothing else of this process needs to run).
    fn line(&self) -> String {
        self.lines.recv().expect("the worker process ended early")
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait(mut self) {
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "a worker process failed: {status}");
    }
}

async fn child_main(task: ChildTask) {
    let opened = task.place.open().await;
    let store = opened.store();
    if let Some(w4) = task.in_flight {
        in_flight_child(&store, &task, w4).await;
        return;
    }
    let (runner, _) = new_runner(
        store,
        &task.worker_id,
        Duration::from_millis(task.lease_ms),
        task.hang_at,
    );
    let worker = Worker::new(
        runner,
        WorkerConfig {
            concurrency: task.concurrency,
            poll_interval: Duration::from_millis(task.poll_ms),
            expire_own_leases_at_start: task.expire_own,
            retention: None,
        },
    );
    println!("ready");
    let stats = if task.until_idle {
        worker.run_until_idle().await
    } else {
        worker.run_until(std::future::pending()).await
    };
    println!(
        "{}",
        json!({ "runs": stats.runs_driven, "errors": stats.errors })
    );
}

/// W4 in the child: `w4.runs` runs in flight at once, without the tool call and then with
/// it; prints one JSON line of figures.
async fn in_flight_child(store: &Arc<dyn Store>, task: &ChildTask, w4: InFlight) {
    let (idle_rss, _) = rss_kib();
    let mut out = serde_json::Map::new();
    out.insert("idle_rss_kib".into(), json!(idle_rss));
    for (phase, think_ms) in [("no_tool", 0), ("tool", TOOL_WAIT_MS)] {
        let (runner, commits) = new_runner(
            store.clone(),
            &format!("{}-{phase}", task.worker_id),
            Duration::from_secs(30),
            None,
        );
        let plan = Plan {
            steps: w4.steps,
            think_ms,
            pause_at: 0,
        };
        for r in 0..w4.runs {
            runner
                .start(&format!("{phase}-{r}"), initial(plan))
                .await
                .expect("start");
        }
        let worker = Worker::new(
            runner,
            WorkerConfig {
                concurrency: w4.runs,
                poll_interval: Duration::from_millis(100),
                expire_own_leases_at_start: false,
                retention: None,
            },
        );
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib().0, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let started = Instant::now();
        let stats = worker.run_until_idle().await;
        let wall = started.elapsed();
        sampler.abort();
        assert_eq!(stats.runs_driven, w4.runs as u64, "every run finished");
        let mut gaps = commits.take_gaps();
        gaps.sort();
        let steps = u64::from(w4.steps + 1) * w4.runs as u64;
        out.insert(
            phase.into(),
            json!({
                "steps_per_s": rate(steps, wall),
                "p50_ms": pct(&gaps, 0.5),
                "p99_ms": pct(&gaps, 0.99),
                "peak_rss_kib": peak.load(std::sync::atomic::Ordering::Relaxed),
                "bookkeeping_bytes": commits.heap_bytes(),
            }),
        );
    }
    println!("{}", serde_json::Value::Object(out));
}

// ---------------------------------------------------------------------------------------
// W3: mass resume

/// Wait until `check` holds, polling.
async fn until(mut check: impl AsyncFnMut() -> bool) {
    while !check().await {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether every run of `ids` satisfies `pred` (one listing: polling must not load the
/// store it measures).
async fn runs_at(
    store: &Arc<dyn Store>,
    ids: &[String],
    pred: impl Fn(&agent_core::store::RunRecord) -> bool,
) -> bool {
    let listed = store
        .list_runs(&agent_core::store::RunFilter::default())
        .await
        .expect("list");
    let ids: std::collections::HashSet<&String> = ids.iter().collect();
    let matching = listed
        .iter()
        .filter(|r| ids.contains(&r.id) && pred(r))
        .count();
    matching == ids.len()
}

/// Wait until every run of `ids` completed, then kill the worker process driving them.
async fn until_completed(store: &Arc<dyn Store>, ids: &[String], worker: ChildProc) {
    until(async || runs_at(store, ids, |r| r.status == RunStatus::Completed).await).await;
    worker.kill();
}

/// When each run of `ids` committed version `v` (store clock, ms).
async fn committed(store: &Arc<dyn Store>, ids: &[String], v: u64) -> Vec<i64> {
    let mut at = Vec::with_capacity(ids.len());
    for id in ids {
        let history = store.history(id).await.expect("history");
        let t = history.into_iter().find(|t| t.version == v);
        at.push(t.expect("the version is committed").created_at);
    }
    at
}

/// Each time of `to` after the matching one of `from`.
fn since(to: &[i64], from: &[i64]) -> Vec<Duration> {
    to.iter().zip(from).map(|(t, f)| ms_span(t - f)).collect()
}

async fn w3(place: &Place, sizes: &Sizes) {
    let n = sizes.w3_runs;
    println!(
        "\n## W3 mass resume: {}, {n} runs stopped after step 5",
        place.label()
    );
    let lease_ms = 2_000;
    let task = |worker_id: &str, expire_own: bool, hang_at: Option<u32>| ChildTask {
        place: place.clone(),
        worker_id: worker_id.to_owned(),
        concurrency: n,
        lease_ms,
        poll_ms: 500,
        expire_own,
        hang_at,
        until_idle: false,
        in_flight: None,
    };
    for (case, same_id) in [
        ("restart, same worker id", true),
        ("restart, another worker id", false),
    ] {
        let place = place.fresh(if same_id { "w3a" } else { "w3b" });
        let opened = place.open().await;
        let store = opened.store();
        let (seeder, _) = new_runner(store.clone(), "starter", Duration::from_secs(30), None);
        let ids: Vec<String> = (0..n).map(|i| format!("w3-{i}")).collect();
        for id in &ids {
            seeder.start(id, initial(PLAN10)).await.expect("start");
        }
        let mut t = task("w3-worker", false, Some(5));
        t.place = place.clone();
        let crashed = ChildProc::spawn(&t);
        until(async || runs_at(&store, &ids, |r| r.version >= 5).await).await;
        crashed.kill();
        let mut expiry = Vec::new();
        for id in &ids {
            let r = store.load_run(id).await.expect("load").expect("run");
            expiry.push(r.lease_expires_at.unwrap_or(0));
        }
        let mut t = task(
            if same_id { "w3-worker" } else { "w3-other" },
            same_id,
            None,
        );
        t.place = place.clone();
        let start_ms = now_ms();
        let resumed = ChildProc::spawn(&t);
        let (resumed, ready_ms) = tokio::task::spawn_blocking(move || {
            assert_eq!(resumed.line(), "ready");
            (resumed, now_ms())
        })
        .await
        .expect("ready");
        until_completed(&store, &ids, resumed).await;
        let commits = committed(&store, &ids, 6).await;
        let from_start = since(&commits, &vec![start_ms; n]);
        let from_ready = since(&commits, &vec![ready_ms; n]);
        let from_expiry = since(&commits, &expiry);
        println!(
            "  {case}: step 6 committed, from the new process's start: {}",
            spread(from_start)
        );
        println!(
            "  {case}: from its worker's start (store open, {} ms after the process's): {}",
            ready_ms - start_ms,
            spread(from_ready)
        );
        if !same_id {
            println!(
                "  {case}: from the lease's expiry ({lease_ms} ms lease): {}",
                spread(from_expiry)
            );
        }
        opened.remove(&place).await;
    }

    for warm in [false, true] {
        w3_signals(place, n, &task, warm).await;
    }
}

/// W3's signals: `n` runs waiting for a signal, a worker process idle, then the `n` signals
/// sent at once by another process's store, whose pool is as the starts left it (one
/// connection) or, `warm`, already holds a connection per concurrent send, as the pool of a
/// service sending signals all day does. (The sends go through the store's group commit,
/// on connections of its own, so the pool's warmth now matters little: the two cases
/// show it.)
async fn w3_signals(
    place: &Place,
    n: usize,
    task: &dyn Fn(&str, bool, Option<u32>) -> ChildTask,
    warm: bool,
) {
    let pool = if warm { "warm" } else { "cold" };
    let place = place.fresh(if warm { "w3d" } else { "w3c" });
    let opened = place.open().await;
    let store = opened.store();
    let (seeder, _) = new_runner(store.clone(), "starter", Duration::from_secs(30), None);
    let ids: Vec<String> = (0..n).map(|i| format!("w3s-{i}")).collect();
    let plan = Plan {
        steps: 10,
        think_ms: 0,
        pause_at: 5,
    };
    for id in &ids {
        seeder.start(id, initial(plan)).await.expect("start");
    }
    let mut t = task("w3-first", false, None);
    t.place = place.clone();
    t.until_idle = true;
    let first = ChildProc::spawn(&t);
    tokio::task::spawn_blocking(move || first.wait())
        .await
        .expect("first worker");
    assert!(
        runs_at(&store, &ids, |r| r.status == RunStatus::Waiting).await,
        "every run waits"
    );
    let waiting_version = store
        .load_run(&ids[0])
        .await
        .expect("load")
        .expect("run")
        .version;
    let mut t = task("w3-second", false, None);
    t.place = place.clone();
    let start_ms = now_ms();
    let second = ChildProc::spawn(&t);
    let second = tokio::task::spawn_blocking(move || {
        assert_eq!(second.line(), "ready");
        second
    })
    .await
    .expect("ready");
    if warm {
        let reads: Vec<_> = (ids.iter().cloned())
            .map(|id| {
                let store = store.clone();
                tokio::spawn(async move { store.history(&id).await.expect("read") })
            })
            .collect();
        for read in reads {
            read.await.expect("read");
        }
    }
    // Let the new worker find nothing and go idle, as a worker waiting for work does.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sends = Vec::new();
    for id in &ids {
        let seeder = seeder.clone();
        let id = id.clone();
        sends.push(tokio::spawn(async move {
            let at = now_ms();
            seeder.signal(&id, "go", json!(true)).await.expect("signal");
            (id, at, now_ms())
        }));
    }
    let mut sent = Vec::new();
    for s in sends {
        sent.push(s.await.expect("send"));
    }
    until_completed(&store, &ids, second).await;
    let commits = committed(&store, &ids, waiting_version + 1).await;
    let sent_at: Vec<i64> = sent.iter().map(|(_, at, _)| *at).collect();
    let stored_at: Vec<i64> = sent.iter().map(|(_, _, stored)| *stored).collect();
    let from_signal = since(&commits, &sent_at);
    let from_stored = since(&commits, &stored_at);
    let sending: Vec<Duration> = sent
        .iter()
        .map(|(_, at, stored)| ms_span(stored - at))
        .collect();
    let from_start = since(&commits, &vec![start_ms; n]);
    println!(
        "  signals (sender's pool {pool}), all sent at once to a running worker process: next step committed, from the signal: {}",
        spread(from_signal)
    );
    // The sends share the bench's pool: the time one waits for a connection counts above,
    // not here.
    println!(
        "  signals ({pool}): from the send's return (the signal stored): {}",
        spread(from_stored)
    );
    println!("  signals ({pool}): the send itself: {}", spread(sending));
    println!(
        "  signals ({pool}): from the new process's start: {}",
        spread(from_start)
    );
    opened.remove(&place).await;
}

// ---------------------------------------------------------------------------------------
// W4: runs in flight

async fn w4(place: &Place, sizes: &Sizes) {
    println!(
        "\n## W4 runs in flight: {}, one worker process, {} steps per run, tool waits {TOOL_WAIT_MS} ms",
        place.label(),
        sizes.w4_steps
    );
    for &runs in &sizes.w4_in_flight {
        let place = place.fresh(&format!("w4{runs}"));
        let task = ChildTask {
            place: place.clone(),
            worker_id: "w4".into(),
            concurrency: runs,
            lease_ms: 30_000,
            poll_ms: 100,
            expire_own: false,
            hang_at: None,
            until_idle: true,
            in_flight: Some(InFlight {
                runs,
                steps: sizes.w4_steps,
            }),
        };
        let child = ChildProc::spawn(&task);
        let (child, line) = tokio::task::spawn_blocking(move || {
            let line = child.line();
            (child, line)
        })
        .await
        .expect("figures");
        child.wait();
        place.open().await.remove(&place).await;
        let v: serde_json::Value = serde_json::from_str(&line).expect("figures");
        let idle = v["idle_rss_kib"].as_f64().unwrap_or(0.0);
        let (t, nt) = (&v["tool"], &v["no_tool"]);
        let peak_of = |phase: &serde_json::Value| phase["peak_rss_kib"].as_f64().unwrap_or(0.0);
        let peak = peak_of(t).max(peak_of(nt));
        #[allow(clippy::cast_precision_loss)]
        let per_run = |peak: f64| (peak - idle) / runs as f64;

        println!(
            "  {runs:>6} in flight: with tool {:>7.0} steps/s (p50 {:.0} / p99 {:.0} ms); without {:>7.0} steps/s (p99 {:.1} ms); ratio {:.2} (target 0.5 at 10,000); RSS idle {:.1} MiB, peak {:.1} MiB, {:.1} KiB per run in flight (without the tool {:.1}, with it {:.1})",
            t["steps_per_s"].as_f64().unwrap_or(0.0),
            t["p50_ms"].as_f64().unwrap_or(0.0),
            t["p99_ms"].as_f64().unwrap_or(0.0),
            nt["steps_per_s"].as_f64().unwrap_or(0.0),
            nt["p99_ms"].as_f64().unwrap_or(0.0),
            t["steps_per_s"].as_f64().unwrap_or(0.0) / nt["steps_per_s"].as_f64().unwrap_or(1.0),
            idle / 1024.0,
            peak / 1024.0,
            per_run(peak),
            per_run(peak_of(nt)),
            per_run(peak_of(t)),
        );
        // Counted in the figures above, though no part of the worker.
        let bookkeeping = |phase: &serde_json::Value| {
            phase["bookkeeping_bytes"].as_f64().unwrap_or(0.0) / 1024.0 / runs as f64
        };
        println!(
            "           of which the bench's own bookkeeping (commit times): {:.2} KiB per run without the tool, {:.2} with it",
            bookkeeping(nt),
            bookkeeping(t),
        );
    }
}

// ---------------------------------------------------------------------------------------
// W5: waiting runs

async fn w5(place: &Place, sizes: &Sizes) {
    for &n in &sizes.w5_waiting {
        let place = place.fresh(&format!("w5{n}"));
        let opened = place.open().await;
        let store = opened.store();
        println!(
            "\n## W5 waiting runs: {}, {n} runs waiting for a signal",
            place.label()
        );
        let (runner, commits) = new_runner(store.clone(), "w5", Duration::from_secs(30), None);
        // One real run gives the agent's fingerprint and state shape; the rest are copies
        // written in one statement.
        let plan = Plan {
            steps: 1,
            think_ms: 0,
            pause_at: 0,
        };
        runner
            .start("w5-model", Flow::Step { plan, at: 0 })
            .await
            .expect("start");
        let loaded = Instant::now();
        let (bytes, what) = load_waiting(&opened, n).await;
        #[allow(clippy::cast_precision_loss)]
        let per_run = bytes as f64 / n as f64;
        println!(
            "  loaded in {:.1} s; {per_run:.0} bytes per waiting run ({what})",
            loaded.elapsed().as_secs_f64()
        );
        let agents = vec!["Flow".to_owned()];
        let mut claims = Vec::new();
        for _ in 0..sizes.w5_samples {
            let t = Instant::now();
            let got = store
                .claim_next(&agents, "w5-probe", Duration::from_secs(30), 16)
                .await
                .expect("claim");
            claims.push(t.elapsed());
            assert!(got.is_empty(), "nothing is claimable");
        }
        println!("  claim_next with nothing claimable: {}", spread(claims));
        println!("  plan of claim_next:");
        let plan = match &opened {
            Opened::Pg(pg) => pg.explain_claim_next(&agents, 16).await,
            Opened::Sqlite(lite) => lite.explain_claim_next(&agents, 16).await,
        };
        for line in plan.expect("explain").lines() {
            println!("    {line}");
        }
        commits
            .track
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let worker = Arc::new(Worker::new(
            runner.clone(),
            WorkerConfig {
                concurrency: 16,
                poll_interval: Duration::from_millis(500),
                expire_own_leases_at_start: false,
                retention: None,
            },
        ));
        let stop = Arc::new(tokio::sync::Notify::new());
        let working = {
            let worker = worker.clone();
            let stop = stop.clone();
            tokio::spawn(async move { worker.run_until(stop.notified()).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut resumed = Vec::new();
        for k in 0..sizes.w5_samples {
            let id = format!("w5-{}", 1 + (k * 7919) % n);
            let t = Instant::now();
            runner.signal(&id, "go", json!(true)).await.expect("signal");
            loop {
                let notified = commits.notify.notified();
                if commits
                    .applied
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(r, v)| *r == id && *v == 1)
                {
                    break;
                }
                let _ = tokio::time::timeout(Duration::from_millis(20), notified).await;
            }
            resumed.push(t.elapsed());
            // Let the run finish before the next sample.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "  signal to its step committed (a worker waiting for work): {}",
            spread(resumed)
        );
        stop.notify_one();
        working.await.expect("worker");
        opened.remove(&place).await;
    }
}

/// The state of every copy W5 writes: `Pause` at the first step, waiting for `go`.
const W5_STATE: &str =
    r#"{"Pause": {"plan": {"steps": 1, "think_ms": 0, "pause_at": 0}, "at": 0}}"#;

/// Turn the run `w5-model` into `n` runs `w5-1`..`w5-n` waiting for signal `go`, each with
/// its first transition, written in one statement; the bytes they added to the store
/// (tables and indexes) and what was counted.
async fn load_waiting(opened: &Opened, n: usize) -> (i64, &'static str) {
    match opened {
        Opened::Pg(pg) => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "INSERT INTO runs (id, agent, fingerprint, state_name, state, version, status, \
                   waiting_for, creation_hash, last_hash, snapshot_version) \
                 SELECT 'w5-' || g, agent, fingerprint, 'Pause', '{W5_STATE}', \
                   0, 'waiting', 'go', creation_hash, last_hash, 0 \
                 FROM runs, generate_series(1, {n}) g WHERE id = 'w5-model'; \
                 INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, epoch, \
                   hash, payload_kind, payload) \
                 SELECT id, 0, 'Pause', 'Pause', 'start', 'waiting', 0, last_hash, 'snapshot', state \
                 FROM runs WHERE id LIKE 'w5-%' AND id <> 'w5-model'; \
                 DELETE FROM transitions WHERE run_id = 'w5-model'; DELETE FROM runs WHERE id = 'w5-model'; \
                 ANALYZE runs; ANALYZE transitions; ANALYZE signals"
            )))
            .execute(pg.pool())
            .await
            .expect("waiting runs");
            let bytes: i64 = sqlx::query_scalar(
                "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c \
                 JOIN pg_namespace s ON s.oid = c.relnamespace \
                 WHERE s.nspname = current_schema() AND c.relkind = 'r' \
                 AND c.relname IN ('runs', 'transitions')",
            )
            .fetch_one(pg.pool())
            .await
            .expect("sizes");
            (bytes, "runs and transitions, tables and indexes")
        }
        Opened::Sqlite(lite) => {
            // No `ANALYZE`: the store never runs it, so its claims are planned without
            // statistics, as here.
            let size = "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()";
            let before: i64 = sqlx::query_scalar(size)
                .fetch_one(lite.pool())
                .await
                .expect("size");
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "BEGIN IMMEDIATE; \
                 WITH RECURSIVE g(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM g WHERE k < {n}) \
                 INSERT INTO runs (id, agent, fingerprint, state_name, state, version, status, \
                   waiting_for, creation_hash, last_hash, snapshot_version, created_at, \
                   updated_at, seq, agent_version) \
                 SELECT 'w5-' || k, agent, fingerprint, 'Pause', '{W5_STATE}', 0, 'waiting', \
                   'go', creation_hash, last_hash, 0, created_at, updated_at, seq + k, \
                   agent_version \
                 FROM runs, g WHERE id = 'w5-model'; \
                 INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, \
                   epoch, created_at, hash, payload_kind, payload) \
                 SELECT id, 0, 'Pause', 'Pause', 'start', 'waiting', 0, created_at, last_hash, \
                   'snapshot', state FROM runs WHERE id LIKE 'w5-%' AND id <> 'w5-model'; \
                 DELETE FROM transitions WHERE run_id = 'w5-model'; \
                 DELETE FROM runs WHERE id = 'w5-model'; COMMIT"
            )))
            .execute(lite.pool())
            .await
            .expect("waiting runs");
            let after: i64 = sqlx::query_scalar(size)
                .fetch_one(lite.pool())
                .await
                .expect("size");
            (after - before, "the file's growth: every table and index")
        }
    }
}

// ---------------------------------------------------------------------------------------
// W6: more worker processes

async fn w6(place: &Place, sizes: &Sizes) {
    let runs = sizes.w2_agents * sizes.w2_runs;
    println!("\n## W6 more workers: PostgreSQL, {runs} runs x 10 steps, 64 runs in flight in all");
    for processes in [1_usize, 2, 4] {
        let place = place.fresh(&format!("w6{processes}"));
        let opened = place.open().await;
        let Opened::Pg(pg) = &opened else { return };
        let store = opened.store();
        let (seeder, _) = new_runner(store.clone(), "starter", Duration::from_secs(30), None);
        for i in 0..runs {
            seeder
                .start(&format!("w6-{i}"), initial(PLAN10))
                .await
                .expect("start");
        }
        let cpu0 = Cpu::now();
        let started = Instant::now();
        let children: Vec<ChildProc> = (0..processes)
            .map(|p| {
                ChildProc::spawn(&ChildTask {
                    place: place.clone(),
                    worker_id: format!("w6-{p}"),
                    concurrency: 64 / processes,
                    lease_ms: 30_000,
                    poll_ms: 100,
                    expire_own: false,
                    hang_at: None,
                    until_idle: true,
                    in_flight: None,
                })
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            for c in children {
                c.wait();
            }
        })
        .await
        .expect("workers");
        let wall = started.elapsed();
        let cpu1 = Cpu::now();
        let (span_ms, commits, p50, p99): (f64, i64, f64, f64) = sqlx::query_as(
            "WITH t AS (SELECT created_at, created_at - lag(created_at) OVER \
               (PARTITION BY run_id ORDER BY version) AS gap FROM transitions) \
             SELECT (extract(epoch FROM max(created_at) - min(created_at)) * 1000)::float8, \
               count(gap), \
               (extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY gap)) * 1000)::float8, \
               (extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY gap)) * 1000)::float8 \
             FROM t",
        )
        .fetch_one(pg.pool())
        .await
        .expect("figures");
        #[allow(clippy::cast_precision_loss)]
        let per = |d: Duration| d.as_secs_f64() * 1e6 / commits as f64;
        #[allow(clippy::cast_precision_loss)]
        let per_s = commits as f64 / (span_ms / 1e3);
        println!(
            "  {processes} process(es): {per_s:>6.0} transitions/s (first to last commit; {:.1} s with process starts), step p50 {p50:.1} / p99 {p99:.1} ms; CPU µs/transition: workers {:.0}, server {:.0}",
            wall.as_secs_f64(),
            per(cpu1.children.saturating_sub(cpu0.children)),
            per(cpu1.server.saturating_sub(cpu0.server)),
        );
        opened.remove(&place).await;
    }
}

// ---------------------------------------------------------------------------------------

/// Sizes: reduced by default, the issue's with `WORKLOADS_FULL=1`.
#[derive(Debug)]
struct Sizes {
    rounds: usize,
    w1_runs: usize,
    w2_agents: usize,
    w2_runs: usize,
    w3_runs: usize,
    w4_steps: u32,
    w4_in_flight: Vec<usize>,
    w5_waiting: Vec<usize>,
    w5_samples: usize,
}

impl Sizes {
    /// The sizes of `WORKLOADS_FULL`, or the reduced ones; `W4_IN_FLIGHT=100,10000`
    /// replaces W4's list of runs in flight.
    fn from_env() -> Self {
        let mut sizes = Self::of_env();
        if let Ok(list) = std::env::var("W4_IN_FLIGHT") {
            sizes.w4_in_flight = list
                .split(',')
                .map(|n| {
                    n.trim()
                        .replace('_', "")
                        .parse()
                        .expect("W4_IN_FLIGHT: numbers")
                })
                .collect();
        }
        sizes
    }

    fn of_env() -> Self {
        if std::env::var("WORKLOADS_FULL").is_ok_and(|v| v == "1") {
            Self {
                rounds: 3,
                w1_runs: 200,
                w2_agents: 64,
                w2_runs: 8,
                w3_runs: 200,
                w4_steps: 5,
                w4_in_flight: vec![1, 100, 1_000, 10_000],
                w5_waiting: vec![1_000, 1_000_000],
                w5_samples: 50,
            }
        } else {
            Self {
                rounds: 3,
                w1_runs: 50,
                w2_agents: 64,
                w2_runs: 2,
                w3_runs: 200,
                w4_steps: 5,
                w4_in_flight: vec![1, 100, 1_000],
                w5_waiting: vec![1_000, 100_000],
                w5_samples: 30,
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Ok(task) = std::env::var(CHILD_ENV) {
        child_main(serde_json::from_str(&task).expect("child task")).await;
        return;
    }
    let sizes = Sizes::from_env();
    let only = std::env::var("WORKLOADS_ONLY").unwrap_or_default();
    let run = |w: &str| only.is_empty() || only.split(',').any(|o| o.trim() == w);
    let lite = Place::Sqlite {
        path: String::new(),
    };
    let pg = std::env::var("DATABASE_URL").ok().map(|url| Place::Pg {
        url,
        schema: String::new(),
    });
    if pg.is_none() {
        eprintln!("DATABASE_URL is not set: SQLite only (W3 and W6 need PostgreSQL)");
    }
    println!("workloads, sizes: {sizes:?}");
    let places: Vec<Place> = pg.iter().cloned().chain([lite]).collect();
    for place in &places {
        if run("w1") || run("w2") {
            let p = place.fresh("w12");
            let opened = p.open().await;
            w1_w2(&p, &opened, &sizes).await;
            opened.remove(&p).await;
        }
        // SQLite is one process's store (a second process is refused): its W3 would be a
        // restart of the same process, which W3 is not.
        if run("w3") && matches!(place, Place::Pg { .. }) {
            w3(place, &sizes).await;
        }
        if run("w4") {
            w4(place, &sizes).await;
        }
        if run("retention") && retention_here(place) {
            let p = place.fresh("ret");
            let opened = p.open().await;
            retention(&p, &opened, &sizes).await;
            opened.remove(&p).await;
        }
        if run("w5") {
            w5(place, &sizes).await;
        }
    }
    if let Some(pg) = &pg
        && run("w6")
    {
        w6(pg, &sizes).await;
    }
}

// ---------------------------------------------------------------------------------------
// Retention run by the worker: its cost under W2, and the size of a store it keeps

/// Whether the retention workload runs on `place` (`RETENTION_STORE`: `pg`, `sqlite`, or
/// unset for both).
fn retention_here(place: &Place) -> bool {
    match std::env::var("RETENTION_STORE").ok().as_deref() {
        Some("pg") => matches!(place, Place::Pg { .. }),
        Some("sqlite") => matches!(place, Place::Sqlite { .. }),
        _ => true,
    }
}

/// The retention the bench applies: aggressive, so that it works during every round.
fn bench_retention() -> Retention {
    Retention {
        interval: Duration::from_millis(200),
        history_window: Some(Duration::from_secs(1)),
        delete_final_after: Some(Duration::from_secs(2)),
        max_runs_per_batch: 500,
    }
}

/// Apply `retention` every interval until `stop` (what the worker's retention task does);
/// what it removed in all.
async fn retention_loop(
    store: Arc<dyn Store>,
    retention: Retention,
    stop: Arc<tokio::sync::Notify>,
) -> agent_core::store::PruneReport {
    let mut total = agent_core::store::PruneReport::default();
    loop {
        tokio::select! {
            () = stop.notified() => return total,
            () = tokio::time::sleep(retention.interval) => {}
        }
        // A pass that cannot keep up goes on batch after batch: stop it where it is (its
        // transaction in flight rolls back).
        let r = tokio::select! {
            () = stop.notified() => return total,
            r = retention.apply(store.as_ref()) => r.expect("retention pass"),
        };
        total.versions_removed += r.versions_removed;
        total.runs_pruned += r.runs_pruned;
        total.runs_deleted += r.runs_deleted;
    }
}

/// Runs, versions and bytes the store holds (SQLite: the pages in use, and the file with
/// its write-ahead log; PostgreSQL: tables, indexes and TOAST of the store's schema).
async fn store_size(opened: &Opened, place: &Place) -> (i64, i64, i64, i64) {
    match opened {
        Opened::Sqlite(s) => {
            let q = |sql: &'static str| async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(s.pool())
                    .await
                    .expect(sql)
            };
            let runs = q("SELECT count(*) FROM runs").await;
            let versions = q("SELECT count(*) FROM transitions").await;
            let used = (q("PRAGMA page_count").await - q("PRAGMA freelist_count").await)
                * q("PRAGMA page_size").await;
            let file = match place {
                Place::Sqlite { path } => ["", "-wal"]
                    .iter()
                    .filter_map(|x| std::fs::metadata(format!("{path}{x}")).ok())
                    .map(|m| i64::try_from(m.len()).unwrap_or(0))
                    .sum(),
                Place::Pg { .. } => 0,
            };
            (runs, versions, used, file)
        }
        Opened::Pg(s) => {
            let q = |sql: &'static str| async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(s.pool())
                    .await
                    .expect(sql)
            };
            let runs = q("SELECT count(*) FROM runs").await;
            let versions = q("SELECT count(*) FROM transitions").await;
            let bytes = q(
                "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'",
            )
            .await;
            (runs, versions, bytes, bytes)
        }
    }
}

/// How long each round of the retention's cost runs the W2 load: many retention passes
/// (one every 200 ms), however fast one W2 batch of runs is (a fraction of a second in a
/// release build on PostgreSQL, shorter than one interval).
const RETENTION_ROUND: Duration = Duration::from_secs(4);

/// The W2 load, batch after batch, for at least `min`: transitions per second over all.
async fn w2_for(store: &Arc<dyn Store>, tag: &str, sizes: &Sizes, min: Duration) -> f64 {
    let started = Instant::now();
    let mut transitions = 0;
    let mut batch = 0;
    while batch == 0 || started.elapsed() < min {
        let (_, _, per_run) = whole_runs(
            store,
            &format!("{tag}-{batch}"),
            sizes.w2_agents,
            sizes.w2_runs,
            PLAN10,
        )
        .await;
        transitions += (sizes.w2_agents * sizes.w2_runs) as u64 * per_run;
        batch += 1;
    }
    rate(transitions, started.elapsed())
}

async fn retention(place: &Place, opened: &Opened, sizes: &Sizes) {
    let store = opened.store();
    let label = place.label();
    whole_runs(&store, "warm", 1, 5, PLAN10).await;
    println!(
        "\n## Retention run by the worker: {label}, W2 load ({} agents x {} runs x 10 steps), \
         retention every 200 ms (history window 1 s, final runs deleted after 2 s), {} rounds \
         of {} s without then {} s with",
        sizes.w2_agents,
        sizes.w2_runs,
        sizes.rounds,
        RETENTION_ROUND.as_secs(),
        RETENTION_ROUND.as_secs()
    );
    let mut ratios = Vec::new();
    for round in 0..sizes.rounds {
        let without = w2_for(&store, &format!("rn{round}"), sizes, RETENTION_ROUND).await;
        // Let the runs of the round without age past the window, so that the round with
        // retention has work to do from its start.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(retention_loop(
            store.clone(),
            bench_retention(),
            stop.clone(),
        ));
        let with = w2_for(&store, &format!("rw{round}"), sizes, RETENTION_ROUND).await;
        stop.notify_one();
        let removed = task.await.expect("retention task");
        println!(
            "  round {round}: without {without:>6.0}/s, with retention {with:>6.0}/s, ratio \
             {:.2}; retention removed {} versions of {} runs and deleted {} runs meanwhile",
            with / without,
            removed.versions_removed,
            removed.runs_pruned,
            removed.runs_deleted
        );
        ratios.push(with / without);
    }
    println!(
        "  ratio with retention / without: per-round median {:.2}",
        median(ratios)
    );

    let secs: u64 = std::env::var("RETENTION_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    println!(
        "\n## Retention steady state: {label}, the W2 load back to back for {secs} s with retention"
    );
    let stop = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn(retention_loop(
        store.clone(),
        bench_retention(),
        stop.clone(),
    ));
    let started = Instant::now();
    let mut next_report = Duration::ZERO;
    let mut round = 0;
    let mut transitions = 0.0;
    while started.elapsed() < Duration::from_secs(secs) {
        let (_, _, per_run) = whole_runs(
            &store,
            &format!("ss{round}"),
            sizes.w2_agents,
            sizes.w2_runs,
            PLAN10,
        )
        .await;
        transitions += (sizes.w2_agents * sizes.w2_runs) as f64 * per_run as f64;
        round += 1;
        if started.elapsed() >= next_report {
            let (runs, versions, used, file) = store_size(opened, place).await;
            println!(
                "  at {:>4.0} s: {runs:>6} runs, {versions:>7} versions stored; {:.1} MB in use, \
                 {:.1} MB on disk ({} W2 rounds so far)",
                started.elapsed().as_secs_f64(),
                used as f64 / 1e6,
                file as f64 / 1e6,
                round
            );
            // Every 10 s for a short run, every minute for a long one.
            next_report += Duration::from_secs(if secs > 600 { 60 } else { 10 });
        }
    }
    stop.notify_one();
    let removed = task.await.expect("retention task");
    let (runs, versions, used, file) = store_size(opened, place).await;
    println!(
        "  end, {:.0} s, {round} W2 rounds (~{:.0} transitions): {runs} runs, {versions} \
         versions stored; {:.1} MB in use, {:.1} MB on disk; retention deleted {} runs and \
         removed {} versions",
        started.elapsed().as_secs_f64(),
        transitions,
        used as f64 / 1e6,
        file as f64 / 1e6,
        removed.runs_deleted,
        removed.versions_removed
    );
}
