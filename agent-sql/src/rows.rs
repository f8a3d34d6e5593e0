//! The rows the stores read, decoded with sqlx's `FromRow` derive, and their conversion to
//! the records of [`agent_core::store`].
//!
//! Integers are read as the widest type both dialects decode for the column (`integer`
//! columns of PostgreSQL as `i32`, which SQLite's `INTEGER` decodes too, range-checked);
//! JSON as [`Json`], from `jsonb` or from text. Data that does not read, or reads but is not
//! a value the store writes, is [`StoreError::Corrupt`] for the run it belongs to.

use agent_core::graph::GraphDescription;
use agent_core::store::history::{self, VersionPayload};
use agent_core::store::{
    Budget, CallStatus, ClaimReads, DaySpend, EntryKind, InspectedRun, JournalEntry,
    LabelValueCount, Labels, Millis, OperatorNote, ROW_UNREADABLE, RunFailure, RunRecord,
    RunStatus, SignalRecord, SpawnedBy, Spend, StateAtVersion, StoreError, ToolSwitch,
    TransitionKind, TransitionRecord, VersionCount, VersionSpan, WaitingFor,
};
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

pub use crate::decode::SqlRow;
use crate::heads::RunHead;
use crate::{corrupt, to_u64};

/// A run row (the columns of the stores' `run_cols`).
#[derive(Debug, FromRow)]
pub struct RunRow {
    #[sqlx(flatten)]
    shown: SalvageRow,
    /// The state at the run's latest snapshot.
    state: Json<Value>,
    creation_hash: String,
    last_hash: String,
    patch_bytes: i64,
    /// `[payload_kind, payload]` of each version after the snapshot (`NULL` or `[]`: none).
    tail: Option<Json<Value>>,
}

/// The columns of a run row a person reads, without the state and what a commit chains to:
/// what [`salvaged_run`] shows of a run whose full row does not read (most often its state).
#[derive(Debug, FromRow)]
pub struct SalvageRow {
    agent: String,
    fingerprint: String,
    state_name: String,
    version: i64,
    status: String,
    waiting_for: Option<String>,
    wake_at: Option<Millis>,
    error_code: Option<String>,
    error_message: Option<String>,
    epoch: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<Millis>,
    claims_without_progress: i32,
    parent_id: Option<String>,
    parent_version: Option<i64>,
    /// For a child run: the parent run and the version of its step that started it (both
    /// or neither).
    spawned_by: Option<String>,
    spawned_at_version: Option<i64>,
    created_at: Millis,
    updated_at: Millis,
    labels: Json<Labels>,
    cancel_requested_by: Option<String>,
    cancel_reason: Option<String>,
    /// `integer` on PostgreSQL, so read as `i32` (SQLite's `INTEGER` decodes too).
    agent_version: i32,
    migrated_at_version: Option<i64>,
    resume_base: Option<i64>,
    spend: Option<Json<Spend>>,
    budget: Option<Json<Budget>>,
}

/// How [`SalvageRow::into_record`] treats a value the store never writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// It is [`StoreError::Corrupt`].
    Strict,
    /// It is shown as a stand-in: 0 for a version or epoch out of range, quarantined for a
    /// status that is not one (a run that does not read is not runnable either).
    Lenient,
}

