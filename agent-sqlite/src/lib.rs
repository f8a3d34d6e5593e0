//! # agent-sqlite
//!
//! The embedded [`Store`] of durable agents: one SQLite file (WAL mode, busy timeout),
//! created on first use, with the schema migrated on open. The default store of the
//! examples and of `agentctl` when no database URL is given.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_core::store::{NewRun, Store};
//! use agent_sqlite::SqliteStore;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn Store> = Arc::new(SqliteStore::open("agents.db").await?);
//! let run = store
//!     .create_run(NewRun {
//!         id: "order-42".into(),
//!         agent: "Checkout".into(),
//!         fingerprint: "…".into(),
//!         state_name: "Browsing".into(),
//!         state: serde_json::json!({ "cart": [] }),
//!     })
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

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::store::heads::{HeadCache, RunHead, commit_refusal};
use agent_core::store::history::{self, VersionPayload};
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, Lease, NewRun, PruneReport, RetentionPolicy, RunError,
    RunFilter, RunRecord, RunStatus, SignalRecord, StateAtVersion, StepCommit, Store, StoreError,
    ToolSwitch, TransitionKind, TransitionRecord, VersionSpan, creation_hash, now_ms,
    transition_hash,
};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::Notify;

mod sql;

/// Tool outputs whose JSON is larger than this many bytes are stored in the `outputs` side
/// table; the journal row keeps a summary.
pub const LARGE_OUTPUT_BYTES: usize = 8 * 1024;

const SUMMARY_CHARS: usize = 200;

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
        Ok(self.head_of(run_id).await?.is_some())
    }

    /// The run's version and epoch, as stored.
    async fn head_of(&self, run_id: &str) -> Result<Option<(u64, u64)>, StoreError> {
        let row = sqlx::query(sql::RUN_HEAD)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| Ok((to_u64(r.try_get("version"))?, to_u64(r.try_get("epoch"))?)))
            .transpose()
            .map_err(|e: sqlx::Error| corrupt(run_id, e))
    }

    async fn insert_run(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
    ) -> Result<RunRecord, StoreError> {
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
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        if inserted == 1 {
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
        let (record, stored_hash) = row_to_run(&row)?;
        if inserted == 1 {
            self.work.notify_waiters();
            return Ok(record);
        }
        let same_parent = record.parent.as_ref().map(|(p, v)| (p.as_str(), *v)) == parent;
        if stored_hash == creation_hash(new) && same_parent {
            Ok(record)
        } else {
            Err(StoreError::AlreadyExists(new.id.clone()))
        }
    }

    async fn replay_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError> {
        let rows = sqlx::query(sql::STATE_AT)
            .bind(run_id)
            .bind(to_i64(version))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let Some(last) = rows.last() else {
            let exists = sqlx::query(sql::VERSION_EXISTS)
                .bind(run_id)
                .bind(to_i64(version))
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
            return if exists.is_some() {
                Err(corrupt(
                    run_id,
                    format!("no snapshot at or before version {version}"),
                ))
            } else {
                Ok(None)
            };
        };
        let c = |e: sqlx::Error| corrupt(run_id, e);
        if to_u64(last.try_get("version")).map_err(c)? != version {
            return Ok(None);
        }
        let state_name: String = last.try_get("to_state").map_err(c)?;
        let mut payloads = Vec::with_capacity(rows.len());
        for row in &rows {
            let kind: String = row.try_get("payload_kind").map_err(c)?;
            let body = json_col(run_id, row, "payload")?;
            payloads.push(match kind.as_str() {
                "snapshot" => VersionPayload::Snapshot(body),
                "patch" => VersionPayload::Patch(body),
                other => return Err(corrupt(run_id, format!("unknown payload kind `{other}`"))),
            });
        }
        let state = history::replay(&payloads).map_err(|e| corrupt(run_id, e))?;
        Ok(Some(StateAtVersion {
            version,
            state_name,
            state,
        }))
    }
}

fn db_err(e: sqlx::Error) -> StoreError {
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

fn corrupt(run_id: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run_id: run_id.to_owned(),
        message: e.to_string(),
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: Result<i64, sqlx::Error>) -> Result<u64, sqlx::Error> {
    v.and_then(|x| {
        u64::try_from(x).map_err(|_| sqlx::Error::Decode(format!("negative value {x}").into()))
    })
}

fn ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4)
}

