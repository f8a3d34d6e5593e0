//! Workers: the options shared by the `e2e-worker` process and in-process workers, the
//! worker loop itself, and handles on worker processes (kill -9, SIGSTOP/SIGCONT, SIGTERM).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent_core::runner::{RunnerConfig, Worker, WorkerConfig};
use agent_core::store::Store;
use agent_observe::metrics::{RunGauges, serve_metrics};
use agent_pg::PgStore;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use crate::service::{Latency, Service};
use crate::{limited, shop, shop_v2, tree, triggered};

/// Which agents a worker drives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agents {
    /// The shop ([`shop::Shop`]): one worker.
    #[default]
    Shop,
    /// The tree ([`tree::Fanout`] parents and their [`tree::Leaf`] children): one worker
    /// per agent, on the same store, in the same process.
    Tree,
    /// The triggers soak's [`triggered::Event`]: a worker ticking its schedule, and NATS
    /// and MQTT triggers starting its runs ([`WorkerOpts::triggers`]).
    Triggers,
    /// [`limited::Quote`]: runs asking the provider stand-in of [`WorkerOpts::limited`].
    Limited,
}

/// The provider stand-in and the shared limit of [`Agents::Limited`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LimitedOpts {
    /// The stand-in's base URL.
    pub base: String,
    /// The shared limit, asks a second (none when absent).
    pub per_second: Option<u64>,
}

/// Everything a worker needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerOpts {
    /// The agents it drives (the shop when absent).
    #[serde(default)]
    pub agents: Agents,
    /// The version of the shop it runs: 1 ([`shop::Shop`]) when absent, or 2
    /// ([`shop_v2::ShopV2`], which also takes version 1 runs and migrates them).
    #[serde(default = "v1")]
    pub agent_version: u32,
    /// The store's database (possibly through the fault proxy).
    pub url: String,
    /// The fake service's database (direct).
    pub service_url: String,
    /// The test's schema.
    pub schema: String,
    /// This worker incarnation's id (lease owner, recorded with every call).
    pub worker_id: String,
    /// Runs driven at once.
    pub concurrency: usize,
    /// Lease time to live, ms.
    pub lease_ms: u64,
    /// Longest wait between claims without a notification, ms.
    pub poll_ms: u64,
    /// Tool latency range, ms.
    pub tool_latency: (u64, u64),
    /// Router latency range, ms.
    pub llm_latency: (u64, u64),
    /// Lost claims in a row without progress before a run is dead-lettered.
    pub max_claims: u32,
    /// Exit once this many runs exist and all are final (0: run until SIGTERM).
    pub exit_when_done: u64,
    /// Connections of the store's pool.
    pub store_pool: u32,
    /// Connections of the service's pool.
    pub service_pool: u32,
    /// What the triggers consume, in [`Agents::Triggers`] mode.
    #[serde(default)]
    pub triggers: Option<triggered::TriggerOpts>,
    /// The provider and limit, in [`Agents::Limited`] mode.
    #[serde(default)]
    pub limited: Option<LimitedOpts>,
    /// Serve Prometheus metrics on this loopback port, with the run gauges counted every
    /// second (the metrics test).
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

impl WorkerOpts {
    /// Defaults for `schema` on `url`.
    #[must_use]
    pub fn new(url: &str, schema: &str, worker_id: &str) -> Self {
        Self {
            agents: Agents::Shop,
            agent_version: 1,
            url: url.to_owned(),
            service_url: url.to_owned(),
            schema: schema.to_owned(),
            worker_id: worker_id.to_owned(),
            concurrency: 16,
            lease_ms: 2_000,
            poll_ms: 200,
            tool_latency: (0, 5),
            llm_latency: (1, 20),
            max_claims: 50,
            exit_when_done: 0,
            store_pool: 6,
            service_pool: 4,
            triggers: None,
            limited: None,
            metrics_port: None,
        }
    }
}

const fn v1() -> u32 {
    1
}

