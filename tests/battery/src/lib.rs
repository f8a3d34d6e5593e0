//! Shared harness of the in-process reliability battery (RELIABILITY.md says what each part proves).
//!
//! - [`size`]: reduced sizes by default, full sizes with `BATTERY_FULL=1`;
//! - [`pg`]: a migrated [`PgStore`] in a schema of its own per test;
//! - [`backends`]: a fresh store of each kind (memory, PostgreSQL, SQLite) for a test that
//!   runs on all three;
//! - [`Probe`]: a tool wrapper that counts executions and can panic, abort the process or
//!   fail the test when called;
//! - [`forbidden_router`]: a router that fails the test when asked;
//! - [`child`]: re-running one test of this binary in a child process (aborting workers,
//!   planted environment variables).

// A test harness: its functions panic to fail the test that called them, so a `# Panics`
// section on each would say the same thing everywhere.
#![allow(clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::router::{RouteRequest, Router, RouterError, RouterReply};
use agent_core::tool::{
    DynTool, ErrorClass, ToolBox, ToolContext, ToolError, ToolKind, ToolPolicy,
};
use agent_pg::PgStore;
use futures::future::BoxFuture;
use serde_json::Value;

pub mod replay;

/// Whether the full sizes were asked for (`BATTERY_FULL=1`).
#[must_use]
pub fn full() -> bool {
    std::env::var("BATTERY_FULL").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `reduced` in `cargo test`, `full` under `BATTERY_FULL=1`.
#[must_use]
pub fn size(reduced: usize, full_size: usize) -> usize {
    if full() { full_size } else { reduced }
}

/// PostgreSQL for the tests that concern rows.
pub mod pg {
    use super::{Arc, PgStore};

    /// `DATABASE_URL`, else the local trust-auth server of the development machine.
    ///
    /// # Panics
    /// When `DATABASE_URL` names no PostgreSQL database (the project's one rule for
    /// locations, `agent_core::store::location`).
    #[must_use]
    pub fn url() -> String {
        let url = std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        postgres_only(&url)
    }

    /// `url` when it is a PostgreSQL URL; a panic naming what it is otherwise.
    fn postgres_only(url: &str) -> String {
        use agent_core::store::location::StoreLocation;
        match url.parse::<StoreLocation>() {
            Ok(StoreLocation::Postgres(url)) => url,
            Ok(other) => panic!("DATABASE_URL names {other}: these tests need postgres://…"),
            Err(e) => panic!("DATABASE_URL: {e}"),
        }
    }

    fn ci() -> bool {
        std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
    }

    /// A migrated store in a fresh schema, or `None` (with a loud message) when no server
    /// answers outside CI. Under `CI=true` an unreachable server fails the test.
    pub async fn fresh() -> Option<Arc<PgStore>> {
        let schema = format!("battery_{}", uuid::Uuid::new_v4().simple());
        open(&schema).await
    }

    /// A migrated store in `schema` (shared with a child process).
    pub async fn open(schema: &str) -> Option<Arc<PgStore>> {
        open_at(&url(), schema).await
    }

    /// A migrated store in `schema` at `url`, or `None` as [`fresh`] says.
    async fn open_at(url: &str, schema: &str) -> Option<Arc<PgStore>> {
        match PgStore::connect(url, schema).await {
            Ok(store) => {
                store
                    .migrate()
                    .await
                    .unwrap_or_else(|e| panic!("migrate {schema}: {e}"));
                Some(Arc::new(store))
            }
            Err(e) => {
                assert!(!ci(), "PostgreSQL at {url} does not answer under CI: {e}");
                eprintln!("\n*** SKIPPED: no PostgreSQL at {url} ({e}); set DATABASE_URL ***\n");
                None
            }
        }
    }

    /// A migrated store in a fresh schema through PgBouncer in transaction mode
    /// (`PGBOUNCER_URL`, set by `eval "$(scripts/pgbouncer)"`), polling for work; `None`
    /// (with a loud message) without it, or when it does not answer, outside CI; a failure
    /// under CI.
    pub async fn fresh_through_pgbouncer() -> Option<Arc<PgStore>> {
        let Some(url) = std::env::var("PGBOUNCER_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            assert!(
                !ci(),
                "PGBOUNCER_URL is not set under CI: run `eval \"$(scripts/pgbouncer)\"` first"
            );
            eprintln!(
                "\n*** SKIPPED: battery through PgBouncer without PGBOUNCER_URL; run \
                 `eval \"$(scripts/pgbouncer)\"` ***\n"
            );
            return None;
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{sep}pooler=transaction&wake=poll&poll_ms=100");
        open_at(&url, &format!("battery_{}", uuid::Uuid::new_v4().simple())).await
    }

    /// Drop the test's schema.
    pub async fn drop(store: &PgStore) {
        if let Err(e) = store.drop_schema().await {
            eprintln!("could not drop schema {}: {e}", store.schema());
        }
    }
}

/// A fresh store of each kind, for tests that run once per backend.
pub mod backends {
    use std::sync::Arc;

    use agent_core::store::Store;
    use agent_core::store::memory::MemoryStore;
    use agent_pg::PgStore;
    use agent_sqlite::SqliteStore;

    /// Which store.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Backend {
        /// `MemoryStore`.
        Memory,
        /// A fresh PostgreSQL schema (see [`crate::pg`]).
        Postgres,
        /// A fresh PostgreSQL schema through PgBouncer in transaction mode
        /// ([`crate::pg::fresh_through_pgbouncer`]).
        PgBouncer,
        /// A fresh SQLite file in a temporary directory.
        Sqlite,
    }

    /// A store of one test; [`Fresh::finish`] drops its schema or file.
    pub struct Fresh {
        /// The store.
        pub store: Arc<dyn Store>,
        pg: Option<Arc<PgStore>>,
        sqlite: Option<(Arc<SqliteStore>, tempfile::TempDir)>,
    }

    impl std::fmt::Debug for Fresh {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Fresh")
                .field("store", &self.store)
                .finish_non_exhaustive()
        }
    }

    impl Fresh {
        /// A fresh store of `backend`; `None` when PostgreSQL is not available outside CI
        /// (the test then returns, as [`crate::pg::fresh`] explains).
        ///
        /// # Panics
        /// When a SQLite file cannot be created.
        pub async fn open(backend: Backend) -> Option<Self> {
            Some(match backend {
                Backend::Memory => Self {
                    store: Arc::new(MemoryStore::new()),
                    pg: None,
                    sqlite: None,
                },
                Backend::Postgres | Backend::PgBouncer => {
                    let pg = if backend == Backend::Postgres {
                        crate::pg::fresh().await?
                    } else {
                        crate::pg::fresh_through_pgbouncer().await?
                    };
                    Self {
                        store: pg.clone(),
                        pg: Some(pg),
                        sqlite: None,
                    }
                }
                Backend::Sqlite => {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let store = Arc::new(
                        SqliteStore::open(dir.path().join("runs.sqlite3"))
                            .await
                            .expect("open SQLite store"),
                    );
                    Self {
                        store: store.clone(),
                        pg: None,
                        sqlite: Some((store, dir)),
                    }
                }
            })
        }

        /// The PostgreSQL store, for tests that edit its tables with SQL.
        #[must_use]
        pub fn postgres(&self) -> Option<&Arc<PgStore>> {
            self.pg.as_ref()
        }

        /// The SQLite store, for tests that edit its tables with SQL.
        #[must_use]
        pub fn sqlite(&self) -> Option<&Arc<SqliteStore>> {
            self.sqlite.as_ref().map(|(store, _)| store)
        }

        /// Whether a store of `backend` can be had here (PostgreSQL may be missing outside
        /// CI); tests that open a store per case ask once, first.
        pub async fn available(backend: Backend) -> bool {
            match Self::open(backend).await {
                Some(fresh) => {
                    fresh.finish().await;
                    true
                }
                None => false,
            }
        }

        /// Drop the schema, or close and remove the file.
        pub async fn finish(self) {
            if let Some(pg) = self.pg {
                crate::pg::drop(&pg).await;
            }
            if let Some((store, dir)) = self.sqlite {
                store.close().await;
                drop(dir);
            }
        }
    }
}

