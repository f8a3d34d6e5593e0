//! The writes of a step, the same rows on both stores: a commit, a journal entry, a
//! signal, each with its statements' parameters owned (the group commit may write it in
//! another task than its caller's), built here once from the records of
//! [`agent_core::store`] and bound by each dialect's writer.
//!
//! JSON travels as text ([`RawValue`]), serialized once when the row is built: both
//! dialects bind it as it is (`jsonb` on PostgreSQL, text on SQLite), and a row waiting in
//! the group commit's queue holds a string, not a tree of values (W4 in `BENCHMARKS.md`).

use agent_core::store::history::VersionPayload;
use agent_core::store::{JournalEntry, Lease, Millis, Spend, StepCommit, StoreError};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::commit::{CommitPlan, check_entry, commit_head};
use crate::heads::HeadCache;
use crate::reads::{SqlReads, commit_refused};
use crate::rows::Applied;
use crate::write_queue::{BatchWriter, Queued, WriteQueue};
use crate::{LARGE_OUTPUT_BYTES, serde_name, summary, to_i64};

/// `value` as JSON text.
#[must_use]
pub fn json_text(value: &Value) -> Box<RawValue> {
    // A `Value` always serializes (its map keys are strings): the default (`null`) is
    // unreachable.
    serde_json::value::to_raw_value(value).unwrap_or_default()
}

/// The parameters of one step commit.
#[derive(Debug)]
pub struct CommitRow {
    /// The run.
    pub run_id: String,
    /// The lease's epoch (fence).
    pub epoch: i64,
    /// The version the run must be at (compare-and-set).
    pub expected: i64,
    /// The version written (`expected + 1`).
    pub version: i64,
    /// The state the step left.
    pub from_state: String,
    /// The state the run is in after it.
    pub to_state: String,
    /// The run's status after it.
    pub status: &'static str,
    /// The commit keeps the run's (non-final) status as the head it was planned on had
    /// it: a store may try a statement that leaves the status and lease columns alone.
    pub same_status: bool,
    /// What the run waits for ([`RunRecord::waiting_for`](agent_core::store::RunRecord::waiting_for)).
    pub waiting_for: Option<String>,
    /// When a waiting run is due.
    pub wake_at: Option<Millis>,
    /// The failure's code, for a failed run.
    pub error_code: Option<String>,
    /// The failure's message, for a failed run.
    pub error_message: Option<String>,
    /// The transition's chained hash.
    pub hash: String,
    /// Bytes of patches since the last snapshot, this version's included.
    pub patch_bytes: i64,
    /// The transition's kind.
    pub kind: &'static str,
    /// `"snapshot"` or `"patch"`.
    pub payload_kind: &'static str,
    /// The version's payload: the whole state for a snapshot (the run row keeps it too),
    /// else the JSON Patch from the previous version.
    pub body: Box<RawValue>,
    /// The signal this step consumes: it must still be pending (part of the
    /// compare-and-set), and is marked consumed at the new version with the commit.
    pub signal: Option<i64>,
    /// The run's spend through the step, `None` to keep the stored one.
    pub spend: Option<Spend>,
    /// When the commit was planned (the SQLite store's clock; PostgreSQL uses its own).
    pub now: Millis,
    /// Journal entries of the step not recorded yet: written with the commit, and only
    /// if it applies.
    pub entries: Vec<EntryRow>,
}