/// What a worker reports when it exits.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The incarnation.
    pub worker_id: String,
    /// Runs driven to a final or waiting status.
    pub runs_driven: u64,
    /// Runs given up because another worker held or took them (stale commits rejected).
    pub leases_lost: u64,
    /// Runs stopped by an error.
    pub errors: u64,
    /// Peak resident set, KiB (`VmHWM`).
    pub vm_hwm_kb: u64,
    /// Wall time, ms.
    pub wall_ms: u64,
}

/// What a process's workers did, added up (one worker for the shop, two for the tree).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Runs driven to a final or waiting status.
    pub runs_driven: u64,
    /// Runs given up because another worker held or took them.
    pub leases_lost: u64,
    /// Runs stopped by an error.
    pub errors: u64,
}

/// Peak resident set of this process in KiB, from `/proc/self/status`.
#[must_use]
pub fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Say a failed connection loudly the first time and every 25th (5 s) after: the workers
/// log errors only, and a shared server out of connections stalls a test without a word.
fn unreachable(what: &str, attempt: u32, error: &dyn std::fmt::Display) {
    if attempt.is_multiple_of(25) {
        tracing::error!(error = %error, attempt, "{what} not reachable; retrying");
    } else {
        tracing::debug!(error = %error, attempt, "{what} not reachable; retrying");
    }
}

