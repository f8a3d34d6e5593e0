//! Reaching PostgreSQL: a schema per test, and a throwaway cluster of our own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_pg::PgStore;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::service::SCHEMA_SQL;

/// The machine's PostgreSQL when `DATABASE_URL` is unset.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Whether the tests run under CI (`CI` set, not `0` or `false`).
#[must_use]
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Fail under `CI=true`; skip loudly elsewhere.
///
/// # Panics
/// Under CI, always: the PostgreSQL tests must never be skipped silently there.
pub fn unavailable(test: &str, why: &str) {
    assert!(
        !ci(),
        "{test}: no PostgreSQL reachable under CI ({why}). Set DATABASE_URL or run through \
         ./scripts/test, which starts a throwaway PostgreSQL"
    );
    eprintln!(
        "\n*** SKIPPED {test}: no PostgreSQL reachable ({why}). Set DATABASE_URL=postgres://... \
         or start one on 127.0.0.1:5432 ***\n"
    );
}

/// `DATABASE_URL`, else the local default, if a connection succeeds; `None` (after a loud
/// message, or a panic under CI) when none does.
///
/// # Panics
/// When `DATABASE_URL` is not a PostgreSQL URL.
pub async fn database_url(test: &str) -> Option<String> {
    let url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    // The project's one rule for locations: anything but a PostgreSQL URL is a mistake
    // to say, not a server to skip.
    match url.parse::<agent_core::store::location::StoreLocation>() {
        Ok(agent_core::store::location::StoreLocation::Postgres(_)) => {}
        Ok(other) => panic!("{test}: DATABASE_URL names {other}: these tests need postgres://…"),
        Err(e) => panic!("{test}: DATABASE_URL: {e}"),
    }
    let reach = async {
        let opts = PgConnectOptions::from_str(&url).map_err(|e| e.to_string())?;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(|e| e.to_string())?;
        pool.close().await;
        Ok::<(), String>(())
    };
    match reach.await {
        Ok(()) => Some(url),
        Err(e) => {
            unavailable(test, &format!("{url}: {e}"));
            None
        }
    }
}

/// A pool on `url` whose `search_path` is `schema`.
///
/// # Errors
/// Connecting failed.
pub async fn pool(url: &str, schema: &str, max: u32) -> Result<PgPool, sqlx::Error> {
    let opts = PgConnectOptions::from_str(url)?.options([("search_path", schema)]);
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(opts)
        .await
}

/// One test's database: a schema of its own holding the store's and the harness's tables.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// Where the database is.
    pub url: String,
    /// The test's schema.
    pub schema: String,
    /// A store in the schema (for creating runs and reading history).
    pub store: Arc<PgStore>,
    /// A pool in the schema (the checker's and the harness's queries).
    pub pool: PgPool,
}

impl TestDb {
    /// Create a fresh schema named after `test`, migrate it, add the harness's tables.
    ///
    /// # Panics
    /// When the database refuses (it was reachable a moment before).
    pub async fn create(url: &str, test: &str) -> Self {
        let schema = format!(
            "e2e_{test}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let store = PgStore::connect(url, &schema)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        store
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("migrate: {e}"));
        let pool = pool(url, &schema, 8)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        sqlx::raw_sql(SCHEMA_SQL)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("harness tables: {e}"));
        Self {
            url: url.to_owned(),
            schema,
            store: Arc::new(store),
            pool,
        }
    }

    /// Drop the schema (kept when `E2E_KEEP=1`, for post-mortems).
    pub async fn drop(self) {
        if std::env::var("E2E_KEEP").is_ok_and(|v| v == "1") {
            eprintln!("kept schema {}", self.schema);
            return;
        }
        if let Err(e) = self.store.drop_schema().await {
            eprintln!("could not drop schema {}: {e}", self.schema);
        }
        self.pool.close().await;
    }
}

/// A throwaway PostgreSQL cluster of our own, which tests may restart at will (never the
/// machine's). Stopped and deleted on drop.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    run_as: Option<&'static str>,
}

fn find_bin() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    candidates.push(PathBuf::from("/usr/local/bin"));
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut v: Vec<PathBuf> = dirs.flatten().map(|d| d.path().join("bin")).collect();
        v.sort();
        v.reverse();
        candidates.extend(v);
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(55_432, |a| a.port())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Cluster {
    /// `initdb` and start a cluster under `target/e2e-pg/`, or `Err` saying why not.
    ///
    /// # Errors
    /// No PostgreSQL binaries, or `initdb`/`pg_ctl` failed.
    pub fn start(target_dir: &Path) -> Result<Self, String> {
        let bin = find_bin().ok_or(
            "no initdb/pg_ctl on PATH, under /usr/local/bin or /usr/lib/postgresql/*/bin \
             (Debian/Ubuntu: apt-get install postgresql)",
        )?;
        let root = target_dir.join("e2e-pg");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let data = root.join(uuid::Uuid::new_v4().simple().to_string());
        let run_as = is_root().then_some("nobody");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        if let Some(user) = run_as {
            // initdb refuses root: the cluster belongs to `nobody`, who must reach the path.
            let mut p = data.as_path();
            while let Some(parent) = p.parent() {
                let _ = Command::new("chmod").arg("o+x").arg(parent).status();
                p = parent;
            }
            let st = Command::new("chown")
                .args([user, &data.display().to_string()])
                .status()
                .map_err(|e| e.to_string())?;
            if !st.success() {
                return Err("chown of the data directory failed".into());
            }
        }
        let cluster = Self {
            bin,
            data,
            port: free_port(),
            run_as,
        };
        let out = cluster
            .cmd("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&cluster.data)
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        cluster.pg_ctl(&["start", "-w", "-t", "60"])?;
        Ok(cluster)
    }

    fn cmd(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        match self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    /// Run `pg_ctl` with `args` on this cluster.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn pg_ctl(&self, args: &[&str]) -> Result<Duration, String> {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off \
             -c max_connections=200 -c shared_buffers=64MB",
            self.port
        );
        let started = Instant::now();
        let out = self
            .cmd("pg_ctl")
            .args(args)
            .arg("-D")
            .arg(&self.data)
            .args(["-o", &opts, "-l"])
            .arg(self.data.join("log"))
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(started.elapsed())
    }

    /// The cluster's URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