impl CommitRow {
    /// The row of `commit` under `lease`, as `plan` planned it with `payload`, carrying
    /// `entries`.
    #[must_use]
    pub fn new(
        lease: &Lease,
        commit: &StepCommit,
        plan: &CommitPlan,
        payload: &VersionPayload,
        now: Millis,
        entries: Vec<EntryRow>,
    ) -> Self {
        let (payload_kind, body) = match payload {
            VersionPayload::Snapshot(v) => ("snapshot", json_text(v)),
            VersionPayload::Patch(v) => ("patch", json_text(v)),
        };
        Self {
            run_id: lease.run_id.clone(),
            epoch: to_i64(lease.epoch),
            expected: to_i64(commit.expected_version),
            version: to_i64(plan.version),
            from_state: commit.from_state.clone(),
            to_state: commit.to_state.clone(),
            status: commit.status.as_str(),
            same_status: commit.status == plan.base().status && !commit.status.is_final(),
            waiting_for: commit.waiting_for.as_ref().map(ToString::to_string),
            wake_at: commit.wake_at,
            error_code: commit.error.as_ref().map(|e| e.code.as_str().to_owned()),
            error_message: commit.error.as_ref().map(|e| e.message.clone()),
            hash: plan.hash.clone(),
            patch_bytes: to_i64(plan.patch_bytes),
            kind: commit.kind.as_str(),
            payload_kind,
            body,
            signal: commit.consumed_signal,
            spend: commit.spend,
            now,
            entries,
        }
    }

    /// The whole state, when this version is a snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Option<&RawValue> {
        (self.payload_kind == "snapshot").then_some(&*self.body)
    }

    /// The JSON Patch from the previous version, when this version is not a snapshot.
    #[must_use]
    pub fn patch(&self) -> Option<&RawValue> {
        (self.payload_kind == "patch").then_some(&*self.body)
    }
}

/// The parameters of one journal entry.
#[derive(Debug)]
pub struct EntryRow {
    /// The run.
    pub run_id: String,
    /// The lease's epoch (fence).
    pub epoch: i64,
    /// The version whose step made the call.
    pub version: i64,
    /// Its place in the step.
    pub seq: i32,
    /// Tool call, decision, child run…
    pub kind: &'static str,
    /// The state whose step made it.
    pub state: String,
    /// The tool's (or router's, or child agent's) name.
    pub name: String,
    /// The tool's kind, for a tool call.
    pub tool_kind: Option<&'static str>,
    /// The input's hash.
    pub input_hash: String,
    /// The input.
    pub input: Box<RawValue>,
    /// The write's idempotency key.
    pub idempotency_key: Option<String>,
    /// The call's status.
    pub status: &'static str,
    /// The output.
    pub output: Option<Box<RawValue>>,
    /// The output is larger than [`LARGE_OUTPUT_BYTES`]: it goes to the side table, the
    /// journal row keeps its summary.
    pub external: bool,
    /// The output's first characters.
    pub output_summary: Option<String>,
    /// The output's size in bytes.
    pub output_bytes: Option<i32>,
    /// The error's class, for a failed call.
    pub error_class: Option<String>,
    /// The error's code.
    pub error_code: Option<String>,
    /// The error's message.
    pub error_message: Option<String>,
    /// Attempts made.
    pub attempts: i32,
    /// Time spent.
    pub duration_ms: i64,
    /// When it started.
    pub started_at: Millis,
    /// When it finished.
    pub finished_at: Option<Millis>,
}

impl EntryRow {
    /// The row of `entry`, recorded under `lease`.
    #[must_use]
    pub fn new(lease: &Lease, entry: &JournalEntry) -> Self {
        let output = entry.output.as_ref().map(json_text);
        let output_len = output.as_ref().map(|o| o.get().len());
        Self {
            run_id: lease.run_id.clone(),
            epoch: to_i64(lease.epoch),
            version: to_i64(entry.version),
            seq: i32::try_from(entry.seq).unwrap_or(i32::MAX),
            kind: entry.kind.as_str(),
            state: entry.state.clone(),
            name: entry.name.clone(),
            tool_kind: entry.tool_kind.map(agent_core::ToolKind::as_str),
            input_hash: entry.input_hash.clone(),
            input: json_text(&entry.input),
            idempotency_key: entry.idempotency_key.clone(),
            status: entry.status.as_str(),
            external: output_len.is_some_and(|n| n > LARGE_OUTPUT_BYTES),
            output_summary: output.as_ref().map(|o| summary(o.get())),
            output_bytes: output_len.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            output,
            error_class: entry.error_class.as_ref().and_then(serde_name),
            error_code: entry.error_code.clone(),
            error_message: entry.error_message.clone(),
            attempts: i32::try_from(entry.attempts).unwrap_or(i32::MAX),
            duration_ms: to_i64(entry.duration_ms),
            started_at: entry.started_at,
            finished_at: entry.finished_at,
        }
    }

