//! The test harness: a database populated by driving the conformance fixture agent with the
//! real runner, and the `agentctl` binary run against it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use agent_conformance::fixture::{self, Behaviour, Order, World};
use agent_core::router::Router;
use agent_core::runner::{Runner, RunnerBuilder};
use agent_core::store::{RunFailure, RunStatus, Store};
use serde_json::json;

/// A database for one test, with the fixture's runs in it.
pub(crate) struct Db {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    /// When set, the PostgreSQL URL and schema used instead of the SQLite file.
    pub pg: Option<(String, String)>,
    pub runtime: tokio::runtime::Runtime,
}

/// The runs every test database holds.
pub(crate) const PAID_WAITING: &str = "order-waiting";
pub(crate) const DONE: &str = "order-done";
pub(crate) const CANCELLED: &str = "order-cancelled";
pub(crate) const DECLINED: &str = "order-declined";
pub(crate) const STUCK: &str = "order-stuck";
pub(crate) const SAGA_STUCK: &str = "order-saga-stuck";

/// The PostgreSQL server to test against: `AGENTCTL_TEST_PG`, else a `postgres://`
/// `DATABASE_URL` (`scripts/test` sets one).
pub(crate) fn pg_url() -> Option<String> {
    ["AGENTCTL_TEST_PG", "DATABASE_URL"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
}

impl Db {
    /// A fresh SQLite file with the fixture's runs.
    pub(crate) fn sqlite() -> Self {
        Self::new(false)
    }

    /// A fresh PostgreSQL schema with the fixture's runs (dropped at the end).
    pub(crate) fn postgres() -> Self {
        Self::new(true)
    }

    /// Whether a PostgreSQL server is configured for the tests.
    pub(crate) fn postgres_available() -> bool {
        pg_url().is_some()
    }

    fn new(postgres: bool) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent-runs.sqlite3");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let pg = postgres.then(|| {
            let url = pg_url().expect("a postgres:// URL in AGENTCTL_TEST_PG or DATABASE_URL");
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (url, format!("agentctl_test_{}_{n}", std::process::id()))
        });
        let db = Self {
            _dir: dir,
            path,
            pg,
            runtime,
        };
        db.runtime.block_on(db.populate());
        db
    }

    /// Write the fixture's runs to the SQLite file `path` (kept), for trying commands by hand.
    pub(crate) fn populate_file(path: &std::path::Path) {
        let db = Self {
            _dir: tempfile::tempdir().expect("tempdir"),
            path: path.to_owned(),
            pg: None,
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
        };
        db.runtime.block_on(db.populate());
    }

    pub(crate) async fn store(&self) -> Arc<dyn Store> {
        if let Some((url, schema)) = &self.pg {
            let store = agent_pg::PgStore::connect(url, schema)
                .await
                .expect("connect to PostgreSQL");
            store.migrate().await.expect("migrate");
            return Arc::new(store);
        }
        Arc::new(
            agent_sqlite::SqliteStore::open(&self.path)
                .await
                .expect("open the SQLite store"),
        )
    }

    async fn populate(&self) {
        let store = self.store().await;
        // Paid: the charge times out once and is retried with the same key; then the run
        // waits for the customer's confirmation.
        drive(&store, PAID_WAITING, "Pay", |w| w.charge_timeouts = 1).await;
        // Paid and confirmed.
        drive(&store, DONE, "Pay", |_| {}).await;
        let r = runner(&store, &Arc::new(World::default()), "Pay");
        r.signal(DONE, "confirm", json!({ "ok": true }))
            .await
            .expect("signal");
        let done = r.run(DONE).await.expect("resume after the signal");
        assert_eq!(done.status, RunStatus::Completed);
        // The router cancels: the reservations are released by compensation.
        drive(&store, CANCELLED, "Cancelled", |_| {}).await;
        // The card is declined: the error path, then compensation.
        drive(&store, DECLINED, "Pay", |w| w.fail_charges = true).await;
        // Runs an operator has to deal with.
        drive(&store, STUCK, "Pay", |_| {}).await;
        store
            .set_status(
                STUCK,
                RunStatus::DeadLettered,
                Some(RunFailure {
                    code: "crash_loop".into(),
                    message: "5 lost claims in a row without progress".into(),
                }),
            )
            .await
            .expect("dead-letter");
        drive(&store, SAGA_STUCK, "Cancelled", |_| {}).await;
        store
            .set_status(
                SAGA_STUCK,
                RunStatus::DeadLettered,
                Some(RunFailure {
                    code: "compensation.failed".into(),
                    message: "Release kept failing".into(),
                }),
            )
            .await
            .expect("dead-letter");
        // A rate limit the workers share, paused for an hour by a provider's 429.
        let limit = agent_core::store::RateLimit::tool_calls(
            "ChargeCard",
            5,
            std::time::Duration::from_secs(1),
        )
        .expect("a limit that can be met");
        let now = agent_core::store::now_ms();
        store.define_limit(&limit, now).await.expect("define_limit");
        store
            .pause_limit(&limit.name(), std::time::Duration::from_hours(1), now)
            .await
            .expect("pause_limit");
    }

    /// Run `agentctl ARGS --db PATH`.
    pub(crate) fn agentctl(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run agentctl")
    }

    /// `agentctl ARGS --db PATH`, to spawn.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        self.command_of(Command::new(env!("CARGO_BIN_EXE_agentctl")), args)
    }

    /// `PROGRAM ARGS --db PATH` (another control binary), to spawn.
    pub(crate) fn command_of(&self, mut cmd: Command, args: &[&str]) -> Command {
        cmd.args(args)
            .env_remove("DATABASE_URL")
            .env_remove("AGENT_DB")
            .env_remove("AGENT_PG_SCHEMA")
            .env("NO_COLOR", "1");
        match &self.pg {
            Some((url, schema)) => cmd
                .arg("--database-url")
                .arg(url)
                .arg("--pg-schema")
                .arg(schema),
            None => cmd.arg("--db").arg(&self.path),
        };
        cmd
    }

    /// `agentctl ARGS`, which must succeed; its stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.agentctl(args);
        assert!(
            out.status.success(),
            "agentctl {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// `agentctl --json ARGS`, parsed.
    pub(crate) fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }

    /// Run SQL against the file, as an attacker with write access would.
    pub(crate) fn sql(&self, statements: &[&str]) {
        self.runtime.block_on(async {
            use sqlx::Connection;
            if let Some((url, schema)) = &self.pg {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
                let path = format!("SET search_path TO {schema}");
                sqlx::query(sqlx::AssertSqlSafe(path))
                    .execute(&mut conn)
                    .await
                    .expect("search_path");
                for s in statements {
                    sqlx::query(sqlx::AssertSqlSafe(*s))
                        .execute(&mut conn)
                        .await
                        .unwrap_or_else(|e| panic!("{s}: {e}"));
                }
                return;
            }
            let url = format!("sqlite://{}", self.path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url)
                .await
                .expect("connect with sqlx");
            for s in statements {
                sqlx::query(sqlx::AssertSqlSafe(*s))
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
            conn.close().await.expect("close");
        });
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some((url, schema)) = &self.pg {
            self.runtime.block_on(async {
                if let Ok(store) = agent_pg::PgStore::connect(url, schema).await {
                    let _ = store.drop_schema().await;
                }
            });
        }
    }
}

pub(crate) fn runner(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
) -> Runner<Order, Behaviour> {
    runner_builder(store, world, choice)
        .build()
        .expect("runner")
}

/// [`runner`], to be configured before it is built.
pub(crate) fn runner_builder(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
) -> RunnerBuilder<Order, Behaviour, Arc<dyn Router>> {
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(world))
        .router(Arc::new(fixture::router(choice)))
}

async fn drive(
    store: &Arc<dyn Store>,
    id: &str,
    choice: &'static str,
    world: impl FnOnce(&mut fixture::WorldState),
) {
    let w = Arc::new(World::default());
    w.configure(world);
    let r = runner(store, &w, choice);
    // Two runs carry labels, for `runs --label`.
    let labels = match id {
        PAID_WAITING => [("tenant", "acme"), ("region", "eu")].as_slice(),
        DONE => [("tenant", "acme"), ("region", "us")].as_slice(),
        _ => [].as_slice(),
    };
    let labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    r.start_with_labels(id, fixture::initial(&["apple", "kiwi"]), labels)
        .await
        .expect("start");
    r.run(id).await.expect("run");
}
