//! # agent-sqlite
//!
//! The embedded [`Store`] of durable agents: one SQLite file (WAL mode, busy timeout),
//! created on first use, with the schema migrated when a worker opens it. The default
//! store of the examples and of `agentctl` when no database URL is given.
//!
//! ```no_run
//! use std::sync::Arc;
//! use durable_agents::backend::NewRun;
//! use durable_agents::store::Store;
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
//! ## Opening, closing, backing up
//!
//! - [`SqliteStore::open`] is the worker's open: it creates the file if needed, takes the
//!   file's worker lock (`PATH.lock`, an OS file lock the process holds until its last
//!   store on the file is dropped, released by the OS however the process ends), and
//!   applies the migrations. A second process that opens the file this way is refused at
//!   once, before it touches the file: [`SqliteOpenError::InUse`], "SQLite serves one
//!   process; use PostgreSQL for several". Stores opened by one process share the lock
//!   and migrate one after the other.
//! - [`SqliteStore::open_existing`] is the open of tools (`agentctl`): it creates and
//!   migrates nothing, refuses a file that is not a store or whose migrations are not this
//!   binary's, takes no lock (so it works beside a running worker), and with
//!   [`Access::ReadOnly`] cannot write at all.
//! - [`SqliteStore::close`] checkpoints the write-ahead log into the database file before
//!   closing, so that the file alone holds every run once a worker exits cleanly.
//! - [`SqliteStore::backup`] writes a whole copy to a new file while the store is in use
//!   (`VACUUM INTO`) and checks that the copy opens and holds the runs.
//!
//! ## Limits, and what to switch to
//!
//! - **One process.** Every write goes through one connection of this process, in
//!   `BEGIN IMMEDIATE` transactions, so the guarantees of the contract (compare-and-set on
//!   version and epoch, fenced journal, claims) hold within the process; a second worker
//!   process is refused (see above), while tools opened with
//!   [`SqliteStore::open_existing`] wait on the busy timeout for the worker's
//!   transactions. For several workers or machines, use `agent-pg` (PostgreSQL): same
//!   contract, same conformance suite.
//! - **No `LISTEN/NOTIFY`.** [`RunStore::wait_for_work`] wakes on work created through this
//!   store instance, and otherwise sleeps until its timeout (workers poll).
//! - **Throughput** is bounded by one writer and an fsync per transaction
//!   (`synchronous = FULL` in WAL mode keeps every acknowledged commit across power loss).
//!   Step commits of different runs that arrive while the writer is busy share one
//!   transaction (group commit), each with its own compare-and-set, so many runs stepping
//!   at once share one fsync; so do journal entries and signals sent at once. A worker's
//!   claim reads, in one statement for the batch, what each claimed run's first step
//!   would otherwise read with statements of its own (`RunStore::claim_next`).
//!
//! ## Feature flags
//!
//! None; SQLite is compiled in (sqlx's bundled library), nothing to install.
//!
//! [`Store`]: agent_core::store::Store
//! [`RunStore::wait_for_work`]: agent_core::store::RunStore::wait_for_work
#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{
    Lease, Millis, NewRun, RunRecord, RunStatus, StoreError, TransitionKind, WakeHub,
    creation_hash, now_ms, transition_hash, validate_labels,
};
use agent_sql::dialect::{Listing, SqlDialect, WorkerWake, created_before};
use agent_sql::heads::HeadCache;
use agent_sql::reads::{Arg, SqlReads, bind, fetch_all};
use agent_sql::rows;
use agent_sql::write::{CommitRow, EntryRow, Outcome, SignalRow};
use agent_sql::{ms, to_i64};
use async_trait::async_trait;
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::Notify;

mod group_commit;
mod limit_sql;
mod open;
mod operator;
mod schedule_sql;
mod sql;
mod store;

pub use agent_sql::LARGE_OUTPUT_BYTES;
pub use group_commit::GroupCommitStats;
pub use open::{Access, SqliteBackupError, SqliteOpenError};