impl SalvageRow {
    fn into_record(self, id: String, state: Value, read: Read) -> Result<RunRecord, StoreError> {
        let number = |v: i64| match read {
            Read::Strict => to_u64(v).map_err(|e| corrupt(&id, e)),
            Read::Lenient => Ok(u64::try_from(v).unwrap_or(0)),
        };
        let status = match read {
            Read::Strict => parse_status(&id, &self.status)?,
            Read::Lenient => RunStatus::parse(&self.status).unwrap_or(RunStatus::Quarantined),
        };
        // The store writes both columns or neither: one without the other is damage (a
        // child whose wait cannot be told, or a version of no parent). Shown without it.
        let spawned_by = match (self.spawned_by, self.spawned_at_version) {
            (Some(run_id), Some(v)) => Some(SpawnedBy {
                run_id,
                version: number(v)?,
            }),
            (None, None) => None,
            (by, v) => match read {
                Read::Strict => {
                    let message = match by {
                        Some(by) => format!("child run of `{by}` without spawned_at_version"),
                        None => format!("spawned_at_version {v:?} without spawned_by"),
                    };
                    return Err(corrupt(&id, message));
                }
                Read::Lenient => None,
            },
        };
        Ok(RunRecord {
            version: number(self.version)?,
            epoch: number(self.epoch)?,
            agent: self.agent,
            fingerprint: self.fingerprint,
            state_name: self.state_name,
            state,
            status,
            waiting_for: self.waiting_for.as_deref().map(WaitingFor::parse),
            wake_at: self.wake_at,
            error: self.error_code.map(|code| RunFailure {
                code: code.into(),
                message: self.error_message.unwrap_or_default(),
            }),
            lease_owner: self.lease_owner,
            lease_expires_at: self.lease_expires_at,
            claims_without_progress: u32::try_from(self.claims_without_progress).unwrap_or(0),
            parent: self
                .parent_id
                .zip(self.parent_version.and_then(|v| u64::try_from(v).ok())),
            spawned_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            labels: self.labels.0,
            cancel_requested: note(self.cancel_requested_by, self.cancel_reason),
            agent_version: match read {
                Read::Strict => u32::try_from(self.agent_version)
                    .map_err(|e| corrupt(&id, format!("agent_version: {e}")))?,
                Read::Lenient => u32::try_from(self.agent_version).unwrap_or(0),
            },
            migrated_at_version: self.migrated_at_version.map(number).transpose()?,
            resume_base: self.resume_base.map(number).transpose()?,
            spend: self.spend.map(|s| s.0).unwrap_or_default(),
            budget: self.budget.map(|b| b.0),
            id,
        })
    }
}

/// The first column of a run row on its own, so that the rest of a row that does not read
/// is reported against its run.
#[derive(Debug, FromRow)]
pub struct IdRow {
    /// The run's id.
    pub id: String,
}

/// The agent of a run row, for listing a run whose data does not read.
#[derive(Debug, FromRow)]
pub struct AgentRow {
    /// The run's agent.
    pub agent: String,
}

/// A child run a cancel of its parent may reach
/// ([`sql::CHILDREN_TO_CANCEL`](crate::sql::CHILDREN_TO_CANCEL)).
#[derive(Debug, FromRow)]
pub struct ChildRow {
    /// The child's id.
    pub id: String,
    /// The parent's state at the version that spawned it (`None` when pruned).
    pub to_state: Option<String>,
}

/// A run's stored version and epoch ([`sql::RUN_HEAD`](crate::sql::RUN_HEAD)).
#[derive(Debug, FromRow)]
pub struct HeadRow {
    version: i64,
    epoch: i64,
}

/// A row of a run's history.
#[derive(Debug, FromRow)]
pub struct TransitionRow {
    run_id: String,
    version: i64,
    from_state: String,
    to_state: String,
    kind: String,
    status: String,
    epoch: i64,
    created_at: Millis,
    hash: String,
    note_by: Option<String>,
    note_reason: Option<String>,
}

/// A version's payload ([`sql::STATE_AT`](crate::sql::STATE_AT)).
#[derive(Debug, FromRow)]
pub struct PayloadRow {
    version: i64,
    to_state: String,
    payload_kind: String,
    payload: Json<Value>,
}

/// The aggregate of [`sql::VERSION_SPAN`](crate::sql::VERSION_SPAN).
#[derive(Debug, FromRow)]
pub struct SpanRow {
    first: Option<i64>,
    last: Option<i64>,
    n: i64,
}