/// Each test body once per backend: for `async fn name(backend: Backend)` in the calling
/// module, the tests `name::memory`, `name::postgres`, `name::pgbouncer` (PostgreSQL
/// through a transaction pooler) and `name::sqlite`. The body opens its stores with
/// [`backends::Fresh::open`].
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use $crate::backends::Backend;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Backend::Memory).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Backend::Postgres).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn pgbouncer() {
                super::$name(Backend::PgBouncer).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(Backend::Sqlite).await;
            }
        }
    )*};
}

/// What a [`Probe`] does when its tool is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Call the real tool.
    Pass,
    /// Panic (a poison tool).
    Panic,
    /// Abort the process (a poison tool that takes its worker down).
    Abort,
    /// Record a violation and fail the call: the test forbids calling this tool.
    Forbid,
}

/// Decides the [`Action`] of a call from the tool's name and input.
pub type Behaviour = Arc<dyn Fn(&str, &Value) -> Action + Send + Sync>;

/// Every call a [`Probe`] saw.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<Vec<Call>>,
    violations: Mutex<Vec<String>>,
}

/// One execution seen by a [`Probe`].
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The tool.
    pub tool: String,
    /// The run.
    pub run_id: String,
    /// The state version of the step.
    pub version: u64,
    /// The input.
    pub input: Value,
    /// The idempotency key (write, hybrid and compensating calls).
    pub key: Option<String>,
}

