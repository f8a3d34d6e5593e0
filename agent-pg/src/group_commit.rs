//! Group commit: step commits, journal entries and signals of different runs that arrive
//! while the store already has as many commit statements in flight as it allows go to the
//! database together, as one statement for the commits ([`sql::COMMIT_STEPS`]), one for
//! the entries ([`sql::RECORD_ENTRIES`]) and one for the signals ([`sql::SEND_SIGNALS`]).
//!
//! Why: with many runs stepping at once, a worker and its database spend most of their
//! CPU on what every statement costs whatever it writes (a round trip, parse and bind,
//! executor start, a transaction and its WAL flush), not on the rows. One statement for
//! thirty commits pays that once.
//!
//! How, and what it keeps:
//! - **No waiting when there is room.** A commit that finds fewer than
//!   [`COMMITS_IN_FLIGHT`](crate::COMMITS_IN_FLIGHT) commit statements in flight and
//!   nobody queued runs its own statement at once, in its caller's task: one run stepping
//!   alone pays nothing for the grouping. Otherwise it queues, and the statement in flight
//!   that finishes first takes everything queued (up to
//!   [`COMMITS_PER_STATEMENT`](crate::COMMITS_PER_STATEMENT)) as its next statement. The
//!   queue is the one both stores share ([`agent_sql::write_queue`], a slot per statement
//!   in flight); this module sends its batches.
//! - **Each commit keeps its own fence.** Every row of the grouped statement carries its
//!   own compare-and-set on version and epoch; a row that fails it writes nothing, and its
//!   caller learns why exactly as after a commit of its own. A journal entry is fenced by
//!   its lease's epoch the same way. A run appears at most once in a batch; a second
//!   write of the same run waits for the next one.
//! - **A commit may carry its step's entries** (`RunStore::commit_step`). They
//!   are written first, those of all the batch's commits in one statement, and a commit
//!   is sent only if all of its entries were (else it is answered as refused, and its
//!   caller finds out why).
//! - **Durable before the answer.** A caller hears of its commit or entry only once the
//!   statement that carried it is committed (`RunStore::record_entry`'s contract: an entry
//!   is durable when the call returns).
//! - **One bad row does not fail the others.** When the server rejects a grouped statement
//!   (nothing of it was written), its commits are sent again one statement each, so each
//!   gets its own answer. When the connection fails instead, the outcome is unknown for
//!   all of them, and each caller gets [`StoreError::Unavailable`], the same answer as a
//!   commit of its own whose acknowledgement was lost, resolved the same way (re-read).
//! - **Cancelled callers.** A queued commit whose caller stopped waiting is dropped
//!   unsent. The statements run in tasks of their own, so a caller that stops waiting
//!   does not cancel the others' commits.
//!
//! Commit statements run on connections of their own, outside the pool, one per slot at
//! most ([`HeldConnections`]): sqlx pings a pooled connection when it is handed out and
//! again when it is given back, which would make each commit three round trips instead
//! of one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_core::store::StoreError;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::types::Json;
use sqlx::{Connection, Postgres, Row};

use agent_sql::rows::{Applied, SqlRow};
use agent_sql::write::{
    CommitRow, EntryRow, Outcome, SignalRow, Write, Written, one_write_per_run,
};
use agent_sql::write_queue::{BatchWriter, same_error};

use crate::error::db_err;
use crate::pooler::{Connector, Db};
use crate::sql;

/// How many commits went to the database in how many statements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Commit statements sent (single and grouped), journal entries' included.
    pub statements: u64,
    /// Commits, journal entries and signals they carried.
    pub commits: u64,
    /// Grouped statements the server rejected, whose commits were then sent one by one.
    pub regrouped: u64,
    /// Commits that waited in the queue (the others found a free slot).
    pub waited: u64,
    /// Commits waiting for a statement now.
    pub queued: usize,
}

type Queued = agent_sql::write_queue::Queued<Writer>;

/// A commit connection idle longer than this is pinged before its next statement (the
/// server may have restarted or dropped it meanwhile); one in use more often is not.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(2);

