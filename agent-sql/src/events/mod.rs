//! `EventLog::events` on both SQL stores: the records positioned at or after a cursor, read in
//! one statement of the store's dialect ([`SqlReads::run_events_sql`],
//! [`SqlReads::scope_events_sql`]), turned into events by [`EventBuilder`].
//!
//! The statement has one arm per kind of record (transitions, calls started, calls
//! finished, signals, status changes), each ordered by position and cut at one row more
//! than the limit (an arm may return the record at the cursor again). An arm that was cut
//! may have more records after its last one, so events are returned up to the lowest last
//! position among the cut arms: everything up to there is complete.

use std::collections::HashMap;

use agent_core::store::{
    CallStatus, EntryKind, EventBuilder, EventCursor, EventScope, JournalEntry, OperatorNote,
    RunEvent, RunFailure, SignalRecord, StatusChange, StoreError, TransitionFacts, TransitionKind,
    TransitionRecord, WaitingFor,
};
use serde_json::Value;

pub use row::EventRow;

use crate::reads::{Arg, SqlReads};
use crate::rows::{SqlRow, parse_serde, parse_status};
use crate::{corrupt, to_i64, to_u64};

mod row;

/// `EventLog::events`.
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] for a record that
/// does not read.
pub async fn events<S: SqlReads>(
    store: &S,
    scope: &EventScope,
    after: EventCursor,
    limit: usize,
) -> Result<Vec<RunEvent>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let from = to_i64(after.position());
    // One row more than asked per arm: an arm may return the record at `after` again.
    let cap = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
    let rows = match scope {
        EventScope::Run(run_id) => {
            store
                .fetch_events(
                    S::run_events_sql(),
                    &[Arg::Text(run_id), Arg::Int(from), Arg::Int(cap)],
                )
                .await?
        }
        EventScope::Agent(agent) => {
            store
                .fetch_events(
                    S::scope_events_sql(),
                    &[Arg::OptText(Some(agent)), Arg::Int(from), Arg::Int(cap)],
                )
                .await?
        }
        EventScope::All => {
            store
                .fetch_events(
                    S::scope_events_sql(),
                    &[Arg::OptText(None), Arg::Int(from), Arg::Int(cap)],
                )
                .await?
        }
    };
    if let EventScope::Run(run_id) = scope
        && rows.is_empty()
        && crate::reads::head_of(store, run_id).await?.is_none()
    {
        return Err(StoreError::NotFound(run_id.clone()));
    }
    let mut log = EventBuilder::new();
    // Per arm: how many rows, and the last position.
    let mut arms: HashMap<String, (usize, u64)> = HashMap::new();
    for row in &rows {
        let r = row.event_row().map_err(|e| corrupt("?", e))?;
        let position = to_u64(r.position).map_err(|e| corrupt(&r.run_id, e))?;
        let arm = arms.entry(r.source.clone()).or_default();
        arm.0 += 1;
        arm.1 = arm.1.max(position);
        add(&mut log, r, position)?;
    }
    let horizon = arms
        .values()
        .filter(|(n, _)| *n > limit)
        .map(|(_, last)| *last)
        .min();
    let mut events = log.finish(after, usize::MAX);
    if let Some(horizon) = horizon {
        events.retain(|e| e.cursor.position() <= horizon);
    }
    events.truncate(limit);
    Ok(events)
}