impl CallLog {
    /// A new, shared log.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Executions per tool name (attempts included).
    #[must_use]
    pub fn executions(&self) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for call in self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            *out.entry(call.tool.clone()).or_default() += 1;
        }
        out
    }

    /// Every call, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Executions for one run.
    #[must_use]
    pub fn calls_of(&self, run_id: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.run_id == run_id)
            .collect()
    }

    /// Calls of forbidden tools.
    #[must_use]
    pub fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A tool wrapper: counts executions and applies a [`Behaviour`].
pub struct Probe {
    inner: Arc<dyn DynTool>,
    log: Arc<CallLog>,
    behaviour: Behaviour,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("tool", &self.inner.name())
            .finish_non_exhaustive()
    }
}

impl DynTool for Probe {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn description(&self) -> &'static str {
        self.inner.description()
    }
    fn kind(&self) -> ToolKind {
        self.inner.kind()
    }
    fn policy(&self) -> ToolPolicy {
        self.inner.policy()
    }
    fn input_schema(&self) -> Value {
        self.inner.input_schema()
    }
    fn check_input(&self, input: &Value) -> Result<(), String> {
        self.inner.check_input(input)
    }
    fn call_json<'a>(
        &'a self,
        input: Value,
        cx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let name = self.inner.name();
        self.log
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Call {
                tool: name.to_owned(),
                run_id: cx.run_id.clone(),
                version: cx.version,
                input: input.clone(),
                key: cx.idempotency_key.clone(),
            });
        match (self.behaviour)(name, &input) {
            Action::Pass => self.inner.call_json(input, cx),
            Action::Panic => panic!("poison tool `{name}` panics on {input}"),
            Action::Abort => {
                eprintln!("poison tool `{name}` aborts the process on {input}");
                std::process::abort()
            }
            Action::Forbid => {
                self.log
                    .violations
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!(
                        "tool `{name}` was executed (run {}, v{}, #{}) with {input}",
                        cx.run_id, cx.version, cx.call_index
                    ));
                Box::pin(async move {
                    Err(ToolError::permanent(format!(
                        "`{name}` must not be executed in this test"
                    )))
                })
            }
        }
    }
    fn compensation(
        &self,
        input: &Value,
        output: &Value,
    ) -> Option<Result<(String, Value), String>> {
        self.inner.compensation(input, output)
    }
}

/// Wrap every tool of `tools` in a [`Probe`] sharing `log` and `behaviour`.
#[must_use]
pub fn probe_all(tools: &ToolBox, log: &Arc<CallLog>, behaviour: &Behaviour) -> ToolBox {
    tools.names().fold(ToolBox::new(), |acc, name| {
        let inner = Arc::clone(tools.get(name).expect("listed by names()"));
        acc.with_dyn(Arc::new(Probe {
            inner,
            log: Arc::clone(log),
            behaviour: Arc::clone(behaviour),
        }))
    })
}

/// A [`Behaviour`] passing every call.
#[must_use]
pub fn pass() -> Behaviour {
    Arc::new(|_, _| Action::Pass)
}

/// A [`Behaviour`] forbidding every call.
#[must_use]
pub fn forbid() -> Behaviour {
    Arc::new(|_, _| Action::Forbid)
}

/// A router that records every request and fails the test's expectations when asked
/// (it answers with a permanent error so the run cannot go on by accident).
#[derive(Debug, Default)]
pub struct ForbiddenRouter {
    asked: Mutex<Vec<RouteRequest>>,
}

impl ForbiddenRouter {
    /// The requests it received (should be none).
    #[must_use]
    pub fn asked(&self) -> Vec<RouteRequest> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait::async_trait]
impl Router for ForbiddenRouter {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        Err(RouterError::new(
            ErrorClass::Permanent,
            "the router must not be asked in this test",
        ))
    }
}

/// A router that fails the test when asked.
#[must_use]
pub fn forbidden_router() -> Arc<ForbiddenRouter> {
    Arc::new(ForbiddenRouter::default())
}

/// Re-running one test of the current test binary in a child process.
pub mod child {
    use std::process::Command;

    /// A command running only the (ignored) test `name` of this test binary.
    ///
    /// # Panics
    /// When the current executable cannot be found.
    #[must_use]
    pub fn command(name: &str) -> Command {
        let exe = std::env::current_exe().expect("current test binary");
        let mut cmd = Command::new(exe);
        cmd.args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        cmd
    }