/// A journal entry, its output joined from the side table when it lives there.
#[derive(Debug, FromRow)]
pub struct EntryRow {
    run_id: String,
    version: i64,
    seq: i32,
    kind: String,
    state: String,
    name: String,
    tool_kind: Option<String>,
    input_hash: String,
    input: Json<Value>,
    idempotency_key: Option<String>,
    status: String,
    output: Option<Json<Value>>,
    error_class: Option<String>,
    error_code: Option<String>,
    error_message: Option<String>,
    attempts: i32,
    duration_ms: i64,
    started_at: Millis,
    finished_at: Option<Millis>,
}

/// A signal.
#[derive(Debug, FromRow)]
pub struct SignalRow {
    id: i64,
    run_id: String,
    name: String,
    payload: Json<Value>,
    created_at: Millis,
    consumed_at_version: Option<i64>,
}

/// A registered graph.
#[derive(Debug, FromRow)]
pub struct GraphRow {
    graph: Json<Value>,
}

/// A stored schedule, its document.
#[derive(Debug, FromRow)]
pub struct ScheduleRow {
    /// The schedule as JSON.
    pub body: Json<Value>,
}

/// A rate limit's bucket, as stored.
#[derive(Debug, FromRow)]
pub struct LimitRow {
    /// The limit's name.
    pub name: String,
    /// Units per millisecond.
    pub rate: f64,
    /// The most it holds.
    pub burst: f64,
    /// What it held at `at`.
    pub level: f64,
    /// When `level` was computed (milliseconds).
    pub at: i64,
}

/// Whether a tool is switched on.
#[derive(Debug, FromRow)]
pub struct EnabledRow {
    enabled: bool,
}

/// A status and its number of runs (`count_runs`).
#[derive(Debug, FromRow)]
pub struct CountRow {
    status: String,
    n: i64,
}

/// An agent, a day, its number of runs and their spend summed (`spend_by_day`).
#[derive(Debug, FromRow)]
pub struct SpendRow {
    agent: String,
    day: i64,
    n: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micros: i64,
    asks: i64,
    tool_calls: i64,
}

/// An agent version, a graph fingerprint and their number of runs (`count_versions`).
#[derive(Debug, FromRow)]
pub struct VersionCountRow {
    agent_version: i32,
    fingerprint: String,
    n: i64,
}

/// A label's value, its number of runs and the newest one's creation (`count_label_values`).
#[derive(Debug, FromRow)]
pub struct LabelCountRow {
    value: String,
    n: i64,
    last_created_at: i64,
}

/// A prune candidate's first kept version.
#[derive(Debug, FromRow)]
pub struct CutoffRow {
    cutoff: i64,
}

/// A tool switch.
#[derive(Debug, FromRow)]
pub struct SwitchRow {
    tool: String,
    enabled: bool,
    reason: Option<String>,
    updated_at: Millis,
}

/// What a commit that applied changed beyond the commit itself (the stores' commit
/// statements return these columns).
#[derive(Debug, Clone, FromRow)]
pub struct Applied {
    /// The lease holder after the commit (`None` when it ended the lease).
    pub lease_owner: Option<String>,
    /// When the lease expires after the commit.
    pub lease_expires_at: Option<Millis>,
    /// The commit time.
    pub updated_at: Millis,
}

/// A run as stored: its record with what its next commit chains to, and the hash of what
/// it was created from.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// The record and its chain head.
    pub head: RunHead,
    /// The hash of the run's creation request (an idempotent create compares it).
    pub creation_hash: String,
}

/// Read a run row.
///
/// # Errors
/// [`StoreError::Corrupt`] for a row that does not read (its run id `?` when the id itself
/// does not).
pub fn stored_run(row: &impl SqlRow) -> Result<StoredRun, StoreError> {
    let id = row
        .id()
        .map_err(|e| corrupt("?", format!("unreadable run id: {e}")))?;
    let c = |e: sqlx::Error| corrupt(&id, e);
    let RunRow {
        shown: r,
        state,
        creation_hash,
        last_hash,
        patch_bytes,
        tail,
    } = row.run_row().map_err(c)?;
    let state = current_state(&id, state.0, tail.map(|t| t.0))?;
    let record = r.into_record(id.clone(), state, Read::Strict)?;
    Ok(StoredRun {
        head: RunHead {
            record,
            last_hash,
            patch_bytes: to_u64(patch_bytes).map_err(c)?,
        },
        creation_hash,
    })
}