/// A [`Store`] in one SQLite file.
///
/// [`Store`]: agent_core::store::Store
#[derive(Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Read-only connections for event followers, retention's reads and the versions
    /// count: in WAL mode they read the last commit while the writer goes on, so these
    /// never hold up a commit on `pool`'s one connection. Opened on first use.
    readers: SqlitePool,
    path: Option<PathBuf>,
    /// Opened with [`Access::ReadOnly`]: nothing to checkpoint on close.
    read_only: bool,
    /// The worker lock of the file, when opened with [`SqliteStore::open`]: held, never
    /// read, until the store is dropped.
    _worker_lock: Option<Arc<open::ProcessLock>>,
    work: Notify,
    /// Wake-ups of event followers in this process (others poll the file).
    events: WakeHub,
    /// The head of each run as this store last committed it: with it, a commit writes
    /// without first reading the run back (and replaying its patches) inside the write
    /// transaction.
    heads: HeadCache,
    /// Step commits of different runs written together while the writer is busy.
    group: Arc<group_commit::GroupCommit>,
}

impl SqliteStore {
    /// The database file, when opened with [`Self::open`].
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The connection pool (benchmarks, tests).
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// How many step commits were written in how many transactions so far (benchmarks,
    /// tests): their ratio is the group commit's average batch.
    #[must_use]
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        group_commit::stats(&self.group)
    }

    /// The plan SQLite chooses now for [`RunStore::claim_next`](agent_core::store::Store)'s
    /// query of these agents, `limit` at a time (`EXPLAIN QUERY PLAN`, nothing executed),
    /// as the `sqlite3` shell draws it: for an operator or a benchmark checking that
    /// claims go through indexes however many runs wait.
    ///
    /// # Errors
    /// [`StoreError`] when the statement fails.
    pub async fn explain_claim_next(
        &self,
        agents: &[String],
        limit: usize,
    ) -> Result<String, StoreError> {
        let agents =
            serde_json::to_string(agents).map_err(|e| StoreError::backend(e.to_string()))?;
        let explain = format!("EXPLAIN QUERY PLAN {}", sql::CLAIMABLE.as_str());
        let rows = sqlx::query(sqlx::AssertSqlSafe(explain))
            .bind(agents)
            .bind(agent_core::store::now_ms())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let nodes = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("id")?,
                    r.try_get::<i64, _>("parent")?,
                    r.try_get::<String, _>("detail")?,
                ))
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(db_err)?;
        Ok(plan_tree(&nodes))
    }

    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }

    /// Record a status set without a version, in the write transaction `tx` that set it.
    async fn status_changed(
        tx: &mut sqlx::SqliteConnection,
        run_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::INSERT_STATUS_CHANGE)
            .bind(run_id)
            .execute(tx)
            .await
            .map_err(db_err)
            .map(|_| ())
    }

    /// Create `new` (forked from `parent`), or return the run of the same id when it was
    /// created from the same request. With `claim`, a run created here is claimed by that
    /// worker for that long in the same transaction (and nobody is woken); the flag says
    /// whether it was.
    async fn insert_run(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
        claim: Option<(&str, Duration)>,
    ) -> Result<(RunRecord, bool), StoreError> {
        validate_labels(&new.labels)?;
        let labels =
            serde_json::to_string(&new.labels).map_err(|e| StoreError::backend(e.to_string()))?;
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
            .bind(new.spawned_by.as_ref().map(|p| p.run_id.as_str()))
            .bind(new.spawned_by.as_ref().map(|p| to_i64(p.version)))
            .bind(i64::from(new.agent_version))
            .bind(new.budget.map(sqlx::types::Json))
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
                .bind(None::<&str>)
                .bind(None::<i64>)
                .bind(None::<&str>)
                .bind(None::<&str>)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            if let Some((worker, ttl)) = claim {
                sqlx::query(sql::CLAIM_RUN.as_str())
                    .bind(&new.id)
                    .bind(worker)
                    .bind(ms(ttl))
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
            }
        }
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(&new.id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let stored = rows::stored_run(&row)?;
        let record = self.heads.remembered(stored.head);
        if inserted == 1 {
            if claim.is_none() {
                self.work.notify_waiters();
            }
            self.events.wake(&record.id);
            return Ok((record, claim.is_some()));
        }
        Ok((
            created_before(record, &stored.creation_hash, new, parent)?,
            false,
        ))
    }
}

