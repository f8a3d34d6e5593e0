//! Group commit for the embedded store: step commits, journal entries and signals of
//! different runs that arrive while the store's one writer is busy are written together,
//! in one `BEGIN IMMEDIATE` transaction, so that they share its `fsync` (issue 22).
//!
//! Why: SQLite has one writer, and with `synchronous = FULL` every transaction waits for
//! its write-ahead log to reach the disk. With many runs stepping at once, that wait, not
//! the rows, is what a commit costs; sixty-four commits in one transaction pay it once.
//!
//! How, and what it keeps:
//! - **No waiting when the writer is idle.** A commit that finds no batch being written
//!   and nobody queued writes its own transaction at once, in its caller's task: a run
//!   stepping alone pays nothing for the grouping. Otherwise it queues, and when the
//!   transaction being written ends, everything queued (up to [`GroupCommit::MAX_BATCH`])
//!   goes in the next one, written by a task of its own. The queue is the one both stores
//!   share ([`agent_sql::write_queue`], with one slot here); this module writes its
//!   batches.
//! - **Each commit keeps its own fence.** Every commit runs its own compare-and-set on
//!   version and epoch (and no operator's cancel waiting, and its consumed signal still
//!   pending); one that fails it writes nothing, and its caller learns why exactly as after
//!   a transaction of its own. A journal entry checks its lease's epoch the same way.
//! - **A commit may carry its step's entries** (`RunStore::commit_step`): they
//!   are written after its compare-and-set applied and before its version, as part of
//!   the same write, so they are written if and only if the commit is.
//! - **Durable before the answer.** A caller hears of its commit or entry only once the
//!   transaction that carried it is committed (`RunStore::record_entry`'s contract: an entry
//!   is durable when the call returns).
//! - **One bad commit does not fail the others.** A batch is written without savepoints
//!   first (they would double its statements); if one of its writes fails, that attempt
//!   is rolled back and the batch written again with each write inside a savepoint: a
//!   statement error then rolls back that write alone, and the others are committed. If
//!   the transaction itself fails (its `COMMIT`, or a savepoint SQLite could not keep),
//!   nothing of the batch was written and every caller gets the error.
//! - **Cancelled callers.** A queued commit whose caller stopped waiting is dropped
//!   unwritten. Batches are written by tasks of their own, so a caller that stops waiting
//!   does not cancel the others' commits.

use std::sync::atomic::{AtomicU64, Ordering};

use agent_core::store::StoreError;
use agent_sql::rows::Applied;
use agent_sql::write::{CommitRow, EntryRow, Outcome, Write, Written};
use agent_sql::write_queue::{BatchWriter, same_error};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{Row, SqliteConnection};

use crate::{db_err, sql};

/// How many commits went to the database in how many transactions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Commit transactions written (single and grouped).
    pub transactions: u64,
    /// Commits, journal entries and signals they carried.
    pub commits: u64,
    /// Commits, entries and signals that waited in the queue (the others found the writer
    /// idle).
    pub waited: u64,
    /// Batches written a second time, with a savepoint per write, because one of their
    /// writes failed in the first attempt (which wrote nothing).
    pub retried: u64,
}

type Queued = agent_sql::write_queue::Queued<Writer>;

/// The group commit of one store: the shared queue, over the store's one writer.
pub(crate) type GroupCommit = agent_sql::write::GroupCommit<Writer>;

/// What writes a batch: one `BEGIN IMMEDIATE` transaction on the store's pool.
pub(crate) struct Writer {
    pool: SqlitePool,
    transactions: AtomicU64,
    commits: AtomicU64,
    retried: AtomicU64,
}

/// Commits of one transaction at most, by default: the W2 shape's 64 runs in flight fit
/// twice.
pub(crate) const MAX_BATCH: usize = 128;

/// SQLite has one writer: one transaction at a time, of at most `max_batch` writes.
pub(crate) fn group_commit(pool: SqlitePool, max_batch: usize) -> GroupCommit {
    let writer = Writer {
        pool,
        transactions: AtomicU64::new(0),
        commits: AtomicU64::new(0),
        retried: AtomicU64::new(0),
    };
    GroupCommit::new(writer, 1, max_batch)
}

/// The figures of `group`.
pub(crate) fn stats(group: &GroupCommit) -> GroupCommitStats {
    let queue = group.queue();
    let writer = queue.writer();
    GroupCommitStats {
        transactions: writer.transactions.load(Ordering::Relaxed),
        commits: writer.commits.load(Ordering::Relaxed),
        waited: queue.waited(),
        retried: writer.retried.load(Ordering::Relaxed),
    }
}

