//! # agent-sqlite
//!
//! The embedded [`Store`] of durable agents: one SQLite file (WAL mode, busy timeout),
//! created on first use, with the schema migrated on open. The default store of the
//! examples and of `agentctl` when no database URL is given.
//!
//! ```no_run
//! use std::sync::Arc;
//! use durable_agents::store::{NewRun, Store};
//! use durable_agents::sqlite::SqliteStore;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn Store> = Arc::new(SqliteStore::open("agents.db").await?);
//! let run = store
//!     .create_run(NewRun::new(
//!         "order-42",
//!         "Checkout",
//!         "…",
//!         "Browsing",
//!         serde_json::json!({ "cart": [] }),
//!     ))
//!     .await?;
//! assert_eq!(run.version, 0);
//! # Ok(()) }
//! ```
//!
//! ## Limits, and what to switch to
//!
//! - **One process.** Every write goes through one connection of this process, in
//!   `BEGIN IMMEDIATE` transactions, so the guarantees of the contract (compare-and-set on
//!   version and epoch, fenced journal, claims) hold within the process, and a second process
//!   on the same file waits on the busy timeout rather than corrupting anything, but writers
//!   are serialized and leases are timed with each process's clock. For several workers or
//!   machines, use `agent-pg` (PostgreSQL): same contract, same conformance suite.
//! - **No `LISTEN/NOTIFY`.** [`Store::wait_for_work`] wakes on work created through this
//!   store instance, and otherwise sleeps until its timeout (workers poll).
//! - **Throughput** is bounded by one writer and an fsync per commit (`synchronous = FULL`
//!   in WAL mode keeps every acknowledged commit across power loss).
//!
//! ## Feature flags
//!
//! None; SQLite is compiled in (sqlx's bundled library), nothing to install.
//!
//! [`Store`]: agent_core::store::Store
//! [`Store::wait_for_work`]: agent_core::store::Store::wait_for_work

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use agent_core::store::{
    Lease, NewRun, RunRecord, RunStatus, StoreError, TransitionKind, creation_hash, now_ms,
    transition_hash, validate_labels,
};
use agent_sql::heads::HeadCache;
use agent_sql::reads::{Arg, SqlReads, bind, head_of};
use agent_sql::rows;
use agent_sql::to_i64;
use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};
use tokio::sync::Notify;

mod commit;
mod operator;
mod sql;
mod store;

pub use agent_sql::LARGE_OUTPUT_BYTES;

/// Errors of opening a [`SqliteStore`].
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    /// The file could not be opened or created.
    #[error("cannot open SQLite database: {0}")]
    Open(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// A [`Store`] in one SQLite file.
///
/// [`Store`]: agent_core::store::Store
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: Option<PathBuf>,
    work: Notify,
    /// The head of each run as this store last committed it: with it, a commit writes
    /// without first reading the run back (and replaying its patches) inside the write
    /// transaction.
    heads: HeadCache,
}

impl SqliteStore {
    /// Open (creating it if needed) the database file at `path` and apply the embedded
    /// migrations.
    ///
    /// # Errors
    /// [`SqliteOpenError::Open`] when the file cannot be opened or created;
    /// [`SqliteOpenError::Migrate`] when a migration fails.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref().to_path_buf();
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let mut store = Self::open_with(options).await?;
        store.path = Some(path);
        Ok(store)
    }

    /// Open a database from a `sqlite:` URL (`sqlite://agents.db?mode=rwc`).
    ///
    /// # Errors
    /// As [`Self::open`].
    pub async fn open_url(url: &str) -> Result<Self, SqliteOpenError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(SqliteOpenError::Open)?
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        Self::open_with(options).await
    }

    async fn open_with(options: SqliteConnectOptions) -> Result<Self, SqliteOpenError> {
        // One connection: SQLite has one writer anyway, and queueing in the pool is cheaper
        // than busy-waiting on the file lock.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(SqliteOpenError::Open)?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self {
            pool,
            path: None,
            work: Notify::new(),
            heads: HeadCache::default(),
        })
    }

    /// The database file, when opened with [`Self::open`].
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Close the connection (checkpointing the WAL into the database file).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The connection pool (benchmarks, tests).
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }

    /// Why a write fenced by `lease` matched no row: the run is gone, or the epoch moved.
    async fn fenced_out(&self, lease: &Lease) -> Result<StoreError, StoreError> {
        Ok(if self.exists(&lease.run_id).await? {
            StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            }
        } else {
            StoreError::NotFound(lease.run_id.clone())
        })
    }

    async fn exists(&self, run_id: &str) -> Result<bool, StoreError> {
        Ok(head_of(self, run_id).await?.is_some())
    }

    async fn insert_run(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
    ) -> Result<RunRecord, StoreError> {
        validate_labels(&new.labels)?;
        let labels =
            serde_json::to_string(&new.labels).map_err(|e| StoreError::Backend(e.to_string()))?;
        let now = now_ms();
        let hash = transition_hash("", &new.link());
        let mut tx = self.write_tx().await?;
        let inserted = sqlx::query(sql::INSERT_RUN)
            .bind(&new.id)
            .bind(&new.agent)
            .bind(&new.fingerprint)
            .bind(&new.state_name)
            .bind(new.state.to_string())
            .bind(creation_hash(new))
            .bind(&hash)
            .bind(parent.map(|p| p.0))
            .bind(parent.map(|p| to_i64(p.1)))
            .bind(now)
            .bind(&labels)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        if inserted == 1 {
            sqlx::query(sql::INSERT_LABELS)
                .bind(&new.id)
                .bind(&labels)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            sqlx::query(sql::INSERT_TRANSITION)
                .bind(&new.id)
                .bind(0_i64)
                .bind(&new.state_name)
                .bind(&new.state_name)
                .bind(TransitionKind::Start.as_str())
                .bind(RunStatus::Running.as_str())
                .bind(0_i64)
                .bind(now)
                .bind(&hash)
                .bind("snapshot")
                .bind(new.state.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(&new.id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let stored = rows::stored_run(&row)?;
        let record = stored.head.record;
        if inserted == 1 {
            self.work.notify_waiters();
            return Ok(record);
        }
        let same_parent = record.parent.as_ref().map(|(p, v)| (p.as_str(), *v)) == parent;
        if stored.creation_hash == creation_hash(new) && same_parent {
            Ok(record)
        } else {
            Err(StoreError::AlreadyExists(new.id.clone()))
        }
    }
}

/// Map a driver error: a busy or locked database is transient ([`StoreError::Unavailable`]).
// By value: it is passed to `map_err` as a function.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    let transient = match &e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6)),
        _ => false,
    };
    if transient {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Backend(e.to_string())
    }
}

#[async_trait]
impl SqlReads for SqliteStore {
    type Row = SqliteRow;

    const AGENT_GRAPH: &'static str = sql::AGENT_GRAPH;
    const HISTORY: &'static str = sql::HISTORY;
    const HAND_BACK: &'static str = sql::HAND_BACK;
    const JOURNAL: &'static str = sql::JOURNAL;
    const PENDING_SIGNALS: &'static str = sql::PENDING_SIGNALS;
    const TOOL_SWITCHES: &'static str = sql::TOOL_SWITCHES;

    async fn fetch(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<SqliteRow>, StoreError> {
        bind(sqlx::query(sql), args)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)
    }

    async fn insert_fork(
        &self,
        new: &NewRun,
        parent: (&str, u64),
    ) -> Result<RunRecord, StoreError> {
        self.insert_run(new, Some(parent)).await
    }
}
