//! The row of a run's record as the event statements return it.

use agent_core::store::Millis;
use serde_json::Value;
use sqlx::FromRow;
use sqlx::types::Json;

/// One record of a run, as the event statements return it: `source` says which, and the
/// columns that kind of record has are set (the others are `NULL`).
#[derive(Debug, FromRow)]
pub struct EventRow {
    pub(super) source: String,
    pub(super) run_id: String,
    pub(super) agent: String,
    pub(super) position: i64,
    pub(super) at: Millis,
    pub(super) version: Option<i64>,
    pub(super) seq: Option<i32>,
    pub(super) kind: Option<String>,
    pub(super) name: Option<String>,
    pub(super) from_state: Option<String>,
    pub(super) to_state: Option<String>,
    pub(super) status: Option<String>,
    pub(super) tool_kind: Option<String>,
    pub(super) idempotency_key: Option<String>,
    pub(super) attempts: Option<i32>,
    pub(super) duration_ms: Option<i64>,
    pub(super) error_class: Option<String>,
    pub(super) error_code: Option<String>,
    pub(super) error_message: Option<String>,
    pub(super) waiting_for: Option<String>,
    pub(super) wake_at: Option<Millis>,
    pub(super) note_by: Option<String>,
    pub(super) note_reason: Option<String>,
    pub(super) signal_id: Option<i64>,
    pub(super) signal_name: Option<String>,
    pub(super) input: Option<Json<Value>>,
    pub(super) output: Option<Json<Value>>,
    pub(super) started_position: Option<i64>,
    pub(super) finished_at: Option<Millis>,
}