impl BatchWriter for Writer {
    type Write = Write;
    type Written = Written;

    /// One commit, entry or signal, one transaction.
    async fn one(&self, write: &Write) -> Result<Written, StoreError> {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
        agent_core::metrics::store_writes("sqlite", "mixed", 1);
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
    /// batch wrote), one transaction; each caller gets its commit's outcome.
    async fn many(&self, batch: Vec<Queued>) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.commits
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        agent_core::metrics::store_writes("sqlite", "mixed", batch.len());
        match self.write_batch(&batch).await {
            Ok(outcomes) => {
                for (q, outcome) in batch.into_iter().zip(outcomes) {
                    q.answer(outcome);
                }
            }
            Err(error) => {
                for q in batch {
                    q.answer(Err(same_error(&error)));
                }
            }
        }
    }
}

impl Writer {
    /// The batch's transaction: `Err` when nothing of it was written (or whether it was
    /// is unknown), else each write's outcome in order.
    ///
    /// Written first without savepoints: a savepoint and its release are two more
    /// statements per write, as many as a commit's own, and nearly every batch has no
    /// write that fails. Should one fail, the whole transaction is rolled back and the
    /// batch written again with a savepoint per write, so that only the failing write's
    /// statements are undone.
    async fn write_batch(
        &self,
        batch: &[Queued],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        if let Some(outcomes) = self.write_batch_with(batch, Savepoints::None).await? {
            return Ok(outcomes);
        }
        self.retried.fetch_add(1, Ordering::Relaxed);
        self.write_batch_with(batch, Savepoints::EachWrite)
            .await?
            .ok_or_else(|| StoreError::backend("a batch with savepoints was not written"))
    }

    /// One attempt at the batch's transaction. Without savepoints, `Ok(None)` when a write
    /// failed: the transaction was rolled back and nothing of the batch was written.
    async fn write_batch_with(
        &self,
        batch: &[Queued],
        savepoints: Savepoints,
    ) -> Result<Option<Vec<Result<Written, StoreError>>>, StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for q in batch {
            if savepoints == Savepoints::None {
                let outcome = apply(&mut tx, &q.write).await;
                if outcome.is_err() {
                    // Some of its statements may have applied: undo the whole batch.
                    tx.rollback().await.map_err(db_err)?;
                    return Ok(None);
                }
                outcomes.push(outcome);
                continue;
            }
            sqlx::query("SAVEPOINT step_commit")
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let outcome = apply(&mut tx, &q.write).await;
            if outcome.is_err() {
                // Only this write's statements are undone. Should SQLite have rolled the
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
        Ok(Some(outcomes))
    }
}

/// How a batch's writes are kept apart within its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Savepoints {
    /// None: a failing write fails the attempt.
    None,
    /// One per write: a failing write is undone alone.
    EachWrite,
}

/// Write one commit, entry or signal on `conn`, inside a transaction.
async fn apply(conn: &mut SqliteConnection, write: &Write) -> Result<Written, StoreError> {
    match write {
        Write::Commit(row) => apply_commit(conn, row).await.map(Written::Commit),
        Write::Entry(row) => apply_entry(conn, row).await.map(|()| Written::Entry(true)),
        Write::Signal(row) => sqlx::query_scalar(sql::SEND_SIGNAL)
            .bind(&row.run_id)
            .bind(&row.name)
            .bind(row.payload.get())
            .bind(row.created_at)
            .fetch_optional(&mut *conn)
            .await
            .map(Written::Signal)
            .map_err(db_err),
    }
}

/// Write one journal entry on `conn`, inside a transaction, if its lease's epoch is the
/// run's: [`StoreError::LeaseLost`] (or `NotFound`) and nothing written otherwise.
async fn apply_entry(conn: &mut SqliteConnection, row: &EntryRow) -> Result<(), StoreError> {
    let upserted = entry_upsert(sql::UPSERT_ENTRY_FENCED, row)
        .bind(row.epoch)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    if upserted.rows_affected() == 0 {
        return Err(entry_refused(conn, row).await);
    }
    write_output(conn, row).await
}

