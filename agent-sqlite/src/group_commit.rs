//! Group commit for the embedded store: step commits and journal entries of different
//! runs that arrive while the store's one writer is busy are written together, in one
//! `BEGIN IMMEDIATE` transaction, so that they share its `fsync` (issue 22).
//!
//! Why: SQLite has one writer, and with `synchronous = FULL` every transaction waits for
//! its write-ahead log to reach the disk. With many runs stepping at once, that wait, not
//! the rows, is what a commit costs; sixty-four commits in one transaction pay it once.
//!
//! How, and what it keeps:
//! - **No waiting when the writer is idle.** A commit that finds no batch being written
//!   and nobody queued writes its own transaction at once, in its caller's task: a run
//!   stepping alone pays nothing for the grouping. Otherwise it queues, and when the
//!   transaction being written ends, everything queued (up to [`GroupCommit::max_batch`])
//!   goes in the next one, written by a task of its own.
//! - **Each commit keeps its own fence.** Every commit runs its own compare-and-set on
//!   version and epoch (and no operator's cancel waiting, and its consumed signal still
//!   pending); one that fails it writes nothing, and its caller learns why exactly as after
//!   a transaction of its own. A journal entry checks its lease's epoch the same way.
//! - **A commit may carry its step's entries** (`Store::commit_step_with_entries`): they
//!   are written after its compare-and-set applied and before its version, in its
//!   savepoint, so they are written if and only if the commit is.
//! - **Durable before the answer.** A caller hears of its commit or entry only once the
//!   transaction that carried it is committed (`Store::record_entry`'s contract: an entry
//!   is durable when the call returns).
//! - **One bad commit does not fail the others.** Each commit of a batch runs inside a
//!   savepoint: a statement error rolls back that commit alone, and the others are
//!   committed. If the transaction itself fails (its `COMMIT`, or a savepoint SQLite
//!   could not keep), nothing of the batch was written and every caller gets the error.
//! - **Cancelled callers.** A queued commit whose caller stopped waiting is dropped
//!   unwritten. Batches are written by tasks of their own, so a caller that stops waiting
//!   does not cancel the others' commits.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::store::{Millis, StoreError};
use agent_sql::rows::Applied;
use sqlx::sqlite::SqlitePool;
use sqlx::{Row, SqliteConnection};
use tokio::sync::oneshot;

use crate::{db_err, sql};

/// The statements' parameters of one step commit, owned (a batch is written by another
/// task than its callers').
#[derive(Debug)]
pub(crate) struct CommitRow {
    pub run_id: String,
    pub epoch: i64,
    pub expected: i64,
    pub version: i64,
    pub from_state: String,
    pub to_state: String,
    /// The whole state, when this version is a snapshot (the run row keeps it).
    pub snapshot_state: Option<String>,
    pub status: &'static str,
    /// The commit keeps the run's (non-final) status as the head it was planned on had
    /// it: try the statement that leaves status and lease columns alone first.
    pub same_status: bool,
    pub waiting_for: Option<String>,
    pub wake_at: Option<Millis>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub hash: String,
    pub patch_bytes: i64,
    pub kind: &'static str,
    pub payload_kind: &'static str,
    /// The version's payload: the snapshot or the JSON Patch, serialized.
    pub body: String,
    /// The signal this step consumes: it must still be pending, and is marked consumed at
    /// the new version in the same transaction.
    pub signal: Option<i64>,
    pub now: Millis,
    /// Journal entries of the step not recorded yet: written after the compare-and-set,
    /// only if it applied, and before the version.
    pub entries: Vec<EntryRow>,
}

/// The parameters of one journal entry's write, owned (a batch is written by another task
/// than its callers'). Outputs too large to keep inline go to the side table.
#[derive(Debug)]
pub(crate) struct EntryRow {
    pub run_id: String,
    pub epoch: u64,
    pub version: i64,
    pub seq: i64,
    pub kind: &'static str,
    pub state: String,
    pub name: String,
    pub tool_kind: Option<&'static str>,
    pub input_hash: String,
    pub input: String,
    pub idempotency_key: Option<String>,
    pub status: &'static str,
    /// The output, serialized, and whether it goes to the side table.
    pub output: Option<String>,
    pub external: bool,
    pub error_class: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub attempts: i64,
    pub duration_ms: i64,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
}