/// Read a row of a run listing: a run whose data does not read is listed as far as it reads
/// ([`salvaged_run`], with the error `row.unreadable`) rather than failing the listing; it
/// has no head.
///
/// # Errors
/// Only for an error other than [`StoreError::Corrupt`] (none today).
pub fn listed_run(row: &impl SqlRow) -> Result<(RunRecord, Option<RunHead>), StoreError> {
    match inspected_run(row)? {
        (inspected, Some(head)) => Ok((inspected.record, Some(head))),
        (inspected, None) => {
            let mut record = inspected.record;
            record.error = Some(RunFailure {
                code: ROW_UNREADABLE.into(),
                message: inspected.unreadable.unwrap_or_default(),
            });
            Ok((record, None))
        }
    }
}

/// Read a run row for a person diagnosing it ([`HistoryStore::inspect_run`]): the whole record and
/// its head when it reads, else what of it reads and why the rest does not.
///
/// # Errors
/// Only for an error other than [`StoreError::Corrupt`] (none today).
///
/// [`HistoryStore::inspect_run`]: agent_core::store::HistoryStore::inspect_run
pub fn inspected_run(row: &impl SqlRow) -> Result<(InspectedRun, Option<RunHead>), StoreError> {
    match stored_run(row) {
        Ok(stored) => Ok((
            InspectedRun {
                record: stored.head.record.clone(),
                unreadable: None,
            },
            Some(stored.head),
        )),
        Err(StoreError::Corrupt { run_id, message }) => Ok((
            InspectedRun {
                record: salvaged_run(row, run_id, &message),
                unreadable: Some(message),
            },
            None,
        )),
        Err(e) => Err(e),
    }
}

/// What reads of a run row whose full record does not: every column but the state as
/// stored (the state `Null`), or, when even those do not read, a stand-in with the id and
/// agent ([`RunRecord::unreadable`]). Nothing may execute from it; it is for listings and
/// for diagnosing the run.
#[must_use]
pub fn salvaged_run(row: &impl SqlRow, run_id: String, message: &str) -> RunRecord {
    let Ok(r) = row.salvage_row() else {
        return RunRecord::unreadable(run_id, row.agent().unwrap_or_default(), message.to_owned());
    };
    // Infallible when lenient: every value that does not fit has a stand-in.
    r.into_record(run_id.clone(), Value::Null, Read::Lenient)
        .unwrap_or_else(|_| RunRecord::unreadable(run_id, String::new(), message.to_owned()))
}