/// A commit connection is closed and replaced after this long, as the pool does with its
/// own (`max_lifetime`), so that the server side does not grow without end.
const MAX_CONNECTION_AGE: Duration = Duration::from_mins(30);

/// Connections kept outside the pool, for statements that must not queue behind it: commit
/// statements (at most one connection per commit slot), a worker's claims and their reads
/// (one), and wake-up notifications (`wake.rs`, one). Opened when first needed or ahead of
/// a worker's claim, kept between statements. A connection whose statement failed other
/// than by the server's refusal is dropped, not reused; so is every one of them once the
/// pool is closed (the store is shutting down).
pub(crate) struct HeldConnections {
    connector: Connector,
    /// The idle ones: the connection, when it was opened, when it was last used.
    idle: Mutex<Vec<(PgConnection, Instant, Instant)>>,
    /// Connections open, idle or lent out, counting those being opened ahead.
    live: AtomicUsize,
}

impl HeldConnections {
    pub(crate) fn new(connector: Connector) -> Self {
        Self {
            connector,
            idle: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
        }
    }

    /// Open connections in the background until `want` are open: a worker about to claim
    /// many runs will commit many at once, and each connection opened only when its first
    /// statement comes adds a connection's set-up to that statement (W3 in
    /// `BENCHMARKS.md`). Nothing is opened when `want` are open already.
    pub(crate) fn open_ahead(self: &Arc<Self>, pool: &PgPool, want: usize) {
        loop {
            let live = self.live.load(Ordering::Relaxed);
            if live >= want || pool.is_closed() {
                return;
            }
            if self
                .live
                .compare_exchange(live, live + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let this = Arc::clone(self);
            tokio::spawn(async move {
                match this.connector.connect().await {
                    Ok(conn) => this.keep(conn, Instant::now()),
                    // Best effort: the statement that needs it opens one itself.
                    Err(_) => {
                        this.live.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }

    /// An idle connection that is still good, or a new one.
    pub(crate) async fn take(&self, pool: &PgPool) -> Result<(PgConnection, Instant), sqlx::Error> {
        if pool.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            self.live.fetch_sub(idle.len(), Ordering::Relaxed);
            idle.clear();
            return Err(sqlx::Error::PoolClosed);
        }
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some((mut conn, opened, used)) = kept {
            if opened.elapsed() < MAX_CONNECTION_AGE
                && (used.elapsed() < CHECK_AFTER_IDLE || conn.ping().await.is_ok())
            {
                return Ok((conn, opened));
            }
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        let conn = self.connector.connect().await?;
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok((conn, Instant::now()))
    }

    /// Keep `conn`, opened for something else (the store's first connection), as an idle
    /// held connection: the first commit or wake-up then does not open one.
    pub(crate) fn adopt(&self, conn: PgConnection) {
        self.live.fetch_add(1, Ordering::Relaxed);
        self.keep(conn, Instant::now());
    }

    /// Keep `conn` for the next statement, unless `outcome` says it may be broken.
    pub(crate) fn give_back<T>(
        &self,
        conn: PgConnection,
        opened: Instant,
        outcome: &Result<T, sqlx::Error>,
    ) {
        if matches!(outcome, Ok(_) | Err(sqlx::Error::Database(_))) {
            self.keep(conn, opened);
        } else {
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn keep(&self, conn: PgConnection, opened: Instant) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((conn, opened, Instant::now()));
    }
}

/// The group commit of one store: the shared queue, over this store's commit statements.
pub(crate) type GroupCommit = agent_sql::write::GroupCommit<Writer>;

/// What sends a batch: grouped statements on the store's held connections.
pub(crate) struct Writer {
    pool: Db,
    connections: Arc<HeldConnections>,
    statements: AtomicU64,
    commits: AtomicU64,
    regrouped: AtomicU64,
}

/// `max_in_flight` commit statements at once at most (the queue's slots), each of at most
/// `max_batch` commits, on `connections`.
pub(crate) fn group_commit(
    pool: Db,
    connections: Arc<HeldConnections>,
    max_in_flight: usize,
    max_batch: usize,
) -> GroupCommit {
    let writer = Writer {
        pool,
        connections,
        statements: AtomicU64::new(0),
        commits: AtomicU64::new(0),
        regrouped: AtomicU64::new(0),
    };
    GroupCommit::new(writer, max_in_flight, max_batch)
}

/// What this store's group commit has besides the shared one's writes.
pub(crate) trait PgGroupCommit {
    /// Its figures.
    fn stats(&self) -> GroupCommitStats;
    /// The held connections its statements go on, which it shares with the store's
    /// claims and wake-ups.
    fn connections(&self) -> Arc<HeldConnections>;
    /// Have a connection open for each commit slot and one for the claims, ahead of the
    /// commits a worker's claim is about to bring.
    fn open_ahead(&self);
}

impl PgGroupCommit for GroupCommit {
    fn stats(&self) -> GroupCommitStats {
        let queue = self.queue();
        let writer = queue.writer();
        GroupCommitStats {
            statements: writer.statements.load(Ordering::Relaxed),
            commits: writer.commits.load(Ordering::Relaxed),
            regrouped: writer.regrouped.load(Ordering::Relaxed),
            waited: queue.waited(),
            queued: queue.queued(),
        }
    }

    fn connections(&self) -> Arc<HeldConnections> {
        Arc::clone(&self.queue().writer().connections)
    }

    fn open_ahead(&self) {
        let queue = self.queue();
        let writer = queue.writer();
        writer
            .connections
            .open_ahead(writer.pool.raw(), queue.slots() + 1);
    }
}

impl BatchWriter for Writer {
    type Write = Write;
    type Written = Written;

    async fn one(&self, write: &Write) -> Result<Written, StoreError> {
        self.alone(write).await
    }

    async fn many(&self, batch: Vec<Queued>) {
        self.send(batch).await;
    }

    /// Up to `max` queued writes, oldest first, one per run: a grouped statement writes
    /// each run once.
    fn take_batch(&self, waiting: &mut VecDeque<Queued>, max: usize) -> Vec<Queued> {
        one_write_per_run(waiting, max)
    }
}

impl Writer {
    /// A held connection for a statement, which runs on it through `self.pool.on`.
    async fn held(&self) -> Result<(PgConnection, Instant), sqlx::Error> {
        self.connections.take(self.pool.raw()).await
    }

    /// One statement of `writes` writes of kind `write` (`commit`, `entry`, `signal`) is
    /// sent: counted in the store's stats and in the metrics.
    fn sent(&self, write: &'static str, writes: usize) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.commits.fetch_add(writes as u64, Ordering::Relaxed);
        agent_core::metrics::store_writes("postgres", write, writes);
    }

    /// Send a batch: its journal entries in one statement, its signals in another, then
    /// the entries its commits carry, then its commits (a run has at most one write in a
    /// batch, so the order between runs does not matter).
    async fn send(&self, batch: Vec<Queued>) {
        let (mut entries, mut signals, mut commits) = (Vec::new(), Vec::new(), Vec::new());
        for q in batch {
            match q.write {
                Write::Entry(_) => entries.push(q),
                Write::Signal(_) => signals.push(q),
                Write::Commit(_) => commits.push(q),
            }
        }
        self.send_part(entries).await;
        self.send_part(signals).await;
        let (ready, alone) = self.send_carried(commits).await;
        self.send_part(ready).await;
        for q in alone {
            let outcome = self.alone(&q.write).await;
            q.answer(outcome);
        }
    }

    /// Write the entries the commits of a batch carry, in one statement. Returns the
    /// commits to send together (their entries written, and taken off them) and those to
    /// send one by one (the server refused the statement: each goes again alone, entries
    /// first). A commit whose entries were not all written is answered as refused (its
    /// epoch is not the run's), and so is every commit when the connection failed.
    async fn send_carried(&self, mut commits: Vec<Queued>) -> (Vec<Queued>, Vec<Queued>) {
        let carried = |q: &Queued| match &q.write {
            Write::Commit(row) => row.entries.len(),
            Write::Entry(_) | Write::Signal(_) => 0,
        };
        if commits.iter().all(|q| carried(q) == 0) {
            return (commits, Vec::new());
        }
        let rows: Vec<&EntryRow> = commits
            .iter()
            .flat_map(|q| match &q.write {
                Write::Commit(row) => row.entries.iter(),
                Write::Entry(_) | Write::Signal(_) => [].iter(),
            })
            .collect();
        let written = match self.entry_rows(&rows).await {
            Ok(written) => written,
            Err(sqlx::Error::Database(e)) => {
                tracing::debug!(error = %e, "grouped entries of commits refused; sending each commit alone");
                self.regrouped.fetch_add(1, Ordering::Relaxed);
                return (Vec::new(), commits);
            }
            Err(e) => {
                let error = db_err(e);
                for q in commits {
                    q.answer(Err(same_error(&error)));
                }
                return (Vec::new(), Vec::new());
            }
        };
        let mut ready = Vec::with_capacity(commits.len());
        let mut at = 0;
        for mut q in commits.drain(..) {
            let n = carried(&q);
            let all = written[at..at + n].iter().all(|w| *w);
            at += n;
            if !all {
                q.answer(Ok(Written::Commit(None)));
                continue;
            }
            if let Write::Commit(row) = &mut q.write {
                row.entries = Vec::new();
            }
            ready.push(q);
        }
        (ready, Vec::new())
    }

    /// Send writes of one kind: one statement for all of them.
    async fn send_part(&self, batch: Vec<Queued>) {
        if batch.len() <= 1 {
            for q in batch {
                let outcome = self.alone(&q.write).await;
                q.answer(outcome);
            }
            return;
        }
        let grouped = match batch[0].write {
            Write::Entry(_) => self.many_entries(&batch).await,
            Write::Signal(_) => self.many_signals(&batch).await,
            Write::Commit(_) => self.many(&batch).await,
        };
        match grouped {
            Ok(mut done) => {
                for (q, outcome) in batch.into_iter().zip(done.drain(..)) {
                    q.answer(Ok(outcome));
                }
            }
            // The server refused the statement: nothing of it was written. One row's
            // problem must not be every row's answer, so each goes again alone.
            Err(sqlx::Error::Database(e)) => {
                tracing::debug!(error = %e, writes = batch.len(),
                    "grouped statement refused; sending its writes one by one");
                self.regrouped.fetch_add(1, Ordering::Relaxed);
                for q in batch {
                    let outcome = self.alone(&q.write).await;
                    q.answer(outcome);
                }
            }
            // The connection failed, or the answer did not read: the statement may or may
            // not have been applied, so each caller resolves it by re-reading.
            Err(e) => {
                let error = db_err(e);
                for q in batch {
                    q.answer(Err(same_error(&error)));
                }
            }
        }
    }

    /// One write, one statement (a commit that carries entries: theirs first, and the
    /// commit only if they were all written).
    async fn alone(&self, write: &Write) -> Result<Written, StoreError> {
        match write {
            Write::Commit(row) => {
                let carried = match row.entries.as_slice() {
                    [] => true,
                    [entry] => self.one_entry(entry).await?,
                    entries => {
                        let rows: Vec<&EntryRow> = entries.iter().collect();
                        let written = self.entry_rows(&rows).await.map_err(db_err)?;
                        written.iter().all(|w| *w)
                    }
                };
                if !carried {
                    return Ok(Written::Commit(None));
                }
                self.one_commit(row).await.map(Written::Commit)
            }
            Write::Entry(row) => self.one_entry(row).await.map(Written::Entry),
            Write::Signal(row) => self.one_signal(row).await.map(Written::Signal),
        }
    }

    /// One signal, one statement ([`sql::SEND_SIGNAL`]); its id, `None` if the run does
    /// not exist.
    async fn one_signal(&self, row: &SignalRow) -> Result<Option<i64>, StoreError> {
        self.sent("signal", 1);
        let query = sqlx::query(sql::SEND_SIGNAL)
            .bind(&row.run_id)
            .bind(&row.name)
            .bind(&row.payload);
        let (mut conn, opened) = self.held().await.map_err(db_err)?;
        let returned = query.fetch_optional(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        returned
            .map_err(db_err)?
            .map(|r| r.try_get("id"))
            .transpose()
            .map_err(|e| agent_sql::corrupt(&row.run_id, e))
    }

    /// Several signals of queued writes, one statement ([`sql::SEND_SIGNALS`]); each
    /// one's id, in order (`None`: its run does not exist).
    async fn many_signals(&self, batch: &[Queued]) -> Result<Vec<Written>, sqlx::Error> {
        self.sent("signal", batch.len());
        let rows = || {
            batch.iter().filter_map(|q| match &q.write {
                Write::Signal(row) => Some(row),
                _ => None,
            })
        };
        let query = sqlx::query::<Postgres>(sql::SEND_SIGNALS)
            .bind(rows().map(|r| r.run_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.name.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| Json(&*r.payload)).collect::<Vec<_>>());
        let (mut conn, opened) = self.held().await?;
        let returned = query.fetch_all(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        let mut ids: Vec<Option<i64>> = vec![None; batch.len()];
        for r in &returned? {
            *row_of(&mut ids, r, "signals")? = Some(r.try_get("id")?);
        }
        Ok(ids.into_iter().map(Written::Signal).collect())
    }

    /// One journal entry, one statement ([`sql::RECORD_ENTRY`]).
    async fn one_entry(&self, row: &EntryRow) -> Result<bool, StoreError> {
        self.sent("entry", 1);
        let (mut conn, opened) = self.held().await.map_err(db_err)?;
        let returned = record_entry(row).fetch_one(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        entry_written(row, returned)
    }

    /// Several journal entries of queued writes, one statement; whether each one was
    /// written, in order.
    async fn many_entries(&self, batch: &[Queued]) -> Result<Vec<Written>, sqlx::Error> {
        let rows: Vec<&EntryRow> = batch
            .iter()
            .filter_map(|q| match &q.write {
                Write::Entry(row) => Some(row),
                _ => None,
            })
            .collect();
        let written = self.entry_rows(&rows).await?;
        Ok(written.into_iter().map(Written::Entry).collect())
    }

    /// Several journal entries, one statement ([`sql::RECORD_ENTRIES`]); whether each one
    /// was written, in order.
    async fn entry_rows(&self, batch: &[&EntryRow]) -> Result<Vec<bool>, sqlx::Error> {
        self.sent("entry", batch.len());
        let rows = || batch.iter().copied();
        let query = sqlx::query::<Postgres>(sql::RECORD_ENTRIES)
            .bind(rows().map(|r| r.run_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.epoch).collect::<Vec<_>>())
            .bind(rows().map(|r| r.version).collect::<Vec<_>>())
            .bind(rows().map(|r| r.seq).collect::<Vec<_>>())
            .bind(rows().map(|r| r.kind).collect::<Vec<_>>())
            .bind(rows().map(|r| r.state.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.name.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.tool_kind).collect::<Vec<_>>())
            .bind(rows().map(|r| r.input_hash.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| Json(&*r.input)).collect::<Vec<_>>())
            .bind(
                rows()
                    .map(|r| r.idempotency_key.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(rows().map(|r| r.status).collect::<Vec<_>>())
            .bind(
                rows()
                    .map(|r| r.inline_output().map(Json))
                    .collect::<Vec<_>>(),
            )
            .bind(
                rows()
                    .map(|r| r.output_summary.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(rows().map(|r| r.output_bytes).collect::<Vec<_>>())
            .bind(rows().map(|r| r.error_class.as_deref()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.error_code.as_deref()).collect::<Vec<_>>())
            .bind(
                rows()
                    .map(|r| r.error_message.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(rows().map(|r| r.attempts).collect::<Vec<_>>())
            .bind(rows().map(|r| r.duration_ms).collect::<Vec<_>>())
            .bind(rows().map(|r| r.started_at).collect::<Vec<_>>())
            .bind(rows().map(|r| r.finished_at).collect::<Vec<_>>());
        let (mut conn, opened) = self.held().await?;
        let returned = query.fetch_all(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        let mut written = vec![false; batch.len()];
        for r in &returned? {
            *row_of(&mut written, r, "entries")? = true;
        }
        Ok(written)
    }

    /// One commit, one statement ([`sql::COMMIT_STEP`], or [`sql::COMMIT_STEP_CONSUMING`]
    /// for a step that consumes a signal).
    async fn one_commit(&self, row: &CommitRow) -> Outcome {
        self.sent("commit", 1);
        let statement = if row.signal.is_some() {
            sql::COMMIT_STEP_CONSUMING.as_str()
        } else {
            sql::COMMIT_STEP.as_str()
        };
        let mut query = sqlx::query(statement)
            .bind(&row.run_id)
            .bind(row.epoch)
            .bind(row.expected)
            .bind(&row.from_state)
            .bind(&row.to_state)
            .bind(row.snapshot())
            .bind(row.status)
            .bind(&row.waiting_for)
            .bind(row.wake_at)
            .bind(&row.error_code)
            .bind(&row.error_message)
            .bind(&row.hash)
            .bind(row.patch_bytes)
            .bind(row.kind)
            .bind(row.payload_kind)
            .bind(row.patch())
            .bind(row.spend.map(Json));
        if let Some(signal) = row.signal {
            query = query.bind(signal);
        }
        let (mut conn, opened) = self.held().await.map_err(db_err)?;
        let returned = query.fetch_optional(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        returned
            .map_err(db_err)?
            .map(|r| r.applied_row())
            .transpose()
            .map_err(|e| agent_sql::corrupt(&row.run_id, e))
    }

    /// Several commits, one statement ([`sql::COMMIT_STEPS`]); what each one did, in order.
    async fn many(&self, batch: &[Queued]) -> Result<Vec<Written>, sqlx::Error> {
        self.sent("commit", batch.len());
        let rows = || {
            batch.iter().filter_map(|q| match &q.write {
                Write::Commit(row) => Some(row),
                _ => None,
            })
        };
        let query = sqlx::query::<Postgres>(sql::COMMIT_STEPS.as_str())
            .bind(rows().map(|r| r.run_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.epoch).collect::<Vec<_>>())
            .bind(rows().map(|r| r.expected).collect::<Vec<_>>())
            .bind(rows().map(|r| r.from_state.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.to_state.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.snapshot().map(Json)).collect::<Vec<_>>())
            .bind(rows().map(|r| r.status).collect::<Vec<_>>())
            .bind(rows().map(|r| r.waiting_for.as_deref()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.wake_at).collect::<Vec<_>>())
            .bind(rows().map(|r| r.error_code.as_deref()).collect::<Vec<_>>())
            .bind(
                rows()
                    .map(|r| r.error_message.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(rows().map(|r| r.hash.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.patch_bytes).collect::<Vec<_>>())
            .bind(rows().map(|r| r.kind).collect::<Vec<_>>())
            .bind(rows().map(|r| r.payload_kind).collect::<Vec<_>>())
            .bind(rows().map(|r| r.patch().map(Json)).collect::<Vec<_>>())
            .bind(rows().map(|r| r.signal).collect::<Vec<_>>())
            .bind(rows().map(|r| r.spend.map(Json)).collect::<Vec<_>>());
        let (mut conn, opened) = self.held().await?;
        let returned = query.fetch_all(self.pool.on(&mut conn)).await;
        self.connections.give_back(conn, opened, &returned);
        let returned = returned?;
        let mut outcomes: Vec<Option<Applied>> = batch.iter().map(|_| None).collect();
        for r in &returned {
            *row_of(&mut outcomes, r, "commits")? = Some(r.applied_row()?);
        }
        Ok(outcomes.into_iter().map(Written::Commit).collect())
    }
}

/// [`sql::RECORD_ENTRY`] for `row`, its values bound: the output inline, or in the side
/// table when it is large.
pub(crate) fn record_entry(
    row: &EntryRow,
) -> sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql::RECORD_ENTRY)
        .bind(&row.run_id)
        .bind(row.epoch)
        .bind(row.version)
        .bind(row.seq)
        .bind(row.kind)
        .bind(&row.state)
        .bind(&row.name)
        .bind(row.tool_kind)
        .bind(&row.input_hash)
        .bind(&*row.input)
        .bind(&row.idempotency_key)
        .bind(row.status)
        .bind(row.inline_output())
        .bind(row.external)
        .bind(&row.output_summary)
        .bind(row.output_bytes)
        .bind(&row.error_class)
        .bind(&row.error_code)
        .bind(&row.error_message)
        .bind(row.attempts)
        .bind(row.duration_ms)
        .bind(row.started_at)
        .bind(row.finished_at)
        .bind(row.output.as_deref().filter(|_| row.external))
}

/// Whether [`record_entry`]'s statement wrote `row` (`false`: its epoch is not the run's,
/// or the run is gone).
pub(crate) fn entry_written(
    row: &EntryRow,
    returned: Result<sqlx::postgres::PgRow, sqlx::Error>,
) -> Result<bool, StoreError> {
    let written: i64 = returned
        .map_err(db_err)?
        .try_get(0)
        .map_err(|e| agent_sql::corrupt(&row.run_id, e))?;
    Ok(written > 0)
}

/// The place in `rows` of the write a grouped statement's returned row `r` is about: its
/// `n`, the write's place in the statement's parameter arrays, from 1. A row naming no
/// write of the statement (`what`) is a protocol error, not an answer to anybody.
fn row_of<'a, T>(
    rows: &'a mut [T],
    r: &sqlx::postgres::PgRow,
    what: &str,
) -> Result<&'a mut T, sqlx::Error> {
    let n: i64 = r.try_get("n")?;
    usize::try_from(n - 1)
        .ok()
        .and_then(|i| rows.get_mut(i))
        .ok_or_else(|| sqlx::Error::Protocol(format!("grouped {what} returned row {n}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use sqlx::postgres::PgPoolOptions;

    use super::HeldConnections;

    fn idle(held: &HeldConnections) -> usize {
        held.idle.lock().unwrap().len()
    }

    /// Connections opened ahead are kept for the statements that come, never more than
    /// asked for however often it is asked, and a broken one no longer counts. Skipped
    /// without `DATABASE_URL` outside CI (the integration tests say so loudly).
    #[tokio::test]
    async fn connections_opened_ahead_are_counted_and_kept() {
        let Some(options) = crate::test_database::options() else {
            return;
        };
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone());
        let held = Arc::new(HeldConnections::new(crate::pooler::Connector::new(
            options, None,
        )));
        held.open_ahead(&pool, 3);
        held.open_ahead(&pool, 3);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while idle(&held) < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "3 connections not opened within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        held.open_ahead(&pool, 3);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(idle(&held), 3, "asked for 3 three times: 3 opened");
        assert_eq!(held.live.load(Ordering::Relaxed), 3);

        let (conn, opened) = held.take(&pool).await.unwrap();
        assert_eq!(idle(&held), 2, "an idle one is lent, not a new one opened");
        held.give_back(conn, opened, &Err::<(), _>(sqlx::Error::PoolTimedOut));
        assert_eq!(
            held.live.load(Ordering::Relaxed),
            2,
            "a broken one is dropped"
        );
        held.open_ahead(&pool, 3);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while idle(&held) < 3 {
            assert!(tokio::time::Instant::now() < deadline, "not replaced");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(held.live.load(Ordering::Relaxed), 3);
    }
}