/// `Ok(None)`: the compare-and-set (or the signal's check) matched nothing and nothing was
/// written; the caller finds out why.
pub(crate) type Outcome = Result<Option<Applied>, StoreError>;

/// One write the group commit carries.
// Short-lived, moved once into the queue: boxing the rows would cost more.
#[allow(clippy::large_enum_variant)]
enum Write {
    Commit(CommitRow),
    Entry(EntryRow),
}

/// What a write did: a commit's outcome, or an entry written.
enum Written {
    Commit(Option<Applied>),
    Entry,
}

/// How many commits went to the database in how many transactions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Commit transactions written (single and grouped).
    pub transactions: u64,
    /// Commits and journal entries they carried.
    pub commits: u64,
    /// Commits and entries that waited in the queue (the others found the writer idle).
    pub waited: u64,
}

struct Queued {
    write: Write,
    reply: oneshot::Sender<Result<Written, StoreError>>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    /// A commit transaction is being written (by a caller or by a flushing task).
    writing: bool,
}

/// The group-commit state of one store.
pub(crate) struct GroupCommit {
    pool: SqlitePool,
    queue: Mutex<Queue>,
    /// Commits in one transaction at most.
    pub max_batch: usize,
    transactions: AtomicU64,
    commits: AtomicU64,
    waited: AtomicU64,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("max_batch", &self.max_batch)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// A write's turn: its own transaction now, or a place in the queue.
// One short-lived value per write, on the stack: boxing the row would cost more.
#[allow(clippy::large_enum_variant)]
enum Turn {
    Now(Write),
    Queued(oneshot::Receiver<Result<Written, StoreError>>),
}

impl GroupCommit {
    /// Commits of one transaction at most, by default: the W2 shape's 64 runs in flight
    /// fit twice.
    pub(crate) const MAX_BATCH: usize = 128;