/// The current state of a run row: the state at its snapshot plus the later payloads.
fn current_state(run_id: &str, base: Value, tail: Option<Value>) -> Result<Value, StoreError> {
    let Some(Value::Array(tail)) = tail else {
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

/// A stored run status.
///
/// # Errors
/// [`StoreError::Corrupt`] for a name that is not a status.
pub fn parse_status(run_id: &str, s: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(s).ok_or_else(|| corrupt(run_id, format!("unknown run status `{s}`")))
}

/// The rows of `count_runs` (a status and its number of runs each), in [`RunStatus::ALL`]'s
/// order, statuses without runs left out.
///
/// # Errors
/// [`StoreError::Corrupt`] for a name that is not a status or a count that does not read.
pub fn status_counts(rows: &[impl SqlRow]) -> Result<Vec<(RunStatus, u64)>, StoreError> {
    let mut counts = rows
        .iter()
        .map(|row| {
            let c = |e: sqlx::Error| corrupt("(count)", e);
            let r = row.count_row().map_err(c)?;
            Ok((parse_status("(count)", &r.status)?, to_u64(r.n).map_err(c)?))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    counts.retain(|(_, n)| *n > 0);
    counts.sort_by_key(|(s, _)| RunStatus::ALL.iter().position(|a| a == s));
    Ok(counts)
}

/// The rows of `count_versions` (an agent version, a fingerprint and their number of runs
/// each), in the statement's order.
///
/// # Errors
/// [`StoreError::Corrupt`] for a version or a count that does not read.
pub fn version_counts(rows: &[impl SqlRow]) -> Result<Vec<VersionCount>, StoreError> {
    rows.iter()
        .map(|row| {
            let c = |e: sqlx::Error| corrupt("(count)", e);
            let r = row.version_count_row().map_err(c)?;
            Ok(VersionCount {
                agent_version: u32::try_from(r.agent_version)
                    .map_err(|e| corrupt("(count)", format!("agent_version: {e}")))?,
                fingerprint: r.fingerprint,
                runs: to_u64(r.n).map_err(c)?,
            })
        })
        .collect()
}

/// The rows of `spend_by_day`, as read.
///
/// # Errors
/// [`StoreError::Corrupt`] for a row that does not read, or a negative sum.
pub fn day_spends(rows: &[impl SqlRow]) -> Result<Vec<DaySpend>, StoreError> {
    rows.iter()
        .map(|row| {
            let c = |e: sqlx::Error| corrupt("(spend)", e);
            let r = row.spend_row().map_err(c)?;
            Ok(DaySpend {
                agent: r.agent,
                day: r.day,
                runs: to_u64(r.n).map_err(c)?,
                spend: Spend {
                    input_tokens: to_u64(r.input_tokens).map_err(c)?,
                    output_tokens: to_u64(r.output_tokens).map_err(c)?,
                    cost_micros: to_u64(r.cost_micros).map_err(c)?,
                    asks: to_u64(r.asks).map_err(c)?,
                    tool_calls: to_u64(r.tool_calls).map_err(c)?,
                },
            })
        })
        .collect()
}

/// The rows of `count_label_values`, as read.
///
/// # Errors
/// [`StoreError::Corrupt`] for a row that does not read.
pub fn label_value_counts(rows: &[impl SqlRow]) -> Result<Vec<LabelValueCount>, StoreError> {
    rows.iter()
        .map(|row| {
            let c = |e: sqlx::Error| corrupt("(count)", e);
            let r = row.label_count_row().map_err(c)?;
            Ok(LabelValueCount {
                value: r.value,
                runs: to_u64(r.n).map_err(c)?,
                last_created_at: r.last_created_at,
            })
        })
        .collect()
}

/// Parse a stored enum name through serde (for enums without a `parse`).
///
/// # Errors
/// [`StoreError::Corrupt`] for a name that is not one.
pub fn parse_serde<T: serde::de::DeserializeOwned>(
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

/// Read a run's stored `(version, epoch)`.
///
/// # Errors
/// [`StoreError::Corrupt`] when they do not read.
pub fn head(run_id: &str, row: &impl SqlRow) -> Result<(u64, u64), StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let h = row.head_row().map_err(c)?;
    Ok((to_u64(h.version).map_err(c)?, to_u64(h.epoch).map_err(c)?))
}

/// Read a row of a run's history.
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
pub fn transition(run_id: &str, row: &impl SqlRow) -> Result<TransitionRecord, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let r = row.transition_row().map_err(c)?;
    Ok(TransitionRecord {
        run_id: r.run_id,
        version: to_u64(r.version).map_err(c)?,
        from_state: r.from_state,
        to_state: r.to_state,
        kind: TransitionKind::parse(&r.kind)
            .ok_or_else(|| corrupt(run_id, format!("unknown transition kind `{}`", r.kind)))?,
        status: parse_status(run_id, &r.status)?,
        epoch: to_u64(r.epoch).map_err(c)?,
        created_at: r.created_at,
        hash: r.hash,
        note: note(r.note_by, r.note_reason),
    })
}

/// An operator's note from its two columns (`by` set: there is one).
fn note(by: Option<String>, reason: Option<String>) -> Option<OperatorNote> {
    by.map(|by| OperatorNote {
        by,
        reason: reason.unwrap_or_default(),
    })
}

/// Replay the payload rows of [`sql::STATE_AT`](crate::sql::STATE_AT) (from a snapshot up
/// to `version`, in order). `None` when the last row is not `version` (a later one is asked
/// for than is stored).
///
/// # Errors
/// [`StoreError::Corrupt`] when a row does not read or the payloads do not replay.
pub fn replay<R: SqlRow>(
    run_id: &str,
    version: u64,
    rows: &[R],
) -> Result<Option<StateAtVersion>, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let Some(last) = rows.last() else {
        return Ok(None);
    };
    let last = last.payload_row().map_err(c)?;
    if to_u64(last.version).map_err(c)? != version {
        return Ok(None);
    }
    let mut payloads = Vec::with_capacity(rows.len());
    for row in &rows[..rows.len() - 1] {
        payloads.push(payload(run_id, row.payload_row().map_err(c)?)?);
    }
    let state_name = last.to_state.clone();
    payloads.push(payload(run_id, last)?);
    let state = history::replay(&payloads).map_err(|e| corrupt(run_id, e))?;
    Ok(Some(StateAtVersion {
        version,
        state_name,
        state,
    }))
}

fn payload(run_id: &str, row: PayloadRow) -> Result<VersionPayload, StoreError> {
    match row.payload_kind.as_str() {
        "snapshot" => Ok(VersionPayload::Snapshot(row.payload.0)),
        "patch" => Ok(VersionPayload::Patch(row.payload.0)),
        other => Err(corrupt(run_id, format!("unknown payload kind `{other}`"))),
    }
}

/// Read the aggregate of [`sql::VERSION_SPAN`](crate::sql::VERSION_SPAN).
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
pub fn version_span(run_id: &str, row: &impl SqlRow) -> Result<Option<VersionSpan>, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let r = row.span_row().map_err(c)?;
    if r.n == 0 {
        return Ok(None);
    }
    let bound = |v: Option<i64>| to_u64(v.unwrap_or_default()).map_err(c);
    Ok(Some(VersionSpan {
        first: bound(r.first)?,
        last: bound(r.last)?,
        count: u64::try_from(r.n).unwrap_or(0),
    }))
}

/// What a claim read besides the run (`RunStore::claim_next`), from the columns both
/// stores' claim reads select: the version span as `[first, last, count]`, whether the
/// journal has an entry at the run's version, and the pending signals of a waiting run as
/// `[[id, name, payload, created_at], ...]` (`None`: not read, the run does not wait).
///
/// # Errors
/// [`StoreError::Corrupt`] when they do not read.
pub fn claim_reads(
    run_id: &str,
    span: &[Option<i64>],
    journaled_at_version: bool,
    pending: Option<Value>,
) -> Result<ClaimReads, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let span = match span {
        [_, _, Some(0)] => None,
        [Some(first), Some(last), Some(count)] => Some(VersionSpan {
            first: to_u64(*first).map_err(c)?,
            last: to_u64(*last).map_err(c)?,
            count: to_u64(*count).map_err(c)?,
        }),
        other => return Err(corrupt(run_id, format!("version span {other:?}"))),
    };
    let pending_signals = pending
        .map(|p| {
            let listed: Vec<(i64, String, Value, Millis)> =
                serde_json::from_value(p).map_err(|e| corrupt(run_id, e))?;
            Ok::<_, StoreError>(
                listed
                    .into_iter()
                    .map(|(id, name, payload, created_at)| SignalRecord {
                        id,
                        run_id: run_id.to_owned(),
                        name,
                        payload,
                        created_at,
                        consumed_at_version: None,
                    })
                    .collect(),
            )
        })
        .transpose()?;
    Ok(ClaimReads {
        span,
        journaled_at_version,
        pending_signals,
    })
}