/// `EXPLAIN QUERY PLAN`'s rows (id, parent id, detail), parents before their children,
/// drawn as a tree the way the `sqlite3` shell draws it.
fn plan_tree(nodes: &[(i64, i64, String)]) -> String {
    let mut depth: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    let mut out = String::from("QUERY PLAN");
    for (id, parent, detail) in nodes {
        let d = depth.get(parent).map_or(0, |d| d + 1);
        depth.insert(*id, d);
        out.push('\n');
        out.push_str(&"   ".repeat(d));
        out.push_str("|--");
        out.push_str(detail);
    }
    out
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
        StoreError::Unavailable(agent_core::store::BackendError::with_source(
            open::describe(&e),
            e,
        ))
    } else {
        StoreError::Backend(agent_core::store::BackendError::with_source(
            open::describe(&e),
            e,
        ))
    }
}

#[async_trait]
impl SqlReads for SqliteStore {
    type Row = SqliteRow;

    agent_sql::statements!(SqlReads, sql);

    async fn fetch(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<SqliteRow>, StoreError> {
        fetch_all(&self.pool, sql, args).await.map_err(db_err)
    }

    async fn fetch_events(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<SqliteRow>, StoreError> {
        fetch_all(&self.readers, sql, args).await.map_err(db_err)
    }

    async fn insert_fork(
        &self,
        new: &NewRun,
        parent: (&str, u64),
    ) -> Result<RunRecord, StoreError> {
        Ok(self.insert_run(new, Some(parent), None).await?.0)
    }
}

#[async_trait]
impl SqlDialect for SqliteStore {
    agent_sql::statements!(SqlDialect, sql);
    /// SQLite's `LIMIT -1`.
    const NO_LIMIT: Option<i64> = Some(-1);
    /// Only a run this store creates or claims is about to be stepped here.
    const REMEMBERS_READS: bool = false;

    /// This process's clock, which every claim of the one-process store uses too.
    fn clock(&self) -> Option<Millis> {
        Some(now_ms())
    }

    /// None: idle workers are this process's, woken by [`wake_workers`](Self::wake_workers).
    fn channel(&self) -> Option<&str> {
        None
    }

    /// The expiry, by this process's clock.
    fn lease_until(&self, ttl: Duration) -> Millis {
        now_ms().saturating_add(ms(ttl))
    }

    /// A write transaction: the statement, then the change recorded when it wrote a row.
    async fn write_status(
        &self,
        run_id: &str,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<SqliteRow>, StoreError> {
        let mut tx = self.write_tx().await?;
        let row = bind(sqlx::query(sql), args)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
        if row.is_some() {
            Self::status_changed(&mut tx, run_id).await?;
            tx.commit().await.map_err(db_err)?;
        }
        Ok(row)
    }

    async fn fetch_listing(&self, listing: Listing<'_>) -> Result<Vec<SqliteRow>, StoreError> {
        let on = if listing.aside {
            &self.readers
        } else {
            &self.pool
        };
        let sql = if listing.filter.spawned_by.is_some() {
            sql::of_parent(listing.sql)
        } else {
            listing.sql
        };
        let query = store::filtered(sql, listing.filter, listing.limit, listing.tail)?;
        query.fetch_all(on).await.map_err(db_err)
    }

    fn head_cache(&self) -> &HeadCache {
        &self.heads
    }

    /// Alone when the writer is idle, else with the other runs' commits that arrived
    /// meanwhile, in one `BEGIN IMMEDIATE` transaction; the entries it carries are written
    /// in that transaction after its compare-and-set, only if it applied (which fences them
    /// by the lease as [`record_row`](Self::record_row) does).
    async fn commit_row(&self, row: CommitRow) -> Outcome {
        self.group.commit(row).await
    }

    /// The epoch checked and the entry written in one transaction, through the group
    /// commit (alone when the writer is idle, else with the other runs' entries and commits
    /// that arrived meanwhile).
    async fn record_row(&self, lease: &Lease, row: EntryRow) -> Result<(), StoreError> {
        self.group.record(row).await?;
        self.events.wake(&lease.run_id);
        Ok(())
    }

    async fn insert_signal(&self, row: SignalRow) -> Result<Option<i64>, StoreError> {
        self.group.signal(row).await
    }

    fn wake_followers(&self, run_id: &str) {
        self.events.wake(run_id);
    }

    fn wake_workers(&self, _wake: WorkerWake) {
        self.work.notify_waiters();
    }

    async fn wake_parent(&self, child: &RunRecord) {
        if child.spawned_by.is_some() {
            self.work.notify_waiters();
        }
    }
}
