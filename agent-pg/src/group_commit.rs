//! Group commit: step commits of different runs that arrive while the store already has
//! as many commit statements in flight as it allows go to the database together, as one
//! statement ([`sql::COMMIT_STEPS`]).
//!
//! Why: with many runs stepping at once, a worker and its database spend most of their
//! CPU on what every statement costs whatever it writes (a round trip, parse and bind,
//! executor start, a transaction and its WAL flush), not on the rows. One statement for
//! thirty commits pays that once.
//!
//! How, and what it keeps:
//! - **No waiting when there is room.** A commit that finds fewer than
//!   [`GroupCommit::max_in_flight`] commit statements in flight and nobody queued runs its
//!   own statement at once, in its caller's task: one run stepping alone pays nothing for
//!   the grouping. Otherwise it queues, and the statement in flight that finishes first
//!   takes everything queued (up to [`GroupCommit::max_batch`]) as its next statement.
//! - **Each commit keeps its own fence.** Every row of the grouped statement carries its
//!   own compare-and-set on version and epoch; a row that fails it writes nothing, and its
//!   caller learns why exactly as after a commit of its own. A run appears at most once in
//!   a statement; a second commit of the same run waits for the next one.
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
//! most ([`CommitConnections`]): sqlx pings a pooled connection when it is handed out and
//! again when it is given back, which would make each commit three round trips instead
//! of one.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_core::store::{Millis, StoreError};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{Connection, Postgres, Row};
use tokio::sync::oneshot;

use agent_sql::rows::{Applied, SqlRow};

use crate::connect::db_err;
use crate::sql;

/// The parameters of one step commit, owned (the statement may run in another task).
#[derive(Debug)]
pub(crate) struct CommitRow {
    pub run_id: String,
    pub epoch: i64,
    pub expected: i64,
    pub from_state: String,
    pub to_state: String,
    /// The whole state, when this version is a snapshot.
    pub snapshot: Option<Value>,
    pub status: &'static str,
    pub waiting_for: Option<String>,
    pub wake_at: Option<Millis>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub hash: String,
    pub patch_bytes: i64,
    pub kind: &'static str,
    pub payload_kind: &'static str,
    /// The JSON Patch from the previous version, when this version is not a snapshot.
    pub patch: Option<Value>,
    /// The signal this step consumes: it must still be pending (part of the
    /// compare-and-set), and is marked consumed at the new version in the same statement.
    pub signal: Option<i64>,
}

/// `Ok(None)`: the compare-and-set matched no row; the caller finds out why.
pub(crate) type Outcome = Result<Option<Applied>, StoreError>;

/// How many commits went to the database in how many statements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Commit statements sent (single and grouped).
    pub statements: u64,
    /// Commits they carried.
    pub commits: u64,
    /// Grouped statements the server rejected, whose commits were then sent one by one.
    pub regrouped: u64,
    /// Commits that waited in the queue (the others found a free slot).
    pub waited: u64,
    /// Commits waiting for a statement now.
    pub queued: usize,
}

/// A commit's turn: its own statement now, or a place in the queue.
// One short-lived value per commit, on the stack: boxing the row would cost more.
#[allow(clippy::large_enum_variant)]
enum Turn {
    Now(CommitRow),
    Queued(oneshot::Receiver<Outcome>),
}

struct Queued {
    row: CommitRow,
    reply: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    /// Commit statements in flight, each holding one slot.
    in_flight: usize,
}

/// A commit connection idle longer than this is pinged before its next statement (the
/// server may have restarted or dropped it meanwhile); one in use more often is not.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(2);

/// A commit connection is closed and replaced after this long, as the pool does with its
/// own (`max_lifetime`), so that the server side does not grow without end.
const MAX_CONNECTION_AGE: Duration = Duration::from_mins(30);

/// The connections commit statements run on, outside the pool: at most one per commit
/// slot, opened when first needed, kept between statements. A connection whose statement
/// failed other than by the server's refusal is dropped, not reused; so is every one of
/// them once the pool is closed (the store is shutting down).
pub(crate) struct CommitConnections {
    options: PgConnectOptions,
    /// The idle ones: the connection, when it was opened, when it was last used.
    idle: Mutex<Vec<(PgConnection, Instant, Instant)>>,
}