/// Read a journal row.
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
pub fn entry(run_id: &str, row: &impl SqlRow) -> Result<JournalEntry, StoreError> {
    let c = |e: sqlx::Error| corrupt(run_id, e);
    let r = row.entry_row().map_err(c)?;
    Ok(JournalEntry {
        run_id: r.run_id,
        version: to_u64(r.version).map_err(c)?,
        seq: u32::try_from(r.seq).map_err(|e| corrupt(run_id, e))?,
        kind: EntryKind::parse(&r.kind)
            .ok_or_else(|| corrupt(run_id, format!("unknown entry kind `{}`", r.kind)))?,
        state: r.state,
        name: r.name,
        tool_kind: parse_serde(run_id, "tool kind", r.tool_kind)?,
        input_hash: r.input_hash,
        input: r.input.0,
        idempotency_key: r.idempotency_key,
        status: CallStatus::parse(&r.status)
            .ok_or_else(|| corrupt(run_id, format!("unknown call status `{}`", r.status)))?,
        output: r.output.map(|o| o.0),
        error_class: parse_serde(run_id, "error class", r.error_class)?,
        error_code: r.error_code,
        error_message: r.error_message,
        attempts: u32::try_from(r.attempts).unwrap_or(0),
        duration_ms: to_u64(r.duration_ms).map_err(c)?,
        started_at: r.started_at,
        finished_at: r.finished_at,
    })
}