async fn connect_store(opts: &WorkerOpts) -> Arc<PgStore> {
    let size = opts.store_pool.max(2);
    let mut attempt = 0;
    loop {
        match PgStore::connect_with(
            &opts.url,
            &opts.schema,
            PgPoolOptions::new().max_connections(size),
        )
        .await
        {
            Ok(s) => return Arc::new(s),
            Err(e) => {
                unreachable("store", attempt, &e);
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn connect_service(opts: &WorkerOpts) -> sqlx::PgPool {
    let size = opts.service_pool.max(1);
    let mut attempt = 0;
    loop {
        match crate::db::pool(&opts.service_url, &opts.schema, size).await {
            Ok(p) => return p,
            Err(e) => {
                unreachable("service", attempt, &e);
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Whether `expect` runs exist in the schema and all are final.
async fn all_done(pool: &sqlx::PgPool, expect: u64) -> bool {
    let row: Result<(i64, i64), _> = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status NOT IN \
         ('completed', 'compensated', 'failed', 'quarantined', 'dead_lettered', 'cancelled', \
         'terminated')) FROM runs",
    )
    .fetch_one(pool)
    .await;
    matches!(row, Ok((n, open)) if u64::try_from(n).unwrap_or(0) >= expect && open == 0)
}

/// Run a worker until `shutdown` (or until every run is final, with `exit_when_done`).
///
/// # Panics
/// When the metrics endpoint of [`WorkerOpts::metrics_port`] cannot be served.
pub async fn run_worker(
    opts: &WorkerOpts,
    shutdown: impl std::future::Future<Output = ()>,
) -> WorkerReport {
    let started = std::time::Instant::now();
    tokio::pin!(shutdown);
    let connect = async { (connect_store(opts).await, connect_service(opts).await) };
    let (store, svc_pool) = tokio::select! {
        c = connect => c,
        () = &mut shutdown => {
            return WorkerReport {
                worker_id: opts.worker_id.clone(),
                vm_hwm_kb: vm_hwm_kb(),
                ..WorkerReport::default()
            };
        }
    };
    let svc = Arc::new(Service::new(
        svc_pool.clone(),
        &opts.worker_id,
        Latency::ms(opts.tool_latency.0, opts.tool_latency.1),
        Latency::ms(opts.llm_latency.0, opts.llm_latency.1),
    ));
    let config = RunnerConfig {
        worker_id: opts.worker_id.clone(),
        lease_ttl: Duration::from_millis(opts.lease_ms),
        max_claims_without_progress: opts.max_claims,
        store_retries: 8,
        ..RunnerConfig::default()
    };
    let store_dyn: Arc<dyn Store> = store.clone();
    // Held until the worker returns: the endpoint and the gauges stop when dropped.
    let _metrics = match opts.metrics_port {
        Some(port) => Some((
            serve_metrics(SocketAddr::from(([127, 0, 0, 1], port)))
                .await
                .unwrap_or_else(|e| panic!("metrics: {e}")),
            RunGauges::spawn(store_dyn.clone(), Duration::from_secs(1)),
        )),
        None => None,
    };
    let workers = WorkerConfig {
        concurrency: opts.concurrency,
        poll_interval: Duration::from_millis(opts.poll_ms),
        ..WorkerConfig::default()
    };
    let expect = opts.exit_when_done;
    let done = async {
        if expect == 0 {
            std::future::pending::<()>().await;
        }
        while !all_done(&svc_pool, expect).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let stop = async {
        tokio::select! {
            () = &mut shutdown => {}
            () = done => {}
        }
    };
    let stats = match opts.agents {
        Agents::Shop => {
            let s = if opts.agent_version >= 2 {
                Worker::new(shop_v2::runner(store_dyn, &svc, config), workers)
                    .run_until(stop)
                    .await
            } else {
                Worker::new(shop::runner(store_dyn, &svc, config), workers)
                    .run_until(stop)
                    .await
            };
            WorkerCounts {
                runs_driven: s.runs_driven,
                leases_lost: s.leases_lost,
                errors: s.errors,
            }
        }
        Agents::Tree => tree::run_workers(store_dyn, &svc, &config, &workers, stop).await,
        Agents::Limited => {
            let o = opts.limited.clone().unwrap_or_default();
            let runner =
                limited::runner(store_dyn, &o.base, o.per_second.map(limited::limit), config);
            let s = Worker::new(runner, workers).run_until(stop).await;
            WorkerCounts {
                runs_driven: s.runs_driven,
                leases_lost: s.leases_lost,
                errors: s.errors,
            }
        }
        Agents::Triggers => {
            let opts = opts.triggers.clone().unwrap_or_default();
            triggered::run_workers(store_dyn, svc_pool.clone(), &config, &workers, &opts, stop)
                .await
        }
    };
    WorkerReport {
        worker_id: opts.worker_id.clone(),
        runs_driven: stats.runs_driven,
        leases_lost: stats.leases_lost,
        errors: stats.errors,
        vm_hwm_kb: vm_hwm_kb(),
        wall_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// A worker process (`e2e-worker`).
#[derive(Debug)]
pub struct WorkerProc {
    /// Its options.
    pub opts: WorkerOpts,
    child: Child,
    killed: bool,
}

impl WorkerProc {
    /// Start `bin` (the path of `e2e-worker`) with `opts`.
    ///
    /// # Panics
    /// When the binary cannot be started.
    #[must_use]
    pub fn spawn(bin: &Path, opts: &WorkerOpts) -> Self {
        Self::spawn_with_env(bin, opts, &[])
    }

    /// [`WorkerProc::spawn`] with more environment variables (a collector's address).
    ///
    /// # Panics
    /// When the binary cannot be started.
    #[must_use]
    pub fn spawn_with_env(bin: &Path, opts: &WorkerOpts, env: &[(&str, &str)]) -> Self {
        let json = serde_json::to_string(opts).expect("options serialize");
        let mut cmd = Command::new(bin);
        cmd.envs(env.iter().copied());
        if opts.agent_version != 1 {
            // Said on the command line too, so `ps` shows which version a process runs.
            cmd.arg("--agent-version")
                .arg(opts.agent_version.to_string());
        }
        let child = cmd
            .env("E2E_WORKER_OPTS", json)
            .env(
                "RUST_LOG",
                std::env::var("E2E_WORKER_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        Self {
            opts: opts.clone(),
            child,
            killed: false,
        }
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`, and reap it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.killed = true;
    }

    /// Send a signal by name (`STOP`, `CONT`, `TERM`).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Wait for it to exit and read its report (`None` if it printed none).
    #[must_use]
    pub fn wait_report(mut self, timeout: Duration) -> (Option<i32>, Option<WorkerReport>) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    eprintln!(
                        "worker {} did not exit in time; killing it",
                        self.opts.worker_id
                    );
                    self.kill9();
                    break;
                }
            }
        }
        let code = self.child.wait().ok().and_then(|s| s.code());
        let report = self.child.stdout.take().and_then(|out| {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str::<WorkerReport>(&l).ok())
                .last()
        });
        (code, report)
    }

    /// SIGTERM, then wait for its report.
    #[must_use]
    pub fn stop(self, timeout: Duration) -> (Option<i32>, Option<WorkerReport>) {
        self.signal("TERM");
        self.wait_report(timeout)
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        if !self.killed && matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Create runs `from..to` of the shop (idempotent), `parallel` at a time.
///
/// # Panics
/// When the store refuses.
pub async fn create_runs(db: &crate::db::TestDb, from: u64, to: u64) {
    let svc = Arc::new(Service::new(
        db.pool.clone(),
        "creator",
        Latency::ms(0, 0),
        Latency::ms(0, 0),
    ));
    let store: Arc<dyn Store> = db.store.clone();
    let runner = shop::runner(store, &svc, RunnerConfig::default());
    let mut set = tokio::task::JoinSet::new();
    let chunk = (to - from).div_ceil(8).max(1);
    let mut start = from;
    while start < to {
        let end = (start + chunk).min(to);
        let r = runner.clone();
        set.spawn(async move {
            for i in start..end {
                let id = shop::run_id(i);
                r.start(&id, shop::initial(&id))
                    .await
                    .unwrap_or_else(|e| panic!("start {id}: {e}"));
            }
        });
        start = end;
    }
    while let Some(r) = set.join_next().await {
        r.expect("creator task");
    }
}

/// Poll until every run in the schema is final, or `timeout`. Returns whether they are.
pub async fn wait_all_final(db: &crate::db::TestDb, expect: u64, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if all_done(&db.pool, expect).await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A run a worker held when it was killed, paused or cut off.
#[derive(Clone, Debug)]
pub struct Held {
    /// The run.
    pub run_id: String,
    /// Its version then.
    pub version: i64,
    /// When its lease was due to expire (ms).
    pub lease_expires_ms: i64,
}

/// The unfinished runs `worker` holds a lease on.
///
/// # Panics
/// When the database cannot be read.
pub async fn held_runs(pool: &sqlx::PgPool, worker: &str) -> Vec<Held> {
    let rows: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT id, version, ts_to_ms(lease_expires_at) FROM runs WHERE lease_owner = $1 \
         AND status NOT IN ('completed', 'compensated', 'failed', 'quarantined', 'dead_lettered', \
         'cancelled', 'terminated')",
    )
    .bind(worker)
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("held runs: {e}"));
    rows.into_iter()
        .map(|(run_id, version, exp)| Held {
            run_id,
            version,
            lease_expires_ms: exp.unwrap_or(0),
        })
        .collect()
}

/// For each run held at `at` (ms), how long until another worker committed its next
/// version: the recovery (takeover) time, ms. Runs never moved again are skipped.
///
/// # Panics
/// When the database cannot be read.
pub async fn recovery_times(pool: &sqlx::PgPool, at: i64, held: &[Held]) -> Vec<i64> {
    let mut out = Vec::with_capacity(held.len());
    for h in held {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT ts_to_ms(created_at) FROM transitions WHERE run_id = $1 AND version = $2",
        )
        .bind(&h.run_id)
        .bind(h.version + 1)
        .fetch_optional(pool)
        .await
        .unwrap_or_else(|e| panic!("recovery time: {e}"));
        if let Some((t,)) = row {
            out.push(t - at);
        }
    }
    out
}
