//! # agent-pg
//!
//! The PostgreSQL [`Store`] of durable agents: every transition is one compare-and-set
//! statement, many workers share runs through leases with fencing epochs and
//! `FOR UPDATE SKIP LOCKED`, idle workers wake on `LISTEN/NOTIFY`, every version is kept
//! (as deltas with size-spaced snapshots) for time travel and fork until a retention policy
//! prunes it.
//!
//! ## Getting started
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_core::store::{NewRun, Store};
//! use agent_pg::PgStore;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Connect into a schema of its own (created by `migrate`), then apply the migrations.
//! let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/postgres", "agents").await?;
//! store.migrate().await?;
//! let store: Arc<dyn Store> = Arc::new(store);
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
//! ## Schema
//!
//! [`PgStore::migrate`] applies the embedded migrations (`agent-pg/migrations/`, one
//! transaction each) inside the store's schema: `runs` (version, status, lease, and the
//! state at the latest snapshot: the current state adds the later patches, so a step never
//! rewrites the whole state and WAL per step stays proportional to what changed),
//! `transitions` (one row per version: the transition record, hash-chained, and the
//! state as a JSON Patch or snapshot), `journal` (every tool call, decision and compensation;
//! outputs over [`LARGE_OUTPUT_BYTES`] in `outputs`), `signals`, `tool_switches` and
//! `agents`. `docs/operator-queries.md` has ready-to-run SQL for operators.
//!
//! ## Commits and lost acknowledgements
//!
//! [`Store::commit_step`] is a single statement (possibly shared with other runs' commits,
//! see below): the update of the run row carries
//! `WHERE version = $expected AND epoch = $epoch`, and the transition insert and the signal
//! update hang off its `RETURNING`, so a stale writer writes nothing. When the connection
//! drops, the error is [`StoreError::Unavailable`] and the commit may or may not have
//! happened. Resolve it by re-reading, never by committing blindly again: call
//! [`Store::load_run`]; if `version == expected + 1` and `epoch` is the lease's epoch and the
//! state is the one committed, the commit happened; if `version == expected`, it did not and
//! may be retried with the same [`StepCommit`]; anything else
//! means another worker moved the run, so stop.
//!
//! ## Group commit
//!
//! With many runs stepping at once, most of what a commit costs the worker and the server
//! is the statement itself (round trip, parse and bind, executor start, transaction, WAL
//! flush), not its rows. So a store allows a few commit statements in flight at once
//! ([`COMMITS_IN_FLIGHT`] by default), and commits that arrive while they are all busy
//! queue; the next statement carries everything queued (up to [`COMMITS_PER_STATEMENT`]).
//! - A commit that finds a free slot and nobody queued is sent at once, as before: one run
//!   stepping alone waits for nothing.
//! - Every row of a grouped statement carries its own compare-and-set on version and
//!   epoch, so each commit gets the answer it would have got alone (`Conflict`,
//!   `LeaseLost`, or the new record). A run appears at most once per statement.
//! - When the server refuses a grouped statement, nothing of it was written, and its
//!   commits are sent again one statement each, so one run's problem stays its own.
//! - When the connection fails, every commit of the statement gets
//!   [`StoreError::Unavailable`] and is resolved by re-reading, as above.
//! - A queued commit whose caller stops waiting is dropped unsent.
//!
//! [`PgStore::with_group_commit`] sets both bounds (`per_statement = 1` turns grouping off);
//! [`PgStore::group_commit_stats`] says how many commits went in how many statements.
//! Commits that consume a signal are always a statement of their own.
//!
//! Commit statements run on connections of the store's own, outside the pool: one per
//! slot at most, opened when first needed and kept. Through the pool, sqlx pings a
//! connection when it hands it out and again when it is given back, so every commit would
//! cost three round trips. A kept connection idle for over two seconds is pinged before
//! use; one whose statement failed for any reason but the server's refusal is dropped and
//! replaced; all of them are dropped, and commits refused as
//! [`StoreError::Unavailable`], once the pool is closed.
//!
//! On a 2-core machine with 64 runs in flight, grouping carried about 10 commits per
//! statement, and commits per second were about 2.5 times the bare SQL's through the pool;
//! one run stepping alone committed as fast as the bare SQL (BENCHMARKS.md, "Group commit").
//!
//! ## Feature flags
//!
//! None. TLS is rustls with the `ring` provider (`sslmode=require` in the URL).
//!
//! ## Connections
//!
//! With sqlx 0.9.0, opening a TLS connection takes about 90 ms even on loopback: sqlx no
//! longer sets `TCP_NODELAY`, and the handshake's small writes wait for delayed ACKs
//! (transact-rs/sqlx#4335, fixed upstream but not released). The pool keeps its
//! connections, so a running worker does not notice. A worker process that restarts does:
//! it opens a connection to migrate, then one per run in flight. On one host, a Unix socket
//! (`postgres://user@localhost/db?host=/var/run/postgresql`) or `sslmode=disable` avoids it.
//!
//! Besides its pool, a store opens up to [`COMMITS_IN_FLIGHT`] connections of its own for
//! commit statements (see "Group commit"); count them when sizing the server's
//! `max_connections`.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::store::heads::{HeadCache, RunHead, commit_refusal};
use agent_core::store::history::{self, VersionPayload};
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, Lease, Millis, NewRun, PruneReport, RetentionPolicy,
    RunError, RunFilter, RunRecord, RunStatus, SignalRecord, StateAtVersion, StepCommit, Store,
    StoreError, ToolStats, ToolSwitch, TransitionKind, TransitionRecord, VersionSpan,
    creation_hash, transition_hash,
};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::Notify;