/// Read a signal row.
///
/// # Errors
/// [`StoreError::Corrupt`] when it does not read.
pub fn signal(run_id: &str, row: &impl SqlRow) -> Result<SignalRecord, StoreError> {
    let r = row.signal_row().map_err(|e| corrupt(run_id, e))?;
    Ok(SignalRecord {
        id: r.id,
        run_id: r.run_id,
        name: r.name,
        payload: r.payload.0,
        created_at: r.created_at,
        consumed_at_version: r.consumed_at_version.and_then(|v| u64::try_from(v).ok()),
    })
}

/// Read a tool switch row.
///
/// # Errors
/// [`StoreError::Backend`] when it does not read (a switch belongs to no run).
pub fn tool_switch(row: &impl SqlRow) -> Result<ToolSwitch, StoreError> {
    let r = row
        .switch_row()
        .map_err(|e| StoreError::backend(e.to_string()))?;
    Ok(ToolSwitch {
        tool: r.tool,
        enabled: r.enabled,
        reason: r.reason,
        updated_at: r.updated_at,
    })
}

/// A version that is stored without a snapshot at or before it to replay from.
#[must_use]
pub fn corrupt_history(run_id: &str, version: u64) -> StoreError {
    corrupt(
        run_id,
        format!("no snapshot at or before version {version}"),
    )
}

/// Read a registered graph of `agent`.
///
/// # Errors
/// [`StoreError::Corrupt`] (against the agent) when it does not read or is not a graph.
pub fn graph(agent: &str, row: &impl SqlRow) -> Result<GraphDescription, StoreError> {
    let r = row.graph_row().map_err(|e| corrupt(agent, e))?;
    serde_json::from_value(r.graph.0).map_err(|e| corrupt(agent, format!("stored graph: {e}")))
}

/// Read whether a tool is switched on.
///
/// # Errors
/// [`StoreError::Backend`] when it does not read.
pub fn enabled(row: &impl SqlRow) -> Result<bool, StoreError> {
    row.enabled_row()
        .map(|r| r.enabled)
        .map_err(|e| StoreError::backend(e.to_string()))
}

/// Read a prune candidate's first kept version.
///
/// # Errors
/// The driver's decode error.
pub fn cutoff(row: &impl SqlRow) -> sqlx::Result<i64> {
    row.cutoff_row().map(|r| r.cutoff)
}
