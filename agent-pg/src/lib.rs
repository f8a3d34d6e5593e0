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
//! use durable_agents::backend::NewRun;
//! use durable_agents::store::Store;
//! use durable_agents::postgres::PgStore;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Connect into a schema of its own (created by `migrate`), then apply the migrations.
//! let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/postgres", "agents").await?;
//! store.migrate().await?;
//! let store: Arc<dyn Store> = Arc::new(store);
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
//! ## Opening: workers migrate, tools check
//!
//! A worker opens with [`PgStore::connect`] and [`PgStore::migrate`], which creates the
//! schema and applies the embedded migrations in one transaction, so that a start that
//! fails leaves nothing behind (concurrent workers serialize on an advisory lock). A tool
//! that reads or operates an existing store (`agentctl`) opens with
//! [`PgStore::open_existing`], which writes nothing: [`PgStore::check_schema`] refuses a
//! missing schema ([`PgSetupError::NoSchema`], listing the schemas that hold a store), a
//! schema without the store's tables ([`PgSetupError::NotAStore`]), and a store behind or
//! ahead of this binary's migrations ([`PgSetupError::Level`]). Every message names the
//! database as `host:port/dbname`, never with the password.
//!
//! The first connection is opened before anything else and its failure reported as it
//! is, at once: [`PgSetupError::Refused`] ("connection refused at HOST:PORT") when nothing
//! listens, [`PgSetupError::Auth`] for a refused user or password, the server's message
//! (with its detail and hint, without PostgreSQL's source position) otherwise. Retrying
//! is kept where the server is expected to come back: once open, the pool retries refused
//! connections for up to 10 s before a query fails with [`StoreError::Unavailable`], and
//! the `LISTEN` task reconnects every second.
//!
//! A backup of a store is `pg_dump --schema=SCHEMA` (and `pg_restore`).
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
//! [`RunStore::commit_step`] is a single statement (possibly shared with other runs' commits,
//! see below): the update of the run row carries
//! `WHERE version = $expected AND epoch = $epoch`, and the transition insert and the signal
//! update hang off its `RETURNING`, so a stale writer writes nothing. When the connection
//! drops, the error is [`StoreError::Unavailable`] and the commit may or may not have
//! happened. Resolve it by re-reading, never by committing blindly again: call
//! [`HistoryStore::load_run`]; if `version == expected + 1` and `epoch` is the lease's epoch and the
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
//! Commits that consume a signal are grouped like the others, and so are journal entries
//! and signals sent ([`RunStore::send_signal`]): many senders at once cost a few statements
//! on the store's own connections, not one pooled connection each.
//!
//! Commit statements run on connections of the store's own, outside the pool: one per
//! slot at most, opened when first needed (the first is the connection the store opened
//! to check the server) and kept. A worker's claims and their reads, and the wake-up
//! notification after a signal, use the same connections, and a claim of more than one
//! run opens them ahead (one per slot and one for claims), so that the commits it brings
//! do not each wait for a connection to open. Through the pool, sqlx pings a connection when it is
//! given back; it also pinged it when handing it out, which the store turns off for its
//! pool (a pooled connection idle for two seconds is pinged, as below). A kept
//! connection idle for over two seconds is pinged before use; one whose statement failed
//! for any reason but the server's refusal is dropped and replaced; all of them are dropped, and commits refused as
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
//! Behind a connection pooler such as PgBouncer, say which in the URL: `pooler=session`,
//! or `pooler=transaction` with `direct=HOST:PORT` (PostgreSQL's own address, for
//! `LISTEN`) or `wake=poll` (see [`Pooler`] and `docs/poolers.md`). Through a transaction
//! pooler every statement runs in a transaction of its own that sets the schema, and a
//! store told to `LISTEN` there without a direct address refuses to open
//! ([`PgSetupError::ListenThroughPooler`]).
//!
//! Besides its pool, a store opens up to [`COMMITS_IN_FLIGHT`] connections of its own for
//! commit statements, and up to two more for a worker's claims and the wake-ups after
//! signals (see "Group commit"); count them when sizing the server's `max_connections`.
//!
//! [`Store`]: agent_core::store::Store
//! [`RunStore::commit_step`]: agent_core::store::RunStore::commit_step
//! [`HistoryStore::load_run`]: agent_core::store::HistoryStore::load_run
//! [`RunStore::send_signal`]: agent_core::store::RunStore::send_signal
//! [`StepCommit`]: agent_core::store::StepCommit
//! [`StoreError::Unavailable`]: agent_core::store::StoreError::Unavailable
#![warn(missing_docs)]

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::store::{Lease, Millis, NewRun, RunRecord, StoreError};
use agent_sql::dialect::{Listing, SqlDialect, WorkerWake, created_before};
use agent_sql::heads::HeadCache;
use agent_sql::reads::{Arg, SqlReads, bind, fenced_out, fetch_all};
use agent_sql::rows;
use agent_sql::write::{CommitRow, EntryRow, Outcome, SignalRow};
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgRow};
use tokio::sync::Notify;