mod group_commit;
mod sql;

pub use group_commit::GroupCommitStats;
use group_commit::{CommitRow, GroupCommit};

/// Tool outputs whose JSON is larger than this many bytes are stored in the `outputs` side
/// table; the journal row keeps a summary.
pub const LARGE_OUTPUT_BYTES: usize = 8 * 1024;

/// How many characters of an output the journal keeps as its summary.
const SUMMARY_CHARS: usize = 200;

/// Default of [`PgStore::with_group_commit`]: commit statements in flight at once.
pub const COMMITS_IN_FLIGHT: usize = 4;

/// Default of [`PgStore::with_group_commit`]: commits in one grouped statement at most.
pub const COMMITS_PER_STATEMENT: usize = 64;

/// Errors of setting a [`PgStore`] up (connecting, migrating).
#[derive(Debug, thiserror::Error)]
pub enum PgSetupError {
    /// The schema name is not a plain identifier.
    #[error(
        "invalid schema name `{0}`: use letters, digits and `_`, starting with a letter or `_`"
    )]
    InvalidSchema(String),
    /// Connecting failed.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// A [`Store`] on PostgreSQL. Cheap to clone the pool inside; share the store with `Arc`.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
    schema: String,
    channel: String,
    heads: HeadCache,
    work: Arc<Notify>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    group: Arc<GroupCommit>,
    /// How the pool connects; the group commit opens its connections the same way.
    options: PgConnectOptions,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63
}