fn add(log: &mut EventBuilder, r: EventRow, position: u64) -> Result<(), StoreError> {
    let id = r.run_id.clone();
    let c = |e: sqlx::Error| corrupt(&id, e);
    let missing = |what: &str| corrupt(&id, format!("event record without its {what}"));
    let version = r
        .version
        .map(to_u64)
        .transpose()
        .map_err(c)?
        .unwrap_or_default();
    let error = r.error_code.clone().map(|code| RunFailure {
        code: code.into(),
        message: r.error_message.clone().unwrap_or_default(),
    });
    match r.source.as_str() {
        "transition" => {
            let kind = r.kind.as_deref().ok_or_else(|| missing("kind"))?;
            let t = TransitionRecord {
                run_id: r.run_id.clone(),
                version,
                from_state: r.from_state.unwrap_or_default(),
                to_state: r.to_state.unwrap_or_default(),
                kind: TransitionKind::parse(kind)
                    .ok_or_else(|| corrupt(&id, format!("unknown transition kind `{kind}`")))?,
                status: parse_status(&id, r.status.as_deref().unwrap_or_default())?,
                epoch: 0,
                created_at: r.at,
                hash: String::new(),
                note: r.note_by.map(|by| OperatorNote {
                    by,
                    reason: r.note_reason.unwrap_or_default(),
                }),
            };
            let facts = TransitionFacts {
                waiting_for: r.waiting_for.as_deref().map(WaitingFor::parse),
                wake_at: r.wake_at,
                error,
                consumed_signal: r.signal_id.map(|s| (s, r.signal_name.unwrap_or_default())),
            };
            log.transition(&r.agent, position, &t, &facts);
        }
        "started" | "finished" => {
            let kind = r.kind.as_deref().ok_or_else(|| missing("kind"))?;
            let status = r.status.as_deref().unwrap_or_default();
            let entry = JournalEntry {
                run_id: r.run_id.clone(),
                version,
                seq: r
                    .seq
                    .and_then(|s| u32::try_from(s).ok())
                    .ok_or_else(|| missing("index"))?,
                kind: EntryKind::parse(kind)
                    .ok_or_else(|| corrupt(&id, format!("unknown entry kind `{kind}`")))?,
                state: String::new(),
                name: r.name.unwrap_or_default(),
                tool_kind: parse_serde(&id, "tool kind", r.tool_kind)?,
                input_hash: String::new(),
                input: r.input.map_or(Value::Null, |j| j.0),
                idempotency_key: r.idempotency_key,
                status: CallStatus::parse(status)
                    .ok_or_else(|| corrupt(&id, format!("unknown call status `{status}`")))?,
                output: r.output.map(|j| j.0),
                error_class: parse_serde(&id, "error class", r.error_class)?,
                error_code: r.error_code,
                error_message: r.error_message,
                attempts: r.attempts.and_then(|a| u32::try_from(a).ok()).unwrap_or(0),
                duration_ms: r
                    .duration_ms
                    .map(to_u64)
                    .transpose()
                    .map_err(c)?
                    .unwrap_or(0),
                started_at: r.at,
                finished_at: r.finished_at,
            };
            if r.source == "started" {
                log.call_started(&r.agent, position, &entry);
            } else {
                let started = r
                    .started_position
                    .map(to_u64)
                    .transpose()
                    .map_err(c)?
                    .unwrap_or_default();
                log.call_finished(&r.agent, position, started, &entry);
            }
        }
        "signal" => {
            let s = SignalRecord {
                id: r.signal_id.ok_or_else(|| missing("id"))?,
                run_id: r.run_id.clone(),
                name: r.name.unwrap_or_default(),
                payload: Value::Null,
                created_at: r.at,
                consumed_at_version: None,
            };
            log.signal(&r.agent, position, &s);
        }
        "status" => {
            let change = StatusChange {
                run_id: r.run_id.clone(),
                version,
                status: parse_status(&id, r.status.as_deref().unwrap_or_default())?,
                error,
                at: r.at,
            };
            log.status_change(&r.agent, position, &change);
        }
        other => return Err(corrupt(&id, format!("unknown event source `{other}`"))),
    }
    Ok(())
}

/// The columns of [`EventRow`], in order, with their PostgreSQL types.
const COLUMNS: [(&str, &str); 29] = [
    ("source", "text"),
    ("run_id", "text"),
    ("agent", "text"),
    ("position", "bigint"),
    ("at", "bigint"),
    ("version", "bigint"),
    ("seq", "integer"),
    ("kind", "text"),
    ("name", "text"),
    ("from_state", "text"),
    ("to_state", "text"),
    ("status", "text"),
    ("tool_kind", "text"),
    ("idempotency_key", "text"),
    ("attempts", "integer"),
    ("duration_ms", "bigint"),
    ("error_class", "text"),
    ("error_code", "text"),
    ("error_message", "text"),
    ("waiting_for", "text"),
    ("wake_at", "bigint"),
    ("note_by", "text"),
    ("note_reason", "text"),
    ("signal_id", "bigint"),
    ("signal_name", "text"),
    ("input", "jsonb"),
    ("output", "jsonb"),
    ("started_position", "bigint"),
    ("finished_at", "bigint"),
];

/// One arm of an event statement: the records of one table (`from`, whose alias is
/// `alias`; it may join others), positioned by `position`, and the expressions of the
/// columns it has (the rest are `NULL`); `{a}` in an expression stands for the alias.
#[derive(Debug)]
struct EventArm<'a> {
    /// The table's alias in `from`.
    pub alias: &'a str,
    /// What the rows come from.
    pub from: &'a str,
    /// The position of a row.
    pub position: &'a str,
    /// `(column, expression)` for the columns this arm sets.
    pub columns: &'a [(&'a str, &'a str)],
}

/// How a dialect writes event statements.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The function from a stored time to milliseconds (empty: stored as milliseconds).
    pub ms: &'static str,
    /// What follows a boolean column to test it (SQLite's are integers: ` = 1`).
    pub is_true: &'static str,
    /// Cast every column to its PostgreSQL type, so that the arms' `NULL`s agree.
    pub typed: bool,
}