    /// The output, when the journal row keeps it inline.
    #[must_use]
    pub fn inline_output(&self) -> Option<&RawValue> {
        self.output.as_deref().filter(|_| !self.external)
    }
}

/// The parameters of one signal.
#[derive(Debug)]
pub struct SignalRow {
    /// The run it is sent to.
    pub run_id: String,
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Box<RawValue>,
    /// When it was sent (the SQLite store's clock; PostgreSQL uses its own).
    pub created_at: Millis,
}

impl SignalRow {
    /// The row of a signal `name` with `payload` sent to `run_id` at `now`.
    #[must_use]
    pub fn new(run_id: &str, name: &str, payload: &Value, now: Millis) -> Self {
        Self {
            run_id: run_id.to_owned(),
            name: name.to_owned(),
            payload: json_text(payload),
            created_at: now,
        }
    }
}

/// One write the group commit carries.
// Short-lived, moved once into the queue: boxing the rows would cost more.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Write {
    /// A step commit.
    Commit(CommitRow),
    /// A journal entry.
    Entry(EntryRow),
    /// A signal.
    Signal(SignalRow),
}

impl Write {
    /// The run it writes to.
    #[must_use]
    pub fn run_id(&self) -> &str {
        match self {
            Self::Commit(row) => &row.run_id,
            Self::Entry(row) => &row.run_id,
            Self::Signal(row) => &row.run_id,
        }
    }
}

/// What a write did.
#[derive(Debug)]
pub enum Written {
    /// A commit's outcome: `None` when its compare-and-set (or its signal's check, or one
    /// of its entries' fences) matched nothing, and nothing was written.
    Commit(Option<Applied>),
    /// Whether an entry was written (`false`: its epoch is not the run's, or the run is
    /// gone; nothing was written).
    Entry(bool),
    /// A signal's id (`None`: the run does not exist, and nothing was written).
    Signal(Option<i64>),
}

/// A commit's outcome: `Ok(None)` when its compare-and-set matched no row; the caller
/// finds out why ([`refused`]).
pub type Outcome = Result<Option<Applied>, StoreError>;

/// A store's group commit: its [`WriteQueue`] over the store's writer of these rows, and
/// the three kinds of write a step makes. Each goes to the database at once, in its
/// caller's task, when a slot is free and nobody waits, else with the next batch; each
/// returns once what carried it is committed.
pub struct GroupCommit<B: BatchWriter<Write = Write, Written = Written>> {
    queue: Arc<WriteQueue<B>>,
}

impl<B: BatchWriter<Write = Write, Written = Written>> std::fmt::Debug for GroupCommit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("queue", &self.queue)
            .finish()
    }
}

impl<B: BatchWriter<Write = Write, Written = Written>> GroupCommit<B> {
    /// A group commit writing with `writer`, `slots` writes or batches at once, batches of
    /// at most `max_batch` writes.
    pub fn new(writer: B, slots: usize, max_batch: usize) -> Self {
        Self {
            queue: Arc::new(WriteQueue::new(writer, slots, max_batch)),
        }
    }

    /// Its queue (for its figures).
    #[must_use]
    pub fn queue(&self) -> &WriteQueue<B> {
        &self.queue
    }