mod connect;
mod error;
mod events;
mod group_commit;
mod limit_sql;
mod operator;
mod pooler;
mod schedule_sql;
mod sql;
mod store;
#[cfg(test)]
mod test_database;
mod wake;

/// The statements the workloads bench sends bare, to measure what the runner adds to them;
/// not part of the API.
#[doc(hidden)]
pub mod __bench {
    /// A run's creation, claimed (`PgStore::create_run_claimed`).
    pub const INSERT_RUN: &str = crate::sql::INSERT_RUN;

    /// A step's commit on its own (the group commit's statement when a slot is free).
    #[must_use]
    pub fn commit_step() -> &'static str {
        crate::sql::COMMIT_STEP.as_str()
    }
}

pub use agent_sql::LARGE_OUTPUT_BYTES;
pub use connect::PgSetupError;
pub use group_commit::GroupCommitStats;
pub use pooler::Pooler;

/// Default of [`PgStore::with_group_commit`]: commit statements in flight at once.
pub const COMMITS_IN_FLIGHT: usize = 4;

/// How many connections the reads of event followers share ([`EventLog::events`]).
///
/// [`EventLog::events`]: agent_core::store::EventLog::events
pub const EVENT_READERS: u32 = 2;

/// Default of [`PgStore::with_group_commit`]: commits in one grouped statement at most.
pub const COMMITS_PER_STATEMENT: usize = 64;

/// A [`Store`] on PostgreSQL. Cheap to clone the pool inside; share the store with `Arc`.
///
/// [`Store`]: agent_core::store::Store
#[derive(Debug)]
pub struct PgStore {
    /// Every statement of the store goes through it (as it is, or in a transaction of its
    /// own behind a transaction pooler, `pooler.rs`).
    pool: pooler::Db,
    /// Connections of event followers' reads, apart from `pool` and few
    /// ([`EVENT_READERS`]): however many follow, their reads never take a connection a
    /// commit waits for, and load the server at most this many at a time.
    readers: pooler::Db,
    schema: String,
    channel: String,
    heads: HeadCache,
    work: Arc<Notify>,
    /// Notifications received on `channel` (counted by the listener), and their count when
    /// the last claim began or the last wait for work ended: a notification that arrives
    /// while a claim runs is not lost to the wait after it.
    notices: Arc<AtomicU64>,
    notices_seen: AtomicU64,
    /// Wake-ups of idle workers sent after a write, coalesced (`wake.rs`).
    waker: wake::WorkWaker,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Wake-ups of event followers (`events.rs`).
    events: events::EventNotices,
    group: Arc<group_commit::GroupCommit>,
    /// How the pool connects; the group commit opens its connections the same way.
    options: PgConnectOptions,
    /// The pooler in front of PostgreSQL, if any (`pooler=` in the URL).
    pooler: Pooler,
    /// `LISTEN` (on which connections) or polling.
    wakeups: pooler::Wakeups,
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

impl PgStore {
    /// After a write to `run_id` that gives events: wake their followers, if any.
    fn event_written(&self, run_id: &str) {
        match &self.wakeups {
            pooler::Wakeups::Listen(_) => self.events.written(&self.pool, run_id),
            pooler::Wakeups::Poll(_) => self.events.written_here(run_id),
        }
    }

    /// Read a run row, remembering its head for the next commit.
    fn run_from_row(&self, row: &PgRow) -> Result<RunRecord, StoreError> {
        Ok(self.heads.remembered(rows::stored_run(row)?.head))
    }

    /// Insert a run (and its version 0) unless one with its id exists: `None` then.
    /// Insert `new` (claimed by `claim`'s worker for its time to live, if given); `None`
    /// when a run of this id exists.
    async fn insert_run(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
        claim: Option<(&str, Duration)>,
    ) -> Result<Option<RunRecord>, StoreError> {
        let hash = agent_core::store::transition_hash("", &new.link());
        let row = sqlx::query(sql::INSERT_RUN)
            .bind(&new.id)
            .bind(&new.agent)
            .bind(&new.fingerprint)
            .bind(&new.state_name)
            .bind(&new.state)
            .bind(agent_core::store::creation_hash(new))
            .bind(&hash)
            .bind(parent.map(|p| p.0))
            .bind(parent.map(|p| agent_sql::to_i64(p.1)))
            .bind(&self.channel)
            .bind(sqlx::types::Json(&new.labels))
            .bind(new.spawned_by.as_ref().map(|p| p.run_id.as_str()))
            .bind(
                new.spawned_by
                    .as_ref()
                    .map(|p| agent_sql::to_i64(p.version)),
            )
            .bind(i32::try_from(new.agent_version).unwrap_or(i32::MAX))
            .bind(claim.map(|c| c.0))
            .bind(claim.map(|c| agent_sql::ms(c.1)))
            .bind(new.budget.map(sqlx::types::Json))
            .fetch_optional(&self.pool)
            .await
            .map_err(error::db_err)?;
        row.map(|r| self.run_from_row(&r)).transpose()
    }