impl CommitConnections {
    pub(crate) fn new(options: PgConnectOptions) -> Self {
        Self {
            options,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle connection that is still good, or a new one.
    async fn take(&self, pool: &PgPool) -> Result<(PgConnection, Instant), sqlx::Error> {
        if pool.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
            return Err(sqlx::Error::PoolClosed);
        }
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some((mut conn, opened, used)) = kept
            && opened.elapsed() < MAX_CONNECTION_AGE
            && (used.elapsed() < CHECK_AFTER_IDLE || conn.ping().await.is_ok())
        {
            return Ok((conn, opened));
        }
        Ok((
            PgConnection::connect_with(&self.options).await?,
            Instant::now(),
        ))
    }

    /// Keep `conn` for the next statement, unless `outcome` says it may be broken.
    fn give_back<T>(&self, conn: PgConnection, opened: Instant, outcome: &Result<T, sqlx::Error>) {
        if matches!(outcome, Ok(_) | Err(sqlx::Error::Database(_))) {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((conn, opened, Instant::now()));
        }
    }
}

/// The group-commit state of one store.
pub(crate) struct GroupCommit {
    pool: PgPool,
    connections: CommitConnections,
    queue: Mutex<Queue>,
    /// Commit statements allowed in flight at once.
    pub max_in_flight: usize,
    /// Commits in one grouped statement at most.
    pub max_batch: usize,
    statements: AtomicU64,
    commits: AtomicU64,
    regrouped: AtomicU64,
    waited: AtomicU64,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("max_in_flight", &self.max_in_flight)
            .field("max_batch", &self.max_batch)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl GroupCommit {
    pub(crate) fn new(
        pool: PgPool,
        options: PgConnectOptions,
        max_in_flight: usize,
        max_batch: usize,
    ) -> Self {
        Self {
            pool,
            connections: CommitConnections::new(options),
            queue: Mutex::new(Queue::default()),
            max_in_flight: max_in_flight.max(1),
            max_batch: max_batch.max(1),
            statements: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            regrouped: AtomicU64::new(0),
            waited: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            statements: self.statements.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            regrouped: self.regrouped.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
            queued: self.lock().waiting.len(),
        }
    }

    /// Keep `conn`, opened for something else (the store's first connection), as an idle
    /// commit connection: the first commit then does not open one.
    pub(crate) fn adopt(&self, conn: PgConnection) {
        self.connections
            .give_back(conn, Instant::now(), &Ok::<(), sqlx::Error>(()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commit `row`: at once when a slot is free and nobody waits, else with the next
    /// grouped statement.
    pub(crate) async fn commit(self: &Arc<Self>, row: CommitRow) -> Outcome {
        let turn = {
            let mut queue = self.lock();
            if queue.in_flight < self.max_in_flight && queue.waiting.is_empty() {
                queue.in_flight += 1;
                Turn::Now(row)
            } else {
                let (reply, receiver) = oneshot::channel();
                queue.waiting.push_back(Queued { row, reply });
                self.waited.fetch_add(1, Ordering::Relaxed);
                let start = queue.in_flight < self.max_in_flight;
                if start {
                    queue.in_flight += 1;
                }
                drop(queue);
                if start {
                    self.spawn_flusher();
                }
                Turn::Queued(receiver)
            }
        };
        match turn {
            Turn::Now(row) => {
                // The slot passes to the queue when this statement ends, even if this
                // future is dropped before.
                let _slot = Slot(self);
                self.one(&row).await
            }
            Turn::Queued(receiver) => receiver.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the grouped commit statement was interrupted; whether it applied is \
                     unknown"
                        .into(),
                ))
            }),
        }
    }

    fn spawn_flusher(self: &Arc<Self>) {
        let this = Arc::clone(self);
        tokio::spawn(async move { this.flush().await });
    }

    /// Send what is queued, a statement at a time, until nothing is; then free the slot.
    async fn flush(self: Arc<Self>) {
        loop {
            let batch = {
                let mut queue = self.lock();
                let batch = self.take_batch(&mut queue);
                if batch.is_empty() {
                    queue.in_flight -= 1;
                    return;
                }
                batch
            };
            self.send(batch).await;
        }
    }

    /// Up to `max_batch` queued commits, oldest first, one per run; callers that stopped
    /// waiting are dropped unsent.
    fn take_batch(&self, queue: &mut Queue) -> Vec<Queued> {
        let mut batch = Vec::new();
        let mut runs = HashSet::new();
        let mut later = VecDeque::new();
        while batch.len() < self.max_batch {
            let Some(next) = queue.waiting.pop_front() else {
                break;
            };
            if next.reply.is_closed() {
                continue;
            }
            if runs.insert(next.row.run_id.clone()) {
                batch.push(next);
            } else {
                later.push_back(next);
            }
        }
        // Second commits of a run already in the batch keep their place at the front.
        while let Some(q) = later.pop_back() {
            queue.waiting.push_front(q);
        }
        batch
    }