impl PgStore {
    /// Connect to `url` with the store's tables in `schema` (created by [`Self::migrate`]).
    /// Connections show as `agent-pg/<schema>` in `pg_stat_activity`.
    ///
    /// # Errors
    /// [`PgSetupError::InvalidSchema`] for a schema name that is not a plain identifier;
    /// [`PgSetupError::Connect`] when the URL is invalid or the server does not answer.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, PgSetupError> {
        Self::connect_with(url, schema, PgPoolOptions::new().max_connections(16)).await
    }

    /// [`Self::connect`] with the pool's options (size, timeouts) chosen by the caller.
    ///
    /// # Errors
    /// As [`Self::connect`].
    pub async fn connect_with(
        url: &str,
        schema: &str,
        pool: PgPoolOptions,
    ) -> Result<Self, PgSetupError> {
        if !valid_schema(schema) {
            return Err(PgSetupError::InvalidSchema(schema.to_owned()));
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(PgSetupError::Connect)?
            .options([("search_path", schema)])
            .application_name(&format!("agent-pg/{schema}"));
        let pool = pool
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(PgSetupError::Connect)?;
        Ok(Self {
            group: Arc::new(GroupCommit::new(
                pool.clone(),
                options.clone(),
                COMMITS_IN_FLIGHT,
                COMMITS_PER_STATEMENT,
            )),
            options,
            pool,
            schema: schema.to_owned(),
            channel: format!("agent_work_{schema}"),
            heads: HeadCache::default(),
            work: Arc::new(Notify::new()),
            listener: Mutex::new(None),
        })
    }

    /// Create the schema if needed and apply the embedded migrations (each in one
    /// transaction; concurrent callers serialize on an advisory lock). Idempotent.
    ///
    /// # Errors
    /// [`PgSetupError::Migrate`] when a migration fails or an applied one was changed.
    pub async fn migrate(&self) -> Result<(), PgSetupError> {
        let mut migrator = sqlx::migrate!("./migrations");
        let quoted = format!("\"{}\"", self.schema);
        migrator.create_schema(quoted.clone());
        migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
        migrator.run(&self.pool).await?;
        Ok(())
    }

    /// Drop the store's schema and everything in it (tests, throwaway environments).
    ///
    /// # Errors
    /// [`PgSetupError::Database`] when the statement fails.
    pub async fn drop_schema(&self) -> Result<(), PgSetupError> {
        sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Set how step commits share statements (see "Group commit" in the crate docs): at
    /// most `in_flight` commit statements at once (at least 1), each carrying at most
    /// `per_statement` commits (at least 1). `per_statement = 1` turns grouping off: every
    /// commit is a statement of its own, queued while `in_flight` are running.
    #[must_use]
    pub fn with_group_commit(mut self, in_flight: usize, per_statement: usize) -> Self {
        self.group = Arc::new(GroupCommit::new(
            self.pool.clone(),
            self.options.clone(),
            in_flight,
            per_statement,
        ));
        self
    }

    /// How many commits went to the database in how many statements, since the store
    /// was opened.
    #[must_use]
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.group.stats()
    }

    /// The connection pool, for callers that add their own tables or measure (benchmarks).
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the store's tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The `NOTIFY` channel on which the store announces new work.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Read a run row, remembering its head for the next commit.
    fn run_from_row(&self, row: &PgRow) -> Result<RunRecord, StoreError> {
        let (record, head) = row_to_run(row)?;
        self.heads.remember(head);
        Ok(record)
    }

    /// Why a write fenced by `lease` matched no row: the run is gone, or the epoch moved.
    async fn fenced_out(&self, lease: &Lease) -> Result<StoreError, StoreError> {
        Ok(if self.head_of(&lease.run_id).await?.is_none() {
            StoreError::NotFound(lease.run_id.clone())
        } else {
            StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            }
        })
    }

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
    ) -> Result<Option<RunRecord>, StoreError> {
        let hash = transition_hash("", &new.link());
        let row = sqlx::query(sql::INSERT_RUN)
            .bind(&new.id)
            .bind(&new.agent)
            .bind(&new.fingerprint)
            .bind(&new.state_name)
            .bind(&new.state)
            .bind(creation_hash(new))
            .bind(&hash)
            .bind(parent.map(|p| p.0))
            .bind(parent.map(|p| to_i64(p.1)))
            .bind(&self.channel)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| self.run_from_row(&r)).transpose()
    }

    async fn existing_same(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
    ) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(&new.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::Backend(format!("run `{}` vanished", new.id)))?;
        let stored_hash: String = row
            .try_get("creation_hash")
            .map_err(|e| corrupt(&new.id, e))?;
        let record = self.run_from_row(&row)?;
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
                Err(StoreError::Corrupt {
                    run_id: run_id.to_owned(),
                    message: format!("no snapshot at or before version {version}"),
                })
            } else {
                Ok(None)
            };
        };
        let last_version = to_u64(last.try_get("version")).map_err(|e| corrupt(run_id, e))?;
        if last_version != version {
            return Ok(None);
        }
        let state_name: String = last.try_get("to_state").map_err(|e| corrupt(run_id, e))?;
        let mut payloads = Vec::with_capacity(rows.len());
        for row in &rows {
            let kind: String = row
                .try_get("payload_kind")
                .map_err(|e| corrupt(run_id, e))?;
            let body: Value = row.try_get("payload").map_err(|e| corrupt(run_id, e))?;
            payloads.push(match kind.as_str() {
                "snapshot" => VersionPayload::Snapshot(body),
                "patch" => VersionPayload::Patch(body),
                other => {
                    return Err(StoreError::Corrupt {
                        run_id: run_id.to_owned(),
                        message: format!("unknown payload kind `{other}`"),
                    });
                }
            });
        }
        let state = history::replay(&payloads).map_err(|e| StoreError::Corrupt {
            run_id: run_id.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Some(StateAtVersion {
            version,
            state_name,
            state,
        }))
    }

    fn ensure_listener(&self) {
        let mut slot = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let pool = self.pool.clone();
        let channel = self.channel.clone();
        let work = Arc::clone(&self.work);
        *slot = Some(tokio::spawn(async move {
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(&channel).await {
                    tracing::warn!(error = %e, "LISTEN failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                // `recv` reconnects by itself after a dropped connection; wake everyone
                // then too, since notifications may have been missed meanwhile.
                loop {
                    match listener.recv().await {
                        Ok(_) => work.notify_waiters(),
                        Err(e) => {
                            tracing::warn!(error = %e, "LISTEN connection lost");
                            work.notify_waiters();
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            break;
                        }
                    }
                }
            }
        }));
    }
}

