//! What a run records and receives between versions: journal entries (tool calls, decisions,
//! compensations, children) with the kinds of tool, and signals.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ErrorClass, Millis};

/// The three kinds of tool, and what the runner guarantees for each.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ToolKind {
    /// No side effect. Journaled, served from the journal on resume, cacheable within a run.
    Read,
    /// A side effect. Gets an idempotency key; once its result is committed it never runs again.
    Write,
    /// A write with a declared compensation; completed calls form the run's saga.
    Hybrid,
}

impl ToolKind {
    /// `read`, `write` or `hybrid`: the stored name, the serde name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether calls of this kind have effects (and so idempotency keys).
    #[must_use]
    pub const fn has_effect(self) -> bool {
        !matches!(self, Self::Read)
    }
}

/// What a journal entry records.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EntryKind {
    /// A tool call made by a handler or chosen by the router.
    Tool,
    /// A decision of the router.
    Decision,
    /// A compensating call of the saga.
    Compensation,
    /// Child runs started by a handler ([`Ctx::spawn_all`](crate::agent::Ctx::spawn_all)):
    /// the name is the child agent's, the input the initial states, the output the child
    /// run ids. Journaled (started) before the children are created, so that a parent's
    /// cancel finds them whatever happened after.
    Child,
}

impl EntryKind {
    /// Stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// The state of a journaled call.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CallStatus {
    /// Sent, no result committed yet (a crash here means: retry with the same key).
    Started,
    /// Completed; its output is final and is never recomputed.
    Succeeded,
    /// Failed after its retries (or rejected, for decisions).
    Failed,
}

impl CallStatus {
    /// Stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parse a stored name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// One journaled call: a tool call, a router decision or a compensation.
///
/// Keyed by `(run_id, version, seq)`: `version` is the state version the step started from
/// and `seq` the call's index within the step; recording the same key again replaces the
/// entry (a `started` entry becomes `succeeded`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalEntry {
    /// The run.
    pub run_id: String,
    /// The state version the step started from.
    pub version: u64,
    /// Index within the step.
    pub seq: u32,
    /// Tool, decision or compensation.
    pub kind: EntryKind,
    /// The state the call was made in.
    pub state: String,
    /// The tool's name (`router` for decisions).
    pub name: String,
    /// For tool calls and compensations: the tool's kind.
    pub tool_kind: Option<ToolKind>,
    /// SHA-256 of the canonical JSON input, hex.
    pub input_hash: String,
    /// The input.
    pub input: Value,
    /// For write and hybrid calls and compensations.
    pub idempotency_key: Option<String>,
    /// Started, succeeded or failed.
    pub status: CallStatus,
    /// The output (for decisions: the [`crate::router::DecisionRecord`]).
    pub output: Option<Value>,
    /// The error class, when failed.
    pub error_class: Option<ErrorClass>,
    /// A stable error code, when failed.
    pub error_code: Option<String>,
    /// The error message, when failed.
    pub error_message: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// Wall time of all attempts.
    pub duration_ms: u64,
    /// When the call started: its first record's time, kept when it is recorded again
    /// (ended, or started again after a crash), so that its start event never changes.
    pub started_at: Millis,
    /// When it finished.
    pub finished_at: Option<Millis>,
}

/// The idempotency key of a write, hybrid or compensating call: derived from the run, the
/// state version and the call index, never from the attempt.
#[must_use]
pub fn idempotency_key(run_id: &str, version: u64, seq: u32) -> String {
    format!("{run_id}:{version}:{seq}")
}

/// A signal sent to a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalRecord {
    /// Store-assigned id, increasing.
    pub id: i64,
    /// The run.
    pub run_id: String,
    /// The signal's name.
    pub name: String,
    /// The payload.
    pub payload: Value,
    /// When sent.
    pub created_at: Millis,
    /// The version whose step consumed it.
    pub consumed_at_version: Option<u64>,
}

/// What [`RunStore::send_signal_once`](crate::store::RunStore::send_signal_once) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalReceipt {
    /// The signal's id: the one stored now, or the one stored first under the same key.
    pub id: i64,
    /// Whether a signal was stored under the key before: nothing was stored now.
    pub duplicate: bool,
}

/// The longest dedup key [`RunStore::send_signal_once`](crate::store::RunStore::send_signal_once)
/// takes, in bytes: room for a UUID, a broker's message id or a URL, not for a payload.
pub const MAX_SIGNAL_KEY_BYTES: usize = 200;

/// Refuse a signal's dedup key that is empty, longer than [`MAX_SIGNAL_KEY_BYTES`] or holds
/// a NUL (which PostgreSQL's text refuses): every store checks it the same way.
///
/// # Errors
/// [`StoreError::Backend`](crate::store::StoreError::Backend), saying which.
pub fn check_signal_key(key: &str) -> Result<(), crate::store::StoreError> {
    let refused = if key.is_empty() {
        "a signal's dedup key is empty"
    } else if key.len() > MAX_SIGNAL_KEY_BYTES {
        "a signal's dedup key is longer than 200 bytes"
    } else if key.contains('\0') {
        "a signal's dedup key holds a NUL"
    } else {
        return Ok(());
    };
    Err(crate::store::StoreError::backend(refused))
}