fn json_col(run_id: &str, row: &SqliteRow, col: &str) -> Result<Value, StoreError> {
    let text: String = row.try_get(col).map_err(|e| corrupt(run_id, e))?;
    serde_json::from_str(&text).map_err(|e| corrupt(run_id, format!("column `{col}`: {e}")))
}

fn opt_json_col(run_id: &str, row: &SqliteRow, col: &str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = row.try_get(col).map_err(|e| corrupt(run_id, e))?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| corrupt(run_id, format!("column `{col}`: {e}")))
    })
    .transpose()
}

fn parse_status(run_id: &str, s: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(s).ok_or_else(|| corrupt(run_id, format!("unknown run status `{s}`")))
}

fn parse_serde<T: serde::de::DeserializeOwned>(
    run_id: &str,
    what: &str,
    s: Option<String>,
) -> Result<Option<T>, StoreError> {
    s.map(|s| {
        serde_json::from_value(Value::String(s.clone()))
            .map_err(|_| corrupt(run_id, format!("unknown {what} `{s}`")))
    })
    .transpose()
}

fn serde_name<T: serde::Serialize>(v: &T) -> Option<String> {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// A run row and its stored creation hash.
fn row_to_run(row: &SqliteRow) -> Result<(RunRecord, String), StoreError> {
    let id: String = row
        .try_get("id")
        .map_err(|e| corrupt("?", format!("unreadable run id: {e}")))?;
    let c = |e: sqlx::Error| corrupt(&id, e);
    let status: String = row.try_get("status").map_err(c)?;
    let error_code: Option<String> = row.try_get("error_code").map_err(c)?;
    let error_message: Option<String> = row.try_get("error_message").map_err(c)?;
    let parent_id: Option<String> = row.try_get("parent_id").map_err(c)?;
    let parent_version: Option<i64> = row.try_get("parent_version").map_err(c)?;
    let claims: i64 = row.try_get("claims_without_progress").map_err(c)?;
    let record = RunRecord {
        agent: row.try_get("agent").map_err(c)?,
        fingerprint: row.try_get("fingerprint").map_err(c)?,
        state_name: row.try_get("state_name").map_err(c)?,
        state: current_state(&id, row)?,
        version: to_u64(row.try_get("version")).map_err(c)?,
        status: parse_status(&id, &status)?,
        waiting_for: row.try_get("waiting_for").map_err(c)?,
        wake_at: row.try_get("wake_at").map_err(c)?,
        error: error_code.map(|code| RunError {
            code,
            message: error_message.unwrap_or_default(),
        }),
        epoch: to_u64(row.try_get("epoch")).map_err(c)?,
        lease_owner: row.try_get("lease_owner").map_err(c)?,
        lease_expires_at: row.try_get("lease_expires_at").map_err(c)?,
        claims_without_progress: u32::try_from(claims).unwrap_or(0),
        parent: parent_id.zip(parent_version.and_then(|v| u64::try_from(v).ok())),
        created_at: row.try_get("created_at").map_err(c)?,
        updated_at: row.try_get("updated_at").map_err(c)?,
        id: id.clone(),
    };
    let hash: String = row.try_get("creation_hash").map_err(c)?;
    Ok((record, hash))
}

/// The current state of a run row: the state at its snapshot plus the later payloads.
fn current_state(run_id: &str, row: &SqliteRow) -> Result<Value, StoreError> {
    let base = json_col(run_id, row, "state")?;
    let Some(Value::Array(tail)) = opt_json_col(run_id, row, "tail")? else {
        return Ok(base);
    };
    if tail.is_empty() {
        return Ok(base);
    }
    let mut payloads = vec![VersionPayload::Snapshot(base)];
    for item in tail {
        let payload = match item {
            Value::Array(mut pair) if pair.len() == 2 => {
                let body = pair.pop().unwrap_or(Value::Null);
                match pair.pop() {
                    Some(Value::String(kind)) if kind == "snapshot" => {
                        VersionPayload::Snapshot(body)
                    }
                    Some(Value::String(kind)) if kind == "patch" => VersionPayload::Patch(body),
                    other => {
                        return Err(corrupt(run_id, format!("unknown payload kind {other:?}")));
                    }
                }
            }
            other => return Err(corrupt(run_id, format!("malformed history item {other}"))),
        };
        payloads.push(payload);
    }
    history::replay(&payloads).map_err(|e| corrupt(run_id, e))
}

fn row_to_entry(run_id: &str, row: &SqliteRow) -> Result<JournalEntry, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let kind: String = row.try_get("kind").map_err(c)?;
    let status: String = row.try_get("status").map_err(c)?;
    let seq: i64 = row.try_get("seq").map_err(c)?;
    let attempts: i64 = row.try_get("attempts").map_err(c)?;
    Ok(JournalEntry {
        run_id: row.try_get("run_id").map_err(c)?,
        version: to_u64(row.try_get("version")).map_err(c)?,
        seq: u32::try_from(seq).map_err(|e| corrupt(run_id, e))?,
        kind: EntryKind::parse(&kind)
            .ok_or_else(|| corrupt(run_id, format!("unknown entry kind `{kind}`")))?,
        state: row.try_get("state").map_err(c)?,
        name: row.try_get("name").map_err(c)?,
        tool_kind: parse_serde(run_id, "tool kind", row.try_get("tool_kind").map_err(c)?)?,
        input_hash: row.try_get("input_hash").map_err(c)?,
        input: json_col(run_id, row, "input")?,
        idempotency_key: row.try_get("idempotency_key").map_err(c)?,
        status: CallStatus::parse(&status)
            .ok_or_else(|| corrupt(run_id, format!("unknown call status `{status}`")))?,
        output: opt_json_col(run_id, row, "output")?,
        error_class: parse_serde(
            run_id,
            "error class",
            row.try_get("error_class").map_err(c)?,
        )?,
        error_code: row.try_get("error_code").map_err(c)?,
        error_message: row.try_get("error_message").map_err(c)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        duration_ms: to_u64(row.try_get("duration_ms")).map_err(c)?,
        started_at: row.try_get("started_at").map_err(c)?,
        finished_at: row.try_get("finished_at").map_err(c)?,
    })
}