    /// Whether this process is a child started by [`command`] for `role`
    /// (`BATTERY_CHILD=role`); ignored tests return at once otherwise.
    #[must_use]
    pub fn is(role: &str) -> bool {
        std::env::var("BATTERY_CHILD").is_ok_and(|r| r == role)
    }
}

/// A fault hook crashing at any fault point with probability `p` (seeded, reproducible).
#[derive(Debug)]
pub struct RandomCrash {
    p: f64,
    rng: Mutex<rand::rngs::StdRng>,
    fired: std::sync::atomic::AtomicU64,
}

impl RandomCrash {
    /// Crash with probability `p` at each fault point reached.
    #[must_use]
    pub fn new(p: f64, seed: u64) -> Self {
        use rand::SeedableRng;
        Self {
            p,
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
            fired: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Crashes injected so far.
    #[must_use]
    pub fn fired(&self) -> u64 {
        self.fired.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl agent_core::runner::FaultHook for RandomCrash {
    fn check(
        &self,
        point: agent_core::runner::FaultPoint,
        _: &str,
        version: u64,
    ) -> Result<(), agent_core::runner::Crash> {
        use rand::Rng;
        let hit = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .random_bool(self.p);
        if hit {
            self.fired.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Err(agent_core::runner::Crash { point, version });
        }
        Ok(())
    }
}

/// The fixture agent of the runner conformance suite, used by most items.
pub mod order {
    use std::sync::Arc;
    use std::time::Duration;

    use agent_conformance::fixture::{self, Behaviour as Handlers, Order, World};
    use agent_core::router::Router;
    use agent_core::runner::{FaultHook, NoFaults};
    use agent_core::runner::{Runner, RunnerConfig};
    use agent_core::store::{Claimed, RunRecord, Store};
    use agent_core::tool::ToolBox;

    /// A runner of the fixture agent over `store` with `tools` and `router`.
    ///
    /// # Panics
    /// When the tool box does not match the agent.
    #[must_use]
    pub fn runner(
        store: &Arc<dyn Store>,
        tools: ToolBox,
        router: Arc<dyn Router>,
        config: RunnerConfig,
    ) -> Runner<Order, Handlers> {
        runner_with(store, tools, router, config, Arc::new(NoFaults))
    }

    pub fn runner_with(
        store: &Arc<dyn Store>,
        tools: ToolBox,
        router: Arc<dyn Router>,
        config: RunnerConfig,
        faults: Arc<dyn FaultHook>,
    ) -> Runner<Order, Handlers> {
        Runner::builder(Arc::clone(store), Handlers, tools)
            .router(router)
            .config(config)
            .faults(faults)
            .build()
            .expect("the fixture's tool box matches")
    }

    /// The fixture's tools on `world`.
    #[must_use]
    pub fn tools(world: &Arc<World>) -> ToolBox {
        fixture::tools(world)
    }

    /// Settings with a short lease.
    #[must_use]
    pub fn config(worker: &str, lease: Duration) -> RunnerConfig {
        RunnerConfig {
            worker_id: worker.to_owned(),
            lease_ttl: lease,
            ..RunnerConfig::default()
        }
    }

    /// Claim `run_id`, execute up to `steps` steps (stopping early when the run is final or
    /// waiting), release the lease. Returns the last record.
    ///
    /// # Errors
    /// What the runner or the store said.
    pub async fn advance<A, H>(
        runner: &Runner<A, H>,
        run_id: &str,
        steps: usize,
    ) -> Result<RunRecord, String>
    where
        A: agent_core::Agent + agent_core::Handle<H>,
        H: Send + Sync + 'static,
    {
        let store = runner.store();
        let worker = runner.config().worker_id.clone();
        let claimed = store
            .claim_run(run_id, &worker, runner.config().lease_ttl)
            .await
            .map_err(|e| e.to_string())?;
        let Some(Claimed {
            mut lease,
            mut record,
            ..
        }) = claimed
        else {
            // Final runs cannot be claimed (a crash after the last commit was applied).
            return match store.load_run(run_id).await.map_err(|e| e.to_string())? {
                Some(r) if r.status.is_final() => Ok(r),
                other => Err(format!("{run_id} could not be claimed: {other:?}")),
            };
        };
        for _ in 0..steps {
            match runner
                .step(&mut lease, record.clone())
                .await
                .map_err(|e| e.to_string())?
            {
                agent_core::runner::StepOutcome::Committed(r) => record = r,
                agent_core::runner::StepOutcome::Waiting(r)
                | agent_core::runner::StepOutcome::Finished(r)
                | agent_core::runner::StepOutcome::Deferred(r) => {
                    record = r;
                    break;
                }
            }
        }
        store
            .release_lease(&lease)
            .await
            .map_err(|e| e.to_string())?;
        Ok(record)
    }
}