/// Why a fenced entry was not written: its run is gone, or its lease moved on.
async fn entry_refused(conn: &mut SqliteConnection, row: &EntryRow) -> StoreError {
    let head = match sqlx::query(agent_sql::sql::RUN_HEAD)
        .bind(&row.run_id)
        .fetch_optional(&mut *conn)
        .await
    {
        Ok(Some(head)) => head,
        Ok(None) => return StoreError::NotFound(row.run_id.clone()),
        Err(e) => return db_err(e),
    };
    match agent_sql::rows::head(&row.run_id, &head) {
        Ok((_, stored)) if i64::try_from(stored).ok() != Some(row.epoch) => StoreError::LeaseLost {
            run_id: row.run_id.clone(),
            epoch: u64::try_from(row.epoch).unwrap_or_default(),
        },
        Ok(_) => StoreError::backend(format!(
            "the journal entry of run {} at version {} was not written",
            row.run_id, row.version
        )),
        Err(e) => e,
    }
}

/// The entry's rows (the journal's, and the side table's for a large output), its fence
/// already checked: the commit carrying it applied.
async fn write_entry(conn: &mut SqliteConnection, row: &EntryRow) -> Result<(), StoreError> {
    entry_upsert(sql::UPSERT_ENTRY, row)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    write_output(conn, row).await
}

/// The journal row's statement, its values bound (`$1`–`$22`).
fn entry_upsert<'q>(
    statement: &'static str,
    row: &'q EntryRow,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    let output = row.output.as_deref().map(serde_json::value::RawValue::get);
    sqlx::query(statement)
        .bind(&row.run_id)
        .bind(row.version)
        .bind(row.seq)
        .bind(row.kind)
        .bind(&row.state)
        .bind(&row.name)
        .bind(row.tool_kind)
        .bind(&row.input_hash)
        .bind(row.input.get())
        .bind(&row.idempotency_key)
        .bind(row.status)
        .bind(if row.external { None } else { output })
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
}

/// The side table's row of an entry whose output is too large to keep inline. (One an
/// earlier write of the entry left is dropped by the journal's trigger
/// `journal_output_inline` when the output is inline now.)
async fn write_output(conn: &mut SqliteConnection, row: &EntryRow) -> Result<(), StoreError> {
    if row.external {
        sqlx::query(sql::UPSERT_OUTPUT)
            .bind(&row.run_id)
            .bind(row.version)
            .bind(row.seq)
            .bind(row.output.as_deref().map(serde_json::value::RawValue::get))
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
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
    // Without entries to write in between, the version's row goes in the update's
    // statement list: one round trip.
    let with_version = row.entries.is_empty();
    // Most steps keep the run's status: a statement that leaves the indexed status and
    // lease columns alone, then the full one if the stored status differs.
    let mut updated = None;
    if row.same_status {
        let statement = if with_version {
            sql::COMMIT_RUN_SAME_STATUS_AND_VERSION.as_str()
        } else {
            sql::COMMIT_RUN_SAME_STATUS
        };
        updated = update_run(conn, row, statement, with_version).await?;
    }
    if updated.is_none() {
        let statement = if with_version {
            sql::COMMIT_RUN_AND_VERSION.as_str()
        } else {
            sql::COMMIT_RUN.as_str()
        };
        updated = update_run(conn, row, statement, with_version).await?;
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
    if !with_version {
        // The step's entries, fenced by the compare-and-set that just applied, are written
        // before its version: their positions, and so their events, come first, as when
        // they are recorded on their own.
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
            .bind(row.body.get())
            .bind(&row.waiting_for)
            .bind(row.wake_at)
            .bind(&row.error_code)
            .bind(&row.error_message)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
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

/// The run's compare-and-set `statement` ([`sql::COMMIT_RUN`] or its variants): the row it
/// returns, `None` when it matched nothing. `with_version`: the statement list inserts the
/// version's row too, and takes its parameters.
async fn update_run(
    conn: &mut SqliteConnection,
    row: &CommitRow,
    statement: &'static str,
    with_version: bool,
) -> Result<Option<SqliteRow>, StoreError> {
    let update = sqlx::query(statement)
        .bind(&row.run_id)
        .bind(row.version)
        .bind(&row.to_state)
        .bind(row.snapshot().map(serde_json::value::RawValue::get))
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
        .bind(row.spend.map(sqlx::types::Json));
    let rows = if with_version {
        // Every statement of the list runs to its end: `fetch_all`, not `fetch_optional`.
        update
            .bind(&row.from_state)
            .bind(row.kind)
            .bind(row.payload_kind)
            .bind(row.body.get())
            .fetch_all(&mut *conn)
            .await
    } else {
        update.fetch_all(&mut *conn).await
    };
    Ok(rows.map_err(db_err)?.into_iter().next())
}