/// Map a driver error: connection-level failures are transient ([`StoreError::Unavailable`]).
fn db_err(e: sqlx::Error) -> StoreError {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            c.starts_with("08")
                || c.starts_with("57P")
                || c.starts_with("53")
                || c == "40001"
                || c == "40P01"
                || c == "25006"
        }),
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

fn parse_status(run_id: &str, s: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(s).ok_or_else(|| corrupt(run_id, format!("unknown run status `{s}`")))
}

/// Parse a stored enum name through serde (for enums without a `parse`).
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

fn row_to_run(row: &PgRow) -> Result<(RunRecord, RunHead), StoreError> {
    let id: String = row
        .try_get("id")
        .map_err(|e| corrupt("?", format!("unreadable run id: {e}")))?;
    let c = |e: sqlx::Error| corrupt(&id, e);
    let status: String = row.try_get("status").map_err(c)?;
    let error_code: Option<String> = row.try_get("error_code").map_err(c)?;
    let error_message: Option<String> = row.try_get("error_message").map_err(c)?;
    let parent_id: Option<String> = row.try_get("parent_id").map_err(c)?;
    let parent_version: Option<i64> = row.try_get("parent_version").map_err(c)?;
    let claims: i32 = row.try_get("claims_without_progress").map_err(c)?;
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
    let head = RunHead {
        record: record.clone(),
        last_hash: row.try_get("last_hash").map_err(c)?,
        patch_bytes: to_u64(row.try_get("patch_bytes")).map_err(c)?,
    };
    Ok((record, head))
}

/// The current state of a run row: the state at its snapshot plus the later payloads.
fn current_state(run_id: &str, row: &PgRow) -> Result<Value, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let base: Value = row.try_get("state").map_err(c)?;
    let tail: Option<Value> = row.try_get("tail").map_err(c)?;
    let Some(Value::Array(tail)) = tail else {
        return Ok(base);
    };
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

fn row_to_entry(run_id: &str, row: &PgRow) -> Result<JournalEntry, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let kind: String = row.try_get("kind").map_err(c)?;
    let status: String = row.try_get("status").map_err(c)?;
    let seq: i32 = row.try_get("seq").map_err(c)?;
    let attempts: i32 = row.try_get("attempts").map_err(c)?;
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
        input: row.try_get("input").map_err(c)?,
        idempotency_key: row.try_get("idempotency_key").map_err(c)?,
        status: CallStatus::parse(&status)
            .ok_or_else(|| corrupt(run_id, format!("unknown call status `{status}`")))?,
        output: row.try_get("output").map_err(c)?,
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