    /// Create `new` (forked from `parent`), or return the run of the same id when it was
    /// created from the same request.
    async fn create(
        &self,
        new: &NewRun,
        parent: Option<(&str, u64)>,
    ) -> Result<RunRecord, StoreError> {
        agent_core::store::validate_labels(&new.labels)?;
        if let Some(created) = self.insert_run(new, parent, None).await? {
            self.event_written(&created.id);
            return Ok(created);
        }
        let row = sqlx::query(sql::LOAD_RUN)
            .bind(&new.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(error::db_err)?
            .ok_or_else(|| StoreError::backend(format!("run `{}` vanished", new.id)))?;
        let stored = rows::stored_run(&row)?;
        let record = self.heads.remembered(stored.head);
        created_before(record, &stored.creation_hash, new, parent)
    }
}

#[async_trait]
impl SqlReads for PgStore {
    type Row = PgRow;

    agent_sql::statements!(SqlReads, sql);

    async fn fetch(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<Vec<PgRow>, StoreError> {
        fetch_all(&self.pool, sql, args)
            .await
            .map_err(error::db_err)
    }

    async fn fetch_events(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<PgRow>, StoreError> {
        fetch_all(&self.readers, sql, args)
            .await
            .map_err(error::db_err)
    }

    async fn insert_fork(
        &self,
        new: &NewRun,
        parent: (&str, u64),
    ) -> Result<RunRecord, StoreError> {
        self.create(new, Some(parent)).await
    }
}

#[async_trait]
impl SqlDialect for PgStore {
    agent_sql::statements!(SqlDialect, sql);
    const NO_LIMIT: Option<i64> = None;
    /// A run read is often a run this process writes next (its workers share runs).
    const REMEMBERS_READS: bool = true;

    /// None: every statement reads the server's clock, which judges leases for all workers.
    fn clock(&self) -> Option<Millis> {
        None
    }

    fn channel(&self) -> Option<&str> {
        Some(&self.channel)
    }

    /// The time to live: the statement adds the server's clock.
    fn lease_until(&self, ttl: Duration) -> Millis {
        agent_sql::ms(ttl)
    }

    /// One statement, which records the change itself.
    async fn write_status(
        &self,
        _run_id: &str,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<PgRow>, StoreError> {
        bind(sqlx::query(sql), args)
            .fetch_optional(&self.pool)
            .await
            .map_err(error::db_err)
    }

    /// On the pool: the pool serves reads beside the writes' own connections.
    async fn fetch_listing(&self, listing: Listing<'_>) -> Result<Vec<PgRow>, StoreError> {
        let query = store::filtered(listing.sql, listing.filter, listing.limit, listing.tail);
        query.fetch_all(&self.pool).await.map_err(error::db_err)
    }

    fn head_cache(&self) -> &HeadCache {
        &self.heads
    }

    /// The commit's own statement when a slot is free and nobody waits, else one statement
    /// with the other runs' commits that arrived meanwhile, their entries written in one
    /// statement before them (the commit sent only if they all were).
    async fn commit_row(&self, row: CommitRow) -> Outcome {
        self.group.commit(row).await
    }

    /// An entry whose output goes to the side table is recorded first, on its own.
    async fn carried(
        &self,
        lease: &Lease,
        rows: Vec<EntryRow>,
    ) -> Result<Vec<EntryRow>, StoreError> {
        let mut carried = Vec::with_capacity(rows.len());
        for row in rows {
            if row.external {
                self.record_row(lease, row).await?;
            } else {
                carried.push(row);
            }
        }
        Ok(carried)
    }

    /// Through the group commit (its own statement when a slot is free, else one statement
    /// with the other runs' entries that arrived meanwhile). An output too large to keep
    /// inline goes to the side table, in a statement of its own through the pool.
    async fn record_row(&self, lease: &Lease, row: EntryRow) -> Result<(), StoreError> {
        let written = if row.external {
            let returned = group_commit::record_entry(&row).fetch_one(&self.pool).await;
            group_commit::entry_written(&row, returned)?
        } else {
            self.group.record(row).await?
        };
        if !written {
            return Err(fenced_out(self, lease).await?);
        }
        self.event_written(&lease.run_id);
        Ok(())
    }

    async fn insert_signal(&self, row: SignalRow) -> Result<Option<i64>, StoreError> {
        self.group.signal(row).await
    }

    fn wake_followers(&self, run_id: &str) {
        self.event_written(run_id);
    }

    fn wake_workers(&self, wake: WorkerWake) {
        match wake {
            WorkerWake::InStatement => {}
            WorkerWake::Separate => self.waker.wake(&self.pool, &self.channel),
        }
    }

    /// Commits do not notify otherwise (the worker holding a run steps it on); nothing is
    /// written to the parent.
    async fn wake_parent(&self, child: &RunRecord) {
        let Some(parent) = &child.spawned_by else {
            return;
        };
        let _ = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(&parent.run_id)
            .execute(&self.pool)
            .await;
    }
}