    pub(crate) fn new(pool: SqlitePool, max_batch: usize) -> Self {
        Self {
            pool,
            queue: Mutex::new(Queue::default()),
            max_batch: max_batch.max(1),
            transactions: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            waited: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commit `row`: in a transaction of its own when the writer is idle, else with the
    /// next batch.
    pub(crate) async fn commit(self: &Arc<Self>, row: CommitRow) -> Outcome {
        match self.write(Write::Commit(row)).await? {
            Written::Commit(applied) => Ok(applied),
            Written::Entry => Err(StoreError::Backend(
                "a commit was answered as a journal entry".into(),
            )),
        }
    }

    /// Write a journal entry, fenced by its lease's epoch, as a commit is: alone when the
    /// writer is idle, else with the next batch. Returns once it is committed.
    pub(crate) async fn record(self: &Arc<Self>, row: EntryRow) -> Result<(), StoreError> {
        self.write(Write::Entry(row)).await.map(drop)
    }

    async fn write(self: &Arc<Self>, write: Write) -> Result<Written, StoreError> {
        let turn = {
            let mut queue = self.lock();
            if !queue.writing && queue.waiting.is_empty() {
                queue.writing = true;
                Turn::Now(write)
            } else {
                let (reply, receiver) = oneshot::channel();
                queue.waiting.push_back(Queued { write, reply });
                self.waited.fetch_add(1, Ordering::Relaxed);
                let start = !queue.writing;
                queue.writing = true;
                drop(queue);
                if start {
                    self.spawn_flusher();
                }
                Turn::Queued(receiver)
            }
        };
        match turn {
            Turn::Now(write) => {
                // The writer passes to the queue when this transaction ends, even if this
                // future is dropped before.
                let _writer = Writer(self);
                // Boxed: a queued write's future (one per run waiting for the writer)
                // need not be as large as a transaction's statements.
                Box::pin(self.one(&write)).await
            }
            Turn::Queued(receiver) => receiver.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the grouped commit transaction was interrupted; whether it applied is \
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

    /// Write what is queued, a transaction at a time, until nothing is; then leave the
    /// writer idle.
    async fn flush(self: Arc<Self>) {
        loop {
            let batch = {
                let mut queue = self.lock();
                let mut batch = Vec::new();
                while batch.len() < self.max_batch {
                    let Some(next) = queue.waiting.pop_front() else {
                        break;
                    };
                    if !next.reply.is_closed() {
                        batch.push(next);
                    }
                }
                if batch.is_empty() {
                    queue.writing = false;
                    return;
                }
                batch
            };
            self.many(batch).await;
        }
    }

    /// One commit or entry, one transaction.
    async fn one(&self, write: &Write) -> Result<Written, StoreError> {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        let written = apply(&mut tx, write).await?;
        if !matches!(written, Written::Commit(None)) {
            tx.commit().await.map_err(db_err)?;
        }
        Ok(written)
    }

    /// Several commits (possibly of the same run: each reads what the earlier ones of the
    /// batch wrote), one transaction, each in a savepoint of its own; each caller gets its
    /// commit's outcome.
    async fn many(&self, batch: Vec<Queued>) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.commits
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match self.write_batch(&batch).await {
            Ok(outcomes) => {
                for (q, outcome) in batch.into_iter().zip(outcomes) {
                    let _ = q.reply.send(outcome);
                }
            }
            Err(error) => {
                for q in batch {
                    let _ = q.reply.send(Err(same_error(&error)));
                }
            }
        }
    }

    /// The batch's transaction: `Err` when nothing of it was written (or whether it was
    /// is unknown), else each commit's outcome in order.
    async fn write_batch(
        &self,
        batch: &[Queued],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for q in batch {
            sqlx::query("SAVEPOINT step_commit")
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let outcome = apply(&mut tx, &q.write).await;
            if outcome.is_err() {
                // Only this commit's statements are undone. Should SQLite have rolled the
                // whole transaction back (a full disk, an I/O error), the savepoint is gone
                // and this fails: the batch fails as one.
                sqlx::query("ROLLBACK TO step_commit")
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
            }
            sqlx::query("RELEASE step_commit")
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            outcomes.push(outcome);
        }
        tx.commit().await.map_err(db_err)?;
        Ok(outcomes)
    }
}

/// Write one commit or entry on `conn`, inside a transaction.
async fn apply(conn: &mut SqliteConnection, write: &Write) -> Result<Written, StoreError> {
    match write {
        Write::Commit(row) => apply_commit(conn, row).await.map(Written::Commit),
        Write::Entry(row) => apply_entry(conn, row).await.map(|()| Written::Entry),
    }
}

/// Write one journal entry on `conn`, inside a transaction, if its lease's epoch is the
/// run's: [`StoreError::LeaseLost`] (or `NotFound`) and nothing written otherwise.
async fn apply_entry(conn: &mut SqliteConnection, row: &EntryRow) -> Result<(), StoreError> {
    let head = sqlx::query(agent_sql::sql::RUN_HEAD)
        .bind(&row.run_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::NotFound(row.run_id.clone()))?;
    let (_, epoch) = agent_sql::rows::head(&row.run_id, &head)?;
    if epoch != row.epoch {
        return Err(StoreError::LeaseLost {
            run_id: row.run_id.clone(),
            epoch: row.epoch,
        });
    }
    write_entry(conn, row).await
}

/// The entry's rows (the journal's, and the side table's for a large output), its fence
/// already checked.
async fn write_entry(conn: &mut SqliteConnection, row: &EntryRow) -> Result<(), StoreError> {
    let output = row.output.as_deref();
    sqlx::query(sql::UPSERT_ENTRY)
        .bind(&row.run_id)
        .bind(row.version)
        .bind(row.seq)
        .bind(row.kind)
        .bind(&row.state)
        .bind(&row.name)
        .bind(row.tool_kind)
        .bind(&row.input_hash)
        .bind(&row.input)
        .bind(&row.idempotency_key)
        .bind(row.status)
        .bind(if row.external { None } else { output })
        .bind(row.external)
        .bind(output.map(agent_sql::summary))
        .bind(output.map(|o| i64::try_from(o.len()).unwrap_or(i64::MAX)))
        .bind(&row.error_class)
        .bind(&row.error_code)
        .bind(&row.error_message)
        .bind(row.attempts)
        .bind(row.duration_ms)
        .bind(row.started_at)
        .bind(row.finished_at)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    let side = if row.external {
        sqlx::query(sql::UPSERT_OUTPUT)
    } else {
        sqlx::query(sql::DELETE_OUTPUT)
    };
    let side = side.bind(&row.run_id).bind(row.version).bind(row.seq);
    let side = if row.external {
        side.bind(output)
    } else {
        side
    };
    side.execute(&mut *conn).await.map_err(db_err)?;
    Ok(())
}

/// Write one commit on `conn`, inside a transaction: `Ok(None)` when its compare-and-set
/// (or its signal's check) matched nothing, in which case it wrote nothing.
async fn apply_commit(conn: &mut SqliteConnection, row: &CommitRow) -> Outcome {
    if let Some(signal) = row.signal {
        let pending = sqlx::query(sql::SIGNAL_PENDING)
            .bind(signal)
            .bind(&row.run_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        if pending.is_none() {
            return Ok(None);
        }
    }
    let update = |statement| {
        sqlx::query(statement)
            .bind(&row.run_id)
            .bind(row.version)
            .bind(&row.to_state)
            .bind(row.snapshot_state.as_deref())
            .bind(row.status)
            .bind(&row.waiting_for)
            .bind(row.wake_at)
            .bind(&row.error_code)
            .bind(&row.error_message)
            .bind(&row.hash)
            .bind(row.patch_bytes)
            .bind(row.now)
            .bind(row.epoch)
            .bind(row.expected)
    };
    // Most steps keep the run's status: a statement that leaves the indexed status and
    // lease columns alone, then the full one if the stored status differs.
    let mut updated = None;
    if row.same_status {
        updated = update(sql::COMMIT_RUN_SAME_STATUS)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if updated.is_none() {
        updated = update(sql::COMMIT_RUN.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    let Some(updated) = updated else {
        return Ok(None);
    };
    let c = |e: sqlx::Error| agent_sql::corrupt(&row.run_id, e);
    let applied = Applied {
        lease_owner: updated.try_get("lease_owner").map_err(c)?,
        lease_expires_at: updated.try_get("lease_expires_at").map_err(c)?,
        updated_at: row.now,
    };
    // The step's entries, fenced by the compare-and-set that just applied, are written
    // before its version: their positions, and so their events, come first, as when they
    // are recorded on their own.
    for entry in &row.entries {
        write_entry(conn, entry).await?;
    }
    sqlx::query(sql::INSERT_TRANSITION)
        .bind(&row.run_id)
        .bind(row.version)
        .bind(&row.from_state)
        .bind(&row.to_state)
        .bind(row.kind)
        .bind(row.status)
        .bind(row.epoch)
        .bind(row.now)
        .bind(&row.hash)
        .bind(row.payload_kind)
        .bind(&row.body)
        .bind(&row.waiting_for)
        .bind(row.wake_at)
        .bind(&row.error_code)
        .bind(&row.error_message)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    if let Some(signal) = row.signal {
        sqlx::query(sql::CONSUME_SIGNAL)
            .bind(signal)
            .bind(row.version)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(Some(applied))
}

/// The same answer for each caller of a failed batch.
fn same_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        other => StoreError::Backend(other.to_string()),
    }
}

/// The writer, held by a caller writing its own transaction. When it ends (or the caller's
/// future is dropped), the writer goes to the queue if anyone waits.
struct Writer<'a>(&'a Arc<GroupCommit>);

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        if queue.waiting.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            queue.writing = false;
        } else {
            drop(queue);
            self.0.spawn_flusher();
        }
    }
}