    /// Commit `row`.
    pub fn commit(&self, row: CommitRow) -> impl Future<Output = Outcome> + Send + '_ {
        // Queued (or sent) now, not at the first poll: the future keeps the write's
        // handle, not a copy of the row (`WriteQueue::write`).
        self.queue
            .write_then(Write::Commit(row), "a commit", |written| match written {
                Written::Commit(applied) => Some(applied),
                _ => None,
            })
    }

    /// Write a journal entry, fenced by its lease's epoch. `Ok(false)`: the epoch is not
    /// the run's (or the run is gone) and nothing was written (a writer may say why with
    /// an error instead).
    pub fn record(
        &self,
        row: EntryRow,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send + '_ {
        self.queue.write_then(
            Write::Entry(row),
            "a journal entry",
            |written| match written {
                Written::Entry(written) => Some(written),
                _ => None,
            },
        )
    }

    /// Store a signal (many senders at once then share a statement or a transaction). Its
    /// id, once it is committed; `Ok(None)`: the run does not exist.
    pub fn signal(
        &self,
        row: SignalRow,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send + '_ {
        self.queue
            .write_then(Write::Signal(row), "a signal", |written| match written {
                Written::Signal(id) => Some(id),
                _ => None,
            })
    }
}

/// Up to `max` queued writes, oldest first, at most one per run, for a writer whose batch
/// cannot hold two writes of a run (one grouped statement per kind); callers that stopped
/// waiting are dropped unsent, and second writes of a run keep their place at the front.
pub fn one_write_per_run<B: BatchWriter<Write = Write>>(
    waiting: &mut VecDeque<Queued<B>>,
    max: usize,
) -> Vec<Queued<B>> {
    let mut batch = Vec::new();
    let mut runs = HashSet::new();
    let mut later = VecDeque::new();
    while batch.len() < max {
        let Some(next) = waiting.pop_front() else {
            break;
        };
        if next.abandoned() {
            continue;
        }
        if runs.insert(next.write.run_id().to_owned()) {
            batch.push(next);
        } else {
            later.push_back(next);
        }
    }
    while let Some(q) = later.pop_back() {
        waiting.push_front(q);
    }
    batch
}

/// Plan `commit` under `lease` from the run's head (remembered in `heads`, else read from
/// `store`), carrying `entries` (built by [`entry_rows`], which checked them): what the run
/// is after the commit applies, and the row the store writes.
///
/// # Errors
/// What [`commit_head`] says when the run is gone, its row does not read, or its stored
/// version or epoch refuses the commit already.
pub async fn plan_commit<S: SqlReads>(
    store: &S,
    heads: &HeadCache,
    lease: &Lease,
    commit: &StepCommit,
    entries: Vec<EntryRow>,
    now: Millis,
) -> Result<(CommitPlan, CommitRow), StoreError> {
    let head = commit_head(store, heads, lease, commit.expected_version).await?;
    let (plan, payload) = CommitPlan::new(head, lease, commit);
    let row = CommitRow::new(lease, commit, &plan, &payload, now, entries);
    Ok((plan, row))
}

/// The entries' rows, each checked to be the lease's run's.
///
/// # Errors
/// [`check_entry`]'s error for an entry of another run.
pub fn entry_rows(lease: &Lease, entries: &[JournalEntry]) -> Result<Vec<EntryRow>, StoreError> {
    entries
        .iter()
        .map(|entry| {
            check_entry(lease, entry)?;
            Ok(EntryRow::new(lease, entry))
        })
        .collect()
}

/// Why the commit of `commit` under `lease` wrote nothing (its statement matched no row):
/// from the run as stored now, or its consumed signal that is no longer pending.
pub async fn refused<S: SqlReads>(store: &S, lease: &Lease, commit: &StepCommit) -> StoreError {
    let run_id = lease.run_id.as_str();
    Box::pin(commit_refused(
        store,
        lease,
        commit.expected_version,
        || match commit.consumed_signal {
            Some(signal) => {
                StoreError::backend(format!("signal {signal} is not pending for run `{run_id}`"))
            }
            None => StoreError::backend(format!("run `{run_id}` refused a commit it matches")),
        },
    ))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_travels_as_the_text_serde_writes() {
        let v = serde_json::json!({"b": [1, 2.5, "x"], "a": null});
        assert_eq!(json_text(&v).get(), v.to_string());
    }
}