fn summary(text: &str) -> String {
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn lease_of(r: &RunRecord, worker: &str) -> Lease {
    Lease {
        run_id: r.id.clone(),
        worker: worker.to_owned(),
        epoch: r.epoch,
        expires_at: r.lease_expires_at.unwrap_or(r.updated_at),
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
        let json = serde_json::to_string(graph).map_err(|e| StoreError::Backend(e.to_string()))?;
        sqlx::query(sql::REGISTER_AGENT)
            .bind(&graph.agent)
            .bind(graph.fingerprint())
            .bind(json)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError> {
        let row = sqlx::query(sql::AGENT_GRAPH)
            .bind(agent)
            .bind(fingerprint)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| {
            let text: String = r.try_get("graph").map_err(|e| corrupt(agent, e))?;
            GraphDescription::from_json(&text)
                .map_err(|e| corrupt(agent, format!("stored graph: {e}")))
        })
        .transpose()
    }

    async fn agents(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(sql::AGENTS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                r.try_get("agent")
                    .map_err(|e| StoreError::Backend(e.to_string()))
            })
            .collect()
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.insert_run(&run, None).await
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| row_to_run(&r).map(|(rec, _)| rec)).transpose()
    }

    async fn claim_run(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, RunRecord)>, StoreError> {
        let row = sqlx::query(sql::CLAIM_RUN)
            .bind(run_id)
            .bind(worker)
            .bind(now_ms())
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => {
                let (r, _) = row_to_run(&row)?;
                Ok(Some((lease_of(&r, worker), r)))
            }
            None if !self.exists(run_id).await? => Err(StoreError::NotFound(run_id.to_owned())),
            None => Ok(None),
        }
    }

    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<(Lease, RunRecord)>, StoreError> {
        let now = now_ms();
        let agents =
            serde_json::to_string(agents).map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut tx = self.write_tx().await?;
        let ids: Vec<String> = sqlx::query_scalar(sql::CLAIMABLE)
            .bind(&agents)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            let row = sqlx::query(sql::CLAIM_RUN)
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(ms(ttl))
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            if let Some(row) = row {
                match row_to_run(&row) {
                    Ok((r, _)) => out.push((lease_of(&r, worker), r)),
                    // A run whose stored data no longer reads must not keep the others from
                    // being claimed: quarantine it for an operator and go on.
                    Err(StoreError::Corrupt { run_id, message }) => {
                        tracing::error!(run_id, message, "quarantining a run with corrupt data");
                        sqlx::query(sql::QUARANTINE_CORRUPT)
                            .bind(&run_id)
                            .bind(&message)
                            .bind(now)
                            .execute(&mut *tx)
                            .await
                            .map_err(db_err)?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(out)
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let expires_at = now_ms().saturating_add(ms(ttl));
        let row = sqlx::query(sql::RENEW_LEASE)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(&lease.worker)
            .bind(expires_at)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(_) => Ok(Lease {
                expires_at,
                ..lease.clone()
            }),
            None => Err(self.fenced_out(lease).await?),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let released = sqlx::query(sql::RELEASE_LEASE)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        if released > 0 {
            self.work.notify_waiters();
        }
        Ok(())
    }

    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query(sql::HAND_BACK)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
        let expired = sqlx::query(sql::EXPIRE_LEASES_OF)
            .bind(worker)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        if expired > 0 {
            self.work.notify_waiters();
        }
        Ok(expired)
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        if entry.run_id != lease.run_id {
            return Err(StoreError::Backend(format!(
                "journal entry of run `{}` recorded under the lease of run `{}`",
                entry.run_id, lease.run_id
            )));
        }
        let output = entry.output.as_ref().map(Value::to_string);
        let external = output
            .as_ref()
            .is_some_and(|o| o.len() > LARGE_OUTPUT_BYTES);
        let mut tx = self.write_tx().await?;
        let head = sqlx::query(sql::RUN_HEAD)
            .bind(&lease.run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::NotFound(lease.run_id.clone()))?;
        let epoch = to_u64(head.try_get("epoch")).map_err(|e| corrupt(&lease.run_id, e))?;
        if epoch != lease.epoch {
            return Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            });
        }
        sqlx::query(sql::UPSERT_ENTRY)
            .bind(&entry.run_id)
            .bind(to_i64(entry.version))
            .bind(i64::from(entry.seq))
            .bind(entry.kind.as_str())
            .bind(&entry.state)
            .bind(&entry.name)
            .bind(entry.tool_kind.map(|k| k.as_str()))
            .bind(&entry.input_hash)
            .bind(entry.input.to_string())
            .bind(&entry.idempotency_key)
            .bind(entry.status.as_str())
            .bind(if external { None } else { output.as_deref() })
            .bind(external)
            .bind(output.as_deref().map(summary))
            .bind(
                output
                    .as_ref()
                    .map(|o| i64::try_from(o.len()).unwrap_or(i64::MAX)),
            )
            .bind(entry.error_class.as_ref().and_then(serde_name))
            .bind(&entry.error_code)
            .bind(&entry.error_message)
            .bind(i64::from(entry.attempts))
            .bind(to_i64(entry.duration_ms))
            .bind(entry.started_at)
            .bind(entry.finished_at)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let key = (to_i64(entry.version), i64::from(entry.seq));
        if external {
            sqlx::query(sql::UPSERT_OUTPUT)
                .bind(&entry.run_id)
                .bind(key.0)
                .bind(key.1)
                .bind(output.as_deref())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        } else {
            sqlx::query(sql::DELETE_OUTPUT)
                .bind(&entry.run_id)
                .bind(key.0)
                .bind(key.1)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)
    }

    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let rows = sqlx::query(sql::JOURNAL)
            .bind(run_id)
            .bind(version.map(to_i64))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        if rows.is_empty() && !self.exists(run_id).await? {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        rows.iter().map(|r| row_to_entry(run_id, r)).collect()
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
    ) -> Result<RunRecord, StoreError> {
        let run_id = lease.run_id.as_str();
        let now = now_ms();
        let cached = self.heads.at(run_id, commit.expected_version);
        let mut tx = self.write_tx().await?;
        let head = match cached {
            Some(head) => head,
            None => {
                let base = sqlx::query(sql::COMMIT_BASE)
                    .bind(run_id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_err)?
                    .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
                let c = |e: sqlx::Error| corrupt(run_id, e);
                let (record, _) = row_to_run(&base)?;
                // The update's compare-and-set decides; read here, the head can say no
                // before any work.
                let stored = Some((record.version, record.epoch));
                if let Some(refused) = commit_refusal(lease, commit.expected_version, stored) {
                    return Err(refused);
                }
                RunHead {
                    record,
                    last_hash: base.try_get("last_hash").map_err(c)?,
                    patch_bytes: to_u64(base.try_get("patch_bytes")).map_err(c)?,
                }
            }
        };
        if let Some(signal) = commit.consumed_signal {
            let pending = sqlx::query(sql::SIGNAL_PENDING)
                .bind(signal)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            if pending.is_none() {
                return Err(StoreError::Backend(format!(
                    "signal {signal} is not pending for run `{run_id}`"
                )));
            }
        }
        let version = commit.expected_version + 1;
        let (payload, patch_bytes) =
            history::encode(Some(&head.record.state), &commit.state, head.patch_bytes);
        let hash = transition_hash(&head.last_hash, &commit.link(lease));
        let (payload_kind, body) = match &payload {
            VersionPayload::Snapshot(v) => ("snapshot", v.to_string()),
            VersionPayload::Patch(v) => ("patch", v.to_string()),
        };
        // The run row keeps the state of the latest snapshot only; a snapshot's payload is
        // that same state, serialized once for both rows.
        let snapshot_state = payload.is_snapshot().then_some(body.as_str());
        let update = |statement| {
            sqlx::query(statement)
                .bind(run_id)
                .bind(to_i64(version))
                .bind(&commit.to_state)
                .bind(snapshot_state)
                .bind(commit.status.as_str())
                .bind(&commit.waiting_for)
                .bind(commit.wake_at)
                .bind(commit.error.as_ref().map(|e| e.code.as_str()))
                .bind(commit.error.as_ref().map(|e| e.message.as_str()))
                .bind(&hash)
                .bind(to_i64(patch_bytes))
                .bind(now)
                .bind(to_i64(lease.epoch))
                .bind(to_i64(commit.expected_version))
        };
        // Most steps keep the run's status: a statement that leaves the indexed status
        // and lease columns alone, then the full one if the stored status differs.
        let mut updated = None;
        if commit.status == head.record.status && !commit.status.is_final() {
            updated = update(sql::COMMIT_RUN_SAME_STATUS)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        if updated.is_none() {
            updated = update(sql::COMMIT_RUN)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        let Some(updated) = updated else {
            // The cached head is one the run has moved past (another store on the same
            // file wrote since): nothing was written. Say why from the stored head.
            drop(tx);
            let stored = self.head_of(run_id).await?;
            return Err(
                commit_refusal(lease, commit.expected_version, stored).unwrap_or_else(|| {
                    StoreError::Backend(format!("run `{run_id}` refused a commit it matches"))
                }),
            );
        };
        let c = |e: sqlx::Error| corrupt(run_id, e);
        let lease_owner: Option<String> = updated.try_get("lease_owner").map_err(c)?;
        let lease_expires_at: Option<i64> = updated.try_get("lease_expires_at").map_err(c)?;
        sqlx::query(sql::INSERT_TRANSITION)
            .bind(run_id)
            .bind(to_i64(version))
            .bind(&commit.from_state)
            .bind(&commit.to_state)
            .bind(commit.kind.as_str())
            .bind(commit.status.as_str())
            .bind(to_i64(lease.epoch))
            .bind(now)
            .bind(&hash)
            .bind(payload_kind)
            .bind(&body)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(signal) = commit.consumed_signal {
            sqlx::query(sql::CONSUME_SIGNAL)
                .bind(signal)
                .bind(to_i64(version))
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        let mut record = head.record;
        record.version = version;
        record.state_name.clone_from(&commit.to_state);
        record.state = commit.state.clone();
        record.status = commit.status;
        record.waiting_for.clone_from(&commit.waiting_for);
        record.wake_at = commit.wake_at;
        record.error.clone_from(&commit.error);
        record.epoch = lease.epoch;
        record.claims_without_progress = 0;
        record.lease_owner = lease_owner;
        record.lease_expires_at = lease_expires_at;
        record.updated_at = now;
        self.heads.remember(RunHead {
            record: record.clone(),
            last_hash: hash,
            patch_bytes,
        });
        Ok(record)
    }

    async fn version_span(&self, run_id: &str) -> Result<Option<VersionSpan>, StoreError> {
        // An index-only aggregate: the runner asks this at every claim.
        let row = sqlx::query(
            "SELECT min(version) AS first, max(version) AS last, count(*) AS n \
             FROM transitions WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        let c = |e: sqlx::Error| corrupt(run_id, e);
        let n: i64 = row.try_get("n").map_err(c)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(VersionSpan {
            first: to_u64(row.try_get("first")).map_err(c)?,
            last: to_u64(row.try_get("last")).map_err(c)?,
            count: u64::try_from(n).unwrap_or(0),
        }))
    }

    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        let rows = sqlx::query(sql::HISTORY)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        if rows.is_empty() && !self.exists(run_id).await? {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        rows.iter()
            .map(|row| {
                let c = |e: sqlx::Error| corrupt(run_id, e);
                let kind: String = row.try_get("kind").map_err(c)?;
                let status: String = row.try_get("status").map_err(c)?;
                Ok(TransitionRecord {
                    run_id: row.try_get("run_id").map_err(c)?,
                    version: to_u64(row.try_get("version")).map_err(c)?,
                    from_state: row.try_get("from_state").map_err(c)?,
                    to_state: row.try_get("to_state").map_err(c)?,
                    kind: TransitionKind::parse(&kind).ok_or_else(|| {
                        corrupt(run_id, format!("unknown transition kind `{kind}`"))
                    })?,
                    status: parse_status(run_id, &status)?,
                    epoch: to_u64(row.try_get("epoch")).map_err(c)?,
                    created_at: row.try_get("created_at").map_err(c)?,
                    hash: row.try_get("hash").map_err(c)?,
                })
            })
            .collect()
    }

    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError> {
        let at = self.replay_at(run_id, version).await?;
        if at.is_none() && !self.exists(run_id).await? {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        Ok(at)
    }

    async fn fork(
        &self,
        run_id: &str,
        version: u64,
        new_id: &str,
    ) -> Result<RunRecord, StoreError> {
        let source = self
            .load_run(run_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        let at = self
            .replay_at(run_id, version)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("{run_id}@{version}")))?;
        let new = NewRun {
            id: new_id.to_owned(),
            agent: source.agent,
            fingerprint: source.fingerprint,
            state_name: at.state_name,
            state: at.state,
        };
        self.insert_run(&new, Some((run_id, version))).await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        let statuses =
            serde_json::to_string(&statuses).map_err(|e| StoreError::Backend(e.to_string()))?;
        let rows = sqlx::query(sql::LIST_RUNS)
            .bind(&filter.agent)
            .bind(statuses)
            .bind(
                filter
                    .limit
                    .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX)),
            )
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| match row_to_run(r) {
                Ok((rec, _)) => Ok(rec),
                Err(StoreError::Corrupt { run_id, message }) => Ok(RunRecord::unreadable(
                    run_id,
                    r.try_get("agent").unwrap_or_default(),
                    message,
                )),
                Err(e) => Err(e),
            })
            .collect()
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        let id: Option<i64> = sqlx::query_scalar(sql::SEND_SIGNAL)
            .bind(run_id)
            .bind(name)
            .bind(payload.to_string())
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        let id = id.ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        self.work.notify_waiters();
        Ok(id)
    }

    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let rows = sqlx::query(sql::PENDING_SIGNALS)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        if rows.is_empty() && !self.exists(run_id).await? {
            return Err(StoreError::NotFound(run_id.to_owned()));
        }
        rows.iter()
            .map(|row| {
                let c = |e: sqlx::Error| corrupt(run_id, e);
                let consumed: Option<i64> = row.try_get("consumed_at_version").map_err(c)?;
                Ok(SignalRecord {
                    id: row.try_get("id").map_err(c)?,
                    run_id: row.try_get("run_id").map_err(c)?,
                    name: row.try_get("name").map_err(c)?,
                    payload: json_col(run_id, row, "payload")?,
                    created_at: row.try_get("created_at").map_err(c)?,
                    consumed_at_version: consumed.and_then(|v| u64::try_from(v).ok()),
                })
            })
            .collect()
    }

    async fn quarantine(&self, lease: &Lease, error: RunError) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(sql::QUARANTINE_UNDER_LEASE)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(&error.code)
            .bind(&error.message)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => row_to_run(&row).map(|(r, _)| r),
            None => Err(self.fenced_out(lease).await?),
        }
    }

    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunError>,
    ) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(sql::SET_STATUS)
            .bind(run_id)
            .bind(status.as_str())
            .bind(error.as_ref().map(|e| e.code.as_str()))
            .bind(error.as_ref().map(|e| e.message.as_str()))
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => {
                self.work.notify_waiters();
                row_to_run(&row).map(|(r, _)| r)
            }
            None => match self.load_run(run_id).await? {
                None => Err(StoreError::NotFound(run_id.to_owned())),
                Some(r) => Err(StoreError::LeaseLost {
                    run_id: run_id.to_owned(),
                    epoch: r.epoch,
                }),
            },
        }
    }

    async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError> {
        let keep = to_i64(policy.keep_last_versions.max(1));
        let candidates = sqlx::query(sql::PRUNE_CANDIDATES)
            .bind(keep)
            .bind(policy.only_final_runs)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let mut report = PruneReport::default();
        for row in &candidates {
            let id: String = row.try_get("id").map_err(|e| corrupt("?", e))?;
            let cutoff = to_u64(row.try_get("cutoff")).map_err(|e| corrupt(&id, e))?;
            let Some(at) = self.replay_at(&id, cutoff).await? else {
                continue;
            };
            let final_run = self
                .load_run(&id)
                .await?
                .is_some_and(|r| r.status.is_final());
            let mut tx = self.write_tx().await?;
            sqlx::query(sql::PRUNE_SNAPSHOT)
                .bind(&id)
                .bind(to_i64(cutoff))
                .bind(at.state.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let removed = sqlx::query(sql::PRUNE_TRANSITIONS)
                .bind(&id)
                .bind(to_i64(cutoff))
                .execute(&mut *tx)
                .await
                .map_err(db_err)?
                .rows_affected();
            sqlx::query(sql::PRUNE_OUTPUTS)
                .bind(&id)
                .bind(to_i64(cutoff))
                .bind(final_run)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let entries = sqlx::query(sql::PRUNE_JOURNAL)
                .bind(&id)
                .bind(to_i64(cutoff))
                .bind(final_run)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?
                .rows_affected();
            tx.commit().await.map_err(db_err)?;
            report.versions_removed += removed;
            report.entries_removed += entries;
        }
        Ok(report)
    }

    async fn set_tool_enabled(
        &self,
        tool: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::SET_TOOL)
            .bind(tool)
            .bind(enabled)
            .bind(reason)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError> {
        let rows = sqlx::query(sql::TOOL_SWITCHES)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                let c = |e: sqlx::Error| StoreError::Backend(e.to_string());
                Ok(ToolSwitch {
                    tool: row.try_get("tool").map_err(c)?,
                    enabled: row.try_get("enabled").map_err(c)?,
                    reason: row.try_get("reason").map_err(c)?,
                    updated_at: row.try_get("updated_at").map_err(c)?,
                })
            })
            .collect()
    }

    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError> {
        let enabled: Option<bool> = sqlx::query_scalar(sql::TOOL_ENABLED)
            .bind(tool)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(enabled.unwrap_or(true))
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.work.notified()).await;
    }

    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let bytes: i64 = sqlx::query_scalar(sql::STORAGE_BYTES)
            .bind(run_id)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(Some(u64::try_from(bytes).unwrap_or(0)))
    }
}