fn summary(output: &Value) -> String {
    let text = output.to_string();
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[async_trait]
impl Store for PgStore {
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
        let json = serde_json::to_value(graph).map_err(|e| StoreError::Backend(e.to_string()))?;
        sqlx::query(sql::REGISTER_AGENT)
            .bind(&graph.agent)
            .bind(graph.fingerprint())
            .bind(json)
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
            let v: Value = r.try_get("graph").map_err(|e| corrupt(agent, e))?;
            serde_json::from_value(v).map_err(|e| corrupt(agent, format!("stored graph: {e}")))
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
        match self.insert_run(&run, None).await? {
            Some(r) => Ok(r),
            None => self.existing_same(&run, None).await,
        }
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|r| self.run_from_row(&r)).transpose()
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
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => {
                let r = self.run_from_row(&row)?;
                Ok(Some((lease_of(&r, worker), r)))
            }
            None if self.head_of(run_id).await?.is_none() => {
                Err(StoreError::NotFound(run_id.to_owned()))
            }
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
        let rows = sqlx::query(sql::CLAIM_NEXT)
            .bind(agents)
            .bind(worker)
            .bind(ms(ttl))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            match self.run_from_row(row) {
                Ok(r) => out.push((lease_of(&r, worker), r)),
                // A run whose stored data no longer reads must not keep the others from
                // being claimed: quarantine it for an operator and go on.
                Err(StoreError::Corrupt { run_id, message }) => {
                    tracing::error!(run_id, message, "quarantining a run with corrupt data");
                    sqlx::query(sql::QUARANTINE_CORRUPT)
                        .bind(&run_id)
                        .bind(&message)
                        .execute(&self.pool)
                        .await
                        .map_err(db_err)?;
                }
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| (a.1.created_at, &a.1.id).cmp(&(b.1.created_at, &b.1.id)));
        Ok(out)
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let row = sqlx::query(sql::RENEW_LEASE)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(&lease.worker)
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => Ok(Lease {
                expires_at: row.try_get(0).map_err(|e| corrupt(&lease.run_id, e))?,
                ..lease.clone()
            }),
            None => Err(self.fenced_out(lease).await?),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query(sql::RELEASE_LEASE)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(&self.channel)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
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
            .bind(&self.channel)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(expired.len() as u64)
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        if entry.run_id != lease.run_id {
            return Err(StoreError::Backend(format!(
                "journal entry of run `{}` recorded under the lease of run `{}`",
                entry.run_id, lease.run_id
            )));
        }
        let output_len = entry
            .output
            .as_ref()
            .map_or(0, |o| serde_json::to_vec(o).map_or(0, |b| b.len()));
        let external = output_len > LARGE_OUTPUT_BYTES;
        let (inline, side) = if external {
            (None, entry.output.as_ref())
        } else {
            (entry.output.as_ref(), None)
        };
        let row = sqlx::query(sql::RECORD_ENTRY)
            .bind(&lease.run_id)
            .bind(to_i64(lease.epoch))
            .bind(to_i64(entry.version))
            .bind(i32::try_from(entry.seq).unwrap_or(i32::MAX))
            .bind(entry.kind.as_str())
            .bind(&entry.state)
            .bind(&entry.name)
            .bind(entry.tool_kind.map(|k| k.as_str()))
            .bind(&entry.input_hash)
            .bind(&entry.input)
            .bind(&entry.idempotency_key)
            .bind(entry.status.as_str())
            .bind(inline)
            .bind(external)
            .bind(entry.output.as_ref().map(summary))
            .bind(
                entry
                    .output
                    .as_ref()
                    .map(|_| i32::try_from(output_len).unwrap_or(i32::MAX)),
            )
            .bind(entry.error_class.as_ref().and_then(serde_name))
            .bind(&entry.error_code)
            .bind(&entry.error_message)
            .bind(i32::try_from(entry.attempts).unwrap_or(i32::MAX))
            .bind(to_i64(entry.duration_ms))
            .bind(entry.started_at)
            .bind(entry.finished_at)
            .bind(side)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        let written: i64 = row.try_get(0).map_err(|e| corrupt(&lease.run_id, e))?;
        if written > 0 {
            return Ok(());
        }
        match self.head_of(&lease.run_id).await? {
            None => Err(StoreError::NotFound(lease.run_id.clone())),
            Some(_) => Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            }),
        }
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
        if rows.is_empty() && self.head_of(run_id).await?.is_none() {
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
        let head = match self.heads.at(run_id, commit.expected_version) {
            Some(h) => h,
            None => {
                let row = sqlx::query(sql::LOAD_RUN)
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db_err)?
                    .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
                let (record, head) = row_to_run(&row)?;
                let stored = Some((record.version, record.epoch));
                if let Some(refused) = commit_refusal(lease, commit.expected_version, stored) {
                    return Err(refused);
                }
                head
            }
        };
        let version = commit.expected_version + 1;
        let (payload, patch_bytes) =
            history::encode(Some(&head.record.state), &commit.state, head.patch_bytes);
        let hash = transition_hash(&head.last_hash, &commit.link(lease));
        // The run row keeps the state of the latest snapshot only (see the migrations); a
        // snapshot's payload is that same state, bound once (`$6`).
        let (payload_kind, snapshot_state, patch) = match payload {
            VersionPayload::Snapshot(_) => ("snapshot", Some(&commit.state), None),
            VersionPayload::Patch(v) => ("patch", None, Some(v)),
        };
        let applied = match commit.consumed_signal {
            // Consuming a signal is rare and touches `signals` too: a statement of its own.
            Some(signal) => {
                let row = sqlx::query(sql::COMMIT_STEP_CONSUMING)
                    .bind(run_id)
                    .bind(to_i64(lease.epoch))
                    .bind(to_i64(commit.expected_version))
                    .bind(&commit.from_state)
                    .bind(&commit.to_state)
                    .bind(snapshot_state)
                    .bind(commit.status.as_str())
                    .bind(&commit.waiting_for)
                    .bind(commit.wake_at)
                    .bind(commit.error.as_ref().map(|e| e.code.as_str()))
                    .bind(commit.error.as_ref().map(|e| e.message.as_str()))
                    .bind(&hash)
                    .bind(to_i64(patch_bytes))
                    .bind(commit.kind.as_str())
                    .bind(payload_kind)
                    .bind(&patch)
                    .bind(signal)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db_err)?;
                row.map(|r| group_commit::applied(&r))
                    .transpose()
                    .map_err(|e| corrupt(run_id, e))?
            }
            None => {
                self.group
                    .commit(CommitRow {
                        run_id: run_id.to_owned(),
                        epoch: to_i64(lease.epoch),
                        expected: to_i64(commit.expected_version),
                        from_state: commit.from_state.clone(),
                        to_state: commit.to_state.clone(),
                        snapshot: snapshot_state.cloned(),
                        status: commit.status.as_str(),
                        waiting_for: commit.waiting_for.clone(),
                        wake_at: commit.wake_at,
                        error_code: commit.error.as_ref().map(|e| e.code.clone()),
                        error_message: commit.error.as_ref().map(|e| e.message.clone()),
                        hash: hash.clone(),
                        patch_bytes: to_i64(patch_bytes),
                        kind: commit.kind.as_str(),
                        payload_kind,
                        patch,
                    })
                    .await?
            }
        };
        if let Some(applied) = applied {
            // The statement returns only what it changed beyond the commit itself; the rest
            // of the record is the head this commit was based on.
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
            record.lease_owner = applied.lease_owner;
            record.lease_expires_at = applied.lease_expires_at;
            record.updated_at = applied.updated_at;
            self.heads.remember(RunHead {
                record: record.clone(),
                last_hash: hash,
                patch_bytes,
            });
            return Ok(record);
        }
        // Zero rows: tell the caller why, from the run's head.
        let stored = self.head_of(run_id).await?;
        Err(
            commit_refusal(lease, commit.expected_version, stored).unwrap_or_else(|| {
                StoreError::Backend(format!(
                    "signal {} is not pending for run `{run_id}`",
                    commit.consumed_signal.unwrap_or_default()
                ))
            }),
        )
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
        if rows.is_empty() && self.head_of(run_id).await?.is_none() {
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
        if at.is_none() && self.head_of(run_id).await?.is_none() {
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
        match self.insert_run(&new, Some((run_id, version))).await? {
            Some(r) => Ok(r),
            None => self.existing_same(&new, Some((run_id, version))).await,
        }
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        let rows = sqlx::query(sql::LIST_RUNS)
            .bind(&filter.agent)
            .bind(&statuses)
            .bind(filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| match self.run_from_row(r) {
                Err(StoreError::Corrupt { run_id, message }) => Ok(RunRecord::unreadable(
                    run_id,
                    r.try_get("agent").unwrap_or_default(),
                    message,
                )),
                other => other,
            })
            .collect()
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(sql::SEND_SIGNAL)
            .bind(run_id)
            .bind(name)
            .bind(payload)
            .bind(&self.channel)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        row.try_get("id").map_err(|e| corrupt(run_id, e))
    }

    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let rows = sqlx::query(sql::PENDING_SIGNALS)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        if rows.is_empty() && self.head_of(run_id).await?.is_none() {
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
                    payload: row.try_get("payload").map_err(c)?,
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
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => self.run_from_row(&row),
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
            .bind(&self.channel)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(row) => self.run_from_row(&row),
            None => match self.head_of(run_id).await? {
                None => Err(StoreError::NotFound(run_id.to_owned())),
                Some((_, epoch)) => Err(StoreError::LeaseLost {
                    run_id: run_id.to_owned(),
                    epoch,
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
            // The first kept version becomes a snapshot so every kept version replays.
            let Some(at) = self.replay_at(&id, cutoff).await? else {
                continue;
            };
            let mut tx = self.pool.begin().await.map_err(db_err)?;
            sqlx::query(sql::PRUNE_SNAPSHOT)
                .bind(&id)
                .bind(to_i64(cutoff))
                .bind(&at.state)
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
            let entries: i64 = sqlx::query(sql::PRUNE_JOURNAL)
                .bind(&id)
                .bind(to_i64(cutoff))
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?
                .try_get(0)
                .map_err(|e| corrupt(&id, e))?;
            tx.commit().await.map_err(db_err)?;
            report.versions_removed += removed;
            report.entries_removed += u64::try_from(entries).unwrap_or(0);
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
        let row = sqlx::query(sql::TOOL_ENABLED)
            .bind(tool)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map_or(Ok(true), |r| {
            r.try_get(0).map_err(|e| StoreError::Backend(e.to_string()))
        })
    }

    async fn tool_stats(&self, since: Millis) -> Result<Vec<ToolStats>, StoreError> {
        let rows = sqlx::query(sql::TOOL_STATS)
            .bind(since)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                let c = |e: sqlx::Error| StoreError::Backend(e.to_string());
                let kind: String = row.try_get("kind").map_err(c)?;
                let by_code: Option<Value> = row.try_get("by_code").map_err(c)?;
                let errors_by_code = match by_code {
                    Some(v) => {
                        serde_json::from_value(v).map_err(|e| StoreError::Backend(e.to_string()))?
                    }
                    None => std::collections::BTreeMap::new(),
                };
                Ok(ToolStats {
                    tool: row.try_get("name").map_err(c)?,
                    kind: EntryKind::parse(&kind),
                    calls: to_u64(row.try_get("calls")).map_err(c)?,
                    failures: to_u64(row.try_get("failures")).map_err(c)?,
                    avg_ms: row.try_get("avg_ms").map_err(c)?,
                    p50_ms: to_u64(row.try_get("p50_ms")).map_err(c)?,
                    p99_ms: to_u64(row.try_get("p99_ms")).map_err(c)?,
                    errors_by_code,
                })
            })
            .collect()
    }

    async fn wait_for_work(&self, timeout: Duration) {
        self.ensure_listener();
        let _ = tokio::time::timeout(timeout, self.work.notified()).await;
    }

    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let row = sqlx::query(sql::STORAGE_BYTES)
            .bind(run_id)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        let bytes: i64 = row.try_get(0).map_err(|e| corrupt(run_id, e))?;
        Ok(Some(u64::try_from(bytes).unwrap_or(0)))
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