/// Each arm ordered by position from `$2` and cut at `$3` rows, the runs joined as `r` and
/// kept by `scope` (`{a}` in it stands for the arm's alias), the arms put together.
fn arms_statement(arms: &[EventArm<'_>], scope: &str, dialect: Dialect) -> String {
    arms.iter()
        .map(|arm| {
            let select = COLUMNS
                .iter()
                .map(|(name, ty)| {
                    let expr = arm.columns.iter().find(|(c, _)| c == name).map_or_else(
                        || "NULL".to_owned(),
                        |(_, e)| {
                            e.replace("{a}", arm.alias)
                                .replace("{ms}", dialect.ms)
                                .replace("{true}", dialect.is_true)
                        },
                    );
                    if dialect.typed {
                        format!("CAST({expr} AS {ty}) AS {name}")
                    } else {
                        format!("{expr} AS {name}")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "SELECT * FROM (SELECT {select} FROM {from} JOIN runs r ON r.id = {alias}.run_id \
                 WHERE {scope} AND {position} >= $2 ORDER BY {position} LIMIT $3) {alias}_arm",
                from = arm.from.replace("{true}", dialect.is_true),
                alias = arm.alias,
                position = arm.position,
                scope = scope.replace("{a}", arm.alias),
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The columns of a journal row in an event statement (`{a}` its alias).
const CALL_COLUMNS: [(&str, &str); 17] = [
    ("run_id", "{a}.run_id"),
    ("agent", "r.agent"),
    ("at", "{ms}({a}.started_at)"),
    ("version", "{a}.version"),
    ("seq", "{a}.seq"),
    ("kind", "{a}.kind"),
    ("name", "{a}.name"),
    ("status", "{a}.status"),
    ("tool_kind", "{a}.tool_kind"),
    ("idempotency_key", "{a}.idempotency_key"),
    ("attempts", "{a}.attempts"),
    ("duration_ms", "{a}.duration_ms"),
    ("error_class", "{a}.error_class"),
    ("error_code", "{a}.error_code"),
    ("error_message", "{a}.error_message"),
    ("finished_at", "{ms}({a}.finished_at)"),
    (
        "input",
        "CASE WHEN {a}.kind IN ('decision', 'child') THEN {a}.input END",
    ),
];

/// The text of the event statement of `dialect` whose runs are kept by `scope` (`{a}` in
/// it stands for an arm's alias): one arm per kind of record.
#[must_use]
pub fn event_statement(dialect: Dialect, scope: &str) -> String {
    let started = [
        &CALL_COLUMNS[..],
        &[("source", "'started'"), ("position", "j.started_position")],
    ]
    .concat();
    let finished = [
        &CALL_COLUMNS[..],
        &[
            ("source", "'finished'"),
            ("position", "f.finished_position"),
            ("started_position", "f.started_position"),
            (
                "output",
                "CASE WHEN f.kind IN ('decision', 'child') THEN COALESCE(o.output, f.output) END",
            ),
        ],
    ]
    .concat();
    arms_statement(
        &[
            EventArm {
                alias: "t",
                from: "transitions t LEFT JOIN signals s ON s.run_id = t.run_id \
                       AND s.consumed_at_version = t.version",
                position: "t.position",
                columns: &[
                    ("source", "'transition'"),
                    ("run_id", "t.run_id"),
                    ("agent", "r.agent"),
                    ("position", "t.position"),
                    ("at", "{ms}(t.created_at)"),
                    ("version", "t.version"),
                    ("kind", "t.kind"),
                    ("from_state", "t.from_state"),
                    ("to_state", "t.to_state"),
                    ("status", "t.status"),
                    ("error_code", "t.error_code"),
                    ("error_message", "t.error_message"),
                    ("waiting_for", "t.waiting_for"),
                    ("wake_at", "{ms}(t.wake_at)"),
                    ("note_by", "t.note_by"),
                    ("note_reason", "t.note_reason"),
                    ("signal_id", "s.id"),
                    ("signal_name", "s.name"),
                ],
            },
            EventArm {
                alias: "j",
                from: "journal j",
                position: "j.started_position",
                columns: &started,
            },
            EventArm {
                alias: "f",
                from: "journal f LEFT JOIN outputs o ON f.output_external{true} \
                       AND o.run_id = f.run_id AND o.version = f.version AND o.seq = f.seq",
                position: "f.finished_position",
                columns: &finished,
            },
            EventArm {
                alias: "g",
                from: "signals g",
                position: "g.position",
                columns: &[
                    ("source", "'signal'"),
                    ("run_id", "g.run_id"),
                    ("agent", "r.agent"),
                    ("position", "g.position"),
                    ("at", "{ms}(g.created_at)"),
                    ("version", "g.consumed_at_version"),
                    ("name", "g.name"),
                    ("signal_id", "g.id"),
                ],
            },
            EventArm {
                alias: "c",
                from: "status_changes c",
                position: "c.position",
                columns: &[
                    ("source", "'status'"),
                    ("run_id", "c.run_id"),
                    ("agent", "r.agent"),
                    ("position", "c.position"),
                    ("at", "{ms}(c.created_at)"),
                    ("version", "c.version"),
                    ("status", "c.status"),
                    ("error_code", "c.error_code"),
                    ("error_message", "c.error_message"),
                ],
            },
        ],
        scope,
        dialect,
    )
}