    async fn send(&self, batch: Vec<Queued>) {
        if batch.len() == 1 {
            for q in batch {
                let outcome = self.one(&q.row).await;
                let _ = q.reply.send(outcome);
            }
            return;
        }
        match self.many(&batch).await {
            Ok(mut applied) => {
                for (q, outcome) in batch.into_iter().zip(applied.drain(..)) {
                    let _ = q.reply.send(Ok(outcome));
                }
            }
            // The server refused the statement: nothing of it was written. One row's
            // problem must not be every row's answer, so each goes again alone.
            Err(sqlx::Error::Database(e)) => {
                tracing::debug!(error = %e, commits = batch.len(),
                    "grouped commit refused; sending its commits one by one");
                self.regrouped.fetch_add(1, Ordering::Relaxed);
                for q in batch {
                    let outcome = self.one(&q.row).await;
                    let _ = q.reply.send(outcome);
                }
            }
            // The connection failed, or the answer did not read: the statement may or may
            // not have been applied, so each caller resolves it by re-reading.
            Err(e) => {
                let error = db_err(e);
                for q in batch {
                    let _ = q.reply.send(Err(same_error(&error)));
                }
            }
        }
    }

    /// One commit, one statement ([`sql::COMMIT_STEP`], or [`sql::COMMIT_STEP_CONSUMING`]
    /// for a step that consumes a signal).
    async fn one(&self, row: &CommitRow) -> Outcome {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
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
            .bind(&row.snapshot)
            .bind(row.status)
            .bind(&row.waiting_for)
            .bind(row.wake_at)
            .bind(&row.error_code)
            .bind(&row.error_message)
            .bind(&row.hash)
            .bind(row.patch_bytes)
            .bind(row.kind)
            .bind(row.payload_kind)
            .bind(&row.patch);
        if let Some(signal) = row.signal {
            query = query.bind(signal);
        }
        let (mut conn, opened) = self.connections.take(&self.pool).await.map_err(db_err)?;
        let returned = query.fetch_optional(&mut conn).await;
        self.connections.give_back(conn, opened, &returned);
        returned
            .map_err(db_err)?
            .map(|r| r.applied_row())
            .transpose()
            .map_err(|e| agent_sql::corrupt(&row.run_id, e))
    }

    /// Several commits, one statement ([`sql::COMMIT_STEPS`]); what each one did, in order.
    async fn many(&self, batch: &[Queued]) -> Result<Vec<Option<Applied>>, sqlx::Error> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.commits
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let rows = || batch.iter().map(|q| &q.row);
        let query = sqlx::query::<Postgres>(sql::COMMIT_STEPS.as_str())
            .bind(rows().map(|r| r.run_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.epoch).collect::<Vec<_>>())
            .bind(rows().map(|r| r.expected).collect::<Vec<_>>())
            .bind(rows().map(|r| r.from_state.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.to_state.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.snapshot.as_ref()).collect::<Vec<_>>())
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
            .bind(rows().map(|r| r.patch.as_ref()).collect::<Vec<_>>())
            .bind(rows().map(|r| r.signal).collect::<Vec<_>>());
        let (mut conn, opened) = self.connections.take(&self.pool).await?;
        let returned = query.fetch_all(&mut conn).await;
        self.connections.give_back(conn, opened, &returned);
        let returned = returned?;
        let mut outcomes: Vec<Option<Applied>> = batch.iter().map(|_| None).collect();
        for r in &returned {
            let n: i64 = r.try_get("n")?;
            let slot = usize::try_from(n - 1)
                .ok()
                .and_then(|i| outcomes.get_mut(i))
                .ok_or_else(|| sqlx::Error::Protocol(format!("grouped commit returned row {n}")))?;
            *slot = Some(r.applied_row()?);
        }
        Ok(outcomes)
    }
}

/// What a commit statement returned for one applied commit.
/// The same answer for each caller of a failed grouped statement.
fn same_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        other => StoreError::Backend(other.to_string()),
    }
}

/// A commit statement's slot, held by a caller running its own statement. When it ends
/// (or the caller's future is dropped), the slot goes to the queue if anyone waits.
struct Slot<'a>(&'a Arc<GroupCommit>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        if queue.waiting.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            queue.in_flight -= 1;
        } else {
            drop(queue);
            self.0.spawn_flusher();
        }
    }
}
