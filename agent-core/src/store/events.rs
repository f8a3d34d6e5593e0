//! A run's history as a stream of typed events, derived from the durable records.
//!
//! Nothing is written for events: every record a store keeps for a run (its transitions,
//! journal entries, signals, and the status changes that write no version) carries a
//! **position**, drawn by the store from one counter when the record is written, under the
//! run's write lock. The events of a record follow from the record alone ([`EventBuilder`]),
//! so a read from any cursor returns exactly what was committed, after any crash, and the
//! same events as a fresh read: nothing is lost or invented, and a record that was never
//! committed never shows.
//!
//! Order: within a run, cursors grow in commit order. Across runs they follow the store's
//! counter; on SQLite and in memory, writes are serialized, so that is commit order too;
//! on PostgreSQL two runs committing at the same moment may commit in the other order than
//! they drew their positions, a few milliseconds apart at most, which is why a follower of
//! several runs reads again a short window behind its cursor
//! ([`Follower`](crate::events::Follower)).
//!
//! What is only in memory, a model's tokens as they come, is not here: those are
//! [ephemeral](crate::events::Ephemeral) and never claimed durable.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{
    CallStatus, EntryKind, JournalEntry, Millis, OperatorNote, RunFailure, RunStatus, SignalRecord,
    TransitionKind, TransitionRecord, WaitingFor,
};
use crate::router::{Decision, DecisionRecord};
use crate::tool::{ErrorClass, ToolKind};

/// Where an event is in the store's order: the position of the record it comes from and
/// its place among that record's events. Only grows within a run. Opaque to clients: it
/// is written and read as a decimal number (an SSE event id, `Last-Event-ID`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventCursor(u64);

/// How many events one record may give (a transition gives at most four).
const SLOTS: u64 = 8;

impl EventCursor {
    /// Before the first event: read from here for a run's whole history.
    pub const START: Self = Self(0);

    /// The cursor of the `slot`-th event of the record at `position`.
    #[must_use]
    pub const fn new(position: u64, slot: u8) -> Self {
        Self(position * SLOTS + slot as u64)
    }

    /// The cursor after every event of the record at `position`: reading after it gives
    /// the records positioned later.
    #[must_use]
    pub const fn after_position(position: u64) -> Self {
        Self(position * SLOTS + (SLOTS - 1))
    }

    /// The cursor as one number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The cursor of a number read back ([`get`](Self::get)).
    #[must_use]
    pub const fn from_u64(n: u64) -> Self {
        Self(n)
    }

    /// The position of the record this event comes from: a store reads the records
    /// whose position is at least this one's (the rest of the record's events may follow).
    #[must_use]
    pub const fn position(self) -> u64 {
        self.0 / SLOTS
    }
}

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for EventCursor {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(Self)
    }
}

/// Whose events to read or follow.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventScope {
    /// One run.
    Run(String),
    /// Every run of one agent.
    Agent(String),
    /// Every run.
    All,
}

impl EventScope {
    /// Whether an event of `run_id` of `agent` is in this scope.
    #[must_use]
    pub fn contains(&self, run_id: &str, agent: &str) -> bool {
        match self {
            Self::Run(id) => id == run_id,
            Self::Agent(name) => name == agent,
            Self::All => true,
        }
    }
}

/// One thing a run did, as committed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunEvent {
    /// Where it is in the order; read after it to go on.
    pub cursor: EventCursor,
    /// The run.
    pub run_id: String,
    /// The run's agent.
    pub agent: String,
    /// When it happened (the record's time).
    pub at: Millis,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened, with what a client needs to show it; the rest is in the record it comes
/// from (the run's history and journal). Tagged by `type` in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    /// The run was created (or forked) in `state`.
    RunCreated {
        /// The initial state's name.
        state: String,
    },
    /// A version was committed.
    TransitionCommitted {
        /// The version it created.
        version: u64,
        /// The state left.
        from: String,
        /// The state entered.
        to: String,
        /// Why.
        kind: TransitionKind,
        /// The run's status after it.
        status: RunStatus,
        /// For an operator's transition: who and why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<OperatorNote>,
    },
    /// A tool call was sent (by a handler or chosen by the router).
    ToolStarted {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The tool.
        tool: String,
        /// Read, write or hybrid.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_kind: Option<ToolKind>,
        /// For writes: the key the tool was called with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
    },
    /// A tool call ended, after its retries.
    ToolFinished {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The tool.
        tool: String,
        /// Succeeded or failed.
        status: CallStatus,
        /// Attempts made.
        attempts: u32,
        /// Wall time of all attempts.
        duration_ms: u64,
        /// For failures: the class.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_class: Option<ErrorClass>,
        /// For failures: the stable code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
    },
    /// The router asked the model.
    DecisionAsked {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The options offered.
        options: Vec<String>,
    },
    /// The model's answer was a legal option, checked.
    DecisionAccepted {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The state chosen, for a transition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transition: Option<String>,
        /// The tools chosen, in the order of the answer.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<String>,
        /// The model.
        model: String,
        /// Input tokens, when the provider said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input_tokens: Option<u64>,
        /// Output tokens, when the provider said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_tokens: Option<u64>,
    },
    /// The model's answer was refused; nothing of it ran.
    DecisionRejected {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The rejection's stable code (`decision.unknown_option`, ...).
        code: String,
    },
    /// A compensating call of the saga was sent.
    CompensationStarted {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The compensating tool.
        tool: String,
        /// The key it was called with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
    },
    /// A compensating call ended.
    CompensationFinished {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The compensating tool.
        tool: String,
        /// Succeeded or failed.
        status: CallStatus,
        /// Attempts made.
        attempts: u32,
        /// For failures: the stable code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
    },
    /// A step is starting child runs.
    ChildrenStarting {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The child agent.
        agent: String,
        /// How many.
        count: usize,
    },
    /// The child runs exist (each child's own events are in its stream).
    ChildrenStarted {
        /// The version its step started from.
        version: u64,
        /// Its index in the step.
        call: u32,
        /// The child agent.
        agent: String,
        /// Their ids, in creation order.
        runs: Vec<String>,
    },
    /// A signal was sent to the run.
    SignalReceived {
        /// The signal's id.
        signal: i64,
        /// Its name.
        name: String,
    },
    /// A step consumed a signal.
    SignalConsumed {
        /// The signal's id.
        signal: i64,
        /// Its name.
        name: String,
        /// The version whose commit consumed it.
        version: u64,
    },
    /// The run waits (for a signal, a timer, or its children) and holds no worker.
    WaitEntered {
        /// The version that entered the wait.
        version: u64,
        /// What it waits for: a signal's name, or `children:all` / `children:first`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
        waiting_for: Option<WaitingFor>,
        /// When it wakes without it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wake_at: Option<Millis>,
    },
    /// The run's status changed without a version: quarantined or dead-lettered by a
    /// worker, or set by an operator (a retry puts it back to running).
    StatusSet {
        /// The new status.
        status: RunStatus,
        /// Why, for a failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunFailure>,
    },
    /// The run reached a final status.
    RunFinished {
        /// Its version then.
        version: u64,
        /// The final status.
        status: RunStatus,
        /// Why, for a failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunFailure>,
    },
}

/// What a committed version carries besides its [`TransitionRecord`], for its events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransitionFacts {
    /// For a version that waits: what for.
    pub waiting_for: Option<WaitingFor>,
    /// For a version that waits with a timeout: when it wakes.
    pub wake_at: Option<Millis>,
    /// The failure, for failed, compensating and quarantined versions.
    pub error: Option<RunFailure>,
    /// The signal its commit consumed: id and name.
    pub consumed_signal: Option<(i64, String)>,
}

/// A status change that writes no version ([`OperatorStore::set_status`](super::OperatorStore::set_status),
/// [`RunStore::quarantine`](super::RunStore::quarantine)), kept for its event.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusChange {
    /// The run.
    pub run_id: String,
    /// The run's version then.
    pub version: u64,
    /// The new status.
    pub status: RunStatus,
    /// Why, for a failure.
    pub error: Option<RunFailure>,
    /// When.
    pub at: Millis,
}

/// The events of the records a store read: add each record with its position, then
/// [`finish`](Self::finish). Every store derives events with it, so they agree.
#[derive(Debug, Default)]
pub struct EventBuilder {
    events: Vec<RunEvent>,
}

impl EventBuilder {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn push(
        &mut self,
        position: u64,
        slot: u8,
        run_id: &str,
        agent: &str,
        at: Millis,
        kind: EventKind,
    ) {
        self.events.push(RunEvent {
            cursor: EventCursor::new(position, slot),
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
            at,
            kind,
        });
    }

    /// A committed version at `position`: the creation or the transition, then the signal
    /// it consumed, the wait it entered, and the end of the run.
    pub fn transition(
        &mut self,
        agent: &str,
        position: u64,
        t: &TransitionRecord,
        facts: &TransitionFacts,
    ) {
        let (id, at) = (t.run_id.as_str(), t.created_at);
        let first = if t.kind == TransitionKind::Start {
            EventKind::RunCreated {
                state: t.to_state.clone(),
            }
        } else {
            EventKind::TransitionCommitted {
                version: t.version,
                from: t.from_state.clone(),
                to: t.to_state.clone(),
                kind: t.kind,
                status: t.status,
                note: t.note.clone(),
            }
        };
        self.push(position, 0, id, agent, at, first);
        if let Some((signal, name)) = &facts.consumed_signal {
            let kind = EventKind::SignalConsumed {
                signal: *signal,
                name: name.clone(),
                version: t.version,
            };
            self.push(position, 1, id, agent, at, kind);
        }
        if t.status == RunStatus::Waiting {
            let kind = EventKind::WaitEntered {
                version: t.version,
                waiting_for: facts.waiting_for.clone(),
                wake_at: facts.wake_at,
            };
            self.push(position, 2, id, agent, at, kind);
        }
        if t.status.is_final() {
            let kind = EventKind::RunFinished {
                version: t.version,
                status: t.status,
                error: facts.error.clone(),
            };
            self.push(position, 3, id, agent, at, kind);
        }
    }

    /// The start of a journaled call, recorded at `position`.
    pub fn call_started(&mut self, agent: &str, position: u64, e: &JournalEntry) {
        let (version, call) = (e.version, e.seq);
        let kind = match e.kind {
            EntryKind::Tool => EventKind::ToolStarted {
                version,
                call,
                tool: e.name.clone(),
                tool_kind: e.tool_kind,
                idempotency_key: e.idempotency_key.clone(),
            },
            EntryKind::Decision => EventKind::DecisionAsked {
                version,
                call,
                options: e.input["options"]
                    .as_array()
                    .map(|o| {
                        o.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            EntryKind::Compensation => EventKind::CompensationStarted {
                version,
                call,
                tool: e.name.clone(),
                idempotency_key: e.idempotency_key.clone(),
            },
            EntryKind::Child => EventKind::ChildrenStarting {
                version,
                call,
                agent: e.name.clone(),
                count: e.input.as_array().map_or(0, Vec::len),
            },
        };
        self.push(position, 0, &e.run_id, agent, e.started_at, kind);
    }

    /// The end of a journaled call, recorded at `position` (a call recorded once, already
    /// ended, has its start and its end at the same position). Nothing for a call that has
    /// not ended.
    pub fn call_finished(
        &mut self,
        agent: &str,
        position: u64,
        started_position: u64,
        e: &JournalEntry,
    ) {
        if e.status == CallStatus::Started {
            return;
        }
        let (version, call) = (e.version, e.seq);
        let kind = match e.kind {
            EntryKind::Tool => EventKind::ToolFinished {
                version,
                call,
                tool: e.name.clone(),
                status: e.status,
                attempts: e.attempts,
                duration_ms: e.duration_ms,
                error_class: e.error_class,
                error_code: e.error_code.clone(),
            },
            EntryKind::Decision => decision_event(e),
            EntryKind::Compensation => EventKind::CompensationFinished {
                version,
                call,
                tool: e.name.clone(),
                status: e.status,
                attempts: e.attempts,
                error_code: e.error_code.clone(),
            },
            EntryKind::Child => EventKind::ChildrenStarted {
                version,
                call,
                agent: e.name.clone(),
                runs: e
                    .output
                    .as_ref()
                    .and_then(|o| serde_json::from_value(o.clone()).ok())
                    .unwrap_or_default(),
            },
        };
        let slot = u8::from(position == started_position);
        let at = e.finished_at.unwrap_or(e.started_at);
        self.push(position, slot, &e.run_id, agent, at, kind);
    }

    /// A signal sent, at `position`.
    pub fn signal(&mut self, agent: &str, position: u64, s: &SignalRecord) {
        let kind = EventKind::SignalReceived {
            signal: s.id,
            name: s.name.clone(),
        };
        self.push(position, 0, &s.run_id, agent, s.created_at, kind);
    }

    /// A status change without a version, at `position`.
    pub fn status_change(&mut self, agent: &str, position: u64, c: &StatusChange) {
        let kind = EventKind::StatusSet {
            status: c.status,
            error: c.error.clone(),
        };
        self.push(position, 0, &c.run_id, agent, c.at, kind);
        if c.status.is_final() {
            let kind = EventKind::RunFinished {
                version: c.version,
                status: c.status,
                error: c.error.clone(),
            };
            self.push(position, 1, &c.run_id, agent, c.at, kind);
        }
    }

    /// The events after `after`, in cursor order, at most `limit`.
    #[must_use]
    pub fn finish(mut self, after: EventCursor, limit: usize) -> Vec<RunEvent> {
        self.events.retain(|e| e.cursor > after);
        self.events.sort_by_key(|e| e.cursor);
        self.events.truncate(limit);
        self.events
    }
}

fn decision_event(e: &JournalEntry) -> EventKind {
    let (version, call) = (e.version, e.seq);
    let record: Option<DecisionRecord> = e
        .output
        .as_ref()
        .and_then(|o| serde_json::from_value(o.clone()).ok());
    let code = || {
        e.error_code
            .clone()
            .unwrap_or_else(|| "decision.unreadable".to_owned())
    };
    let Some(record) = record else {
        return EventKind::DecisionRejected {
            version,
            call,
            code: code(),
        };
    };
    let (transition, tools) = match &record.decision {
        Some(Decision::Transition { to, .. }) => (Some(to.clone()), Vec::new()),
        Some(Decision::Tool { tool, .. }) => (None, vec![tool.clone()]),
        Some(Decision::Tools { calls }) => (None, calls.iter().map(|c| c.tool.clone()).collect()),
        None => {
            return EventKind::DecisionRejected {
                version,
                call,
                code: record
                    .rejection
                    .map_or_else(code, |r| r.code.as_str().to_owned()),
            };
        }
    };
    EventKind::DecisionAccepted {
        version,
        call,
        transition,
        tools,
        model: record.model,
        input_tokens: record.input_tokens,
        output_tokens: record.output_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::EventCursor;

    #[test]
    fn cursors_order_by_position_then_slot_and_read_back() {
        let a = EventCursor::new(7, 3);
        let b = EventCursor::new(8, 0);
        assert!(a < b);
        assert_eq!(a.position(), 7);
        assert_eq!(b.to_string().parse::<EventCursor>().unwrap(), b);
        assert!("x".parse::<EventCursor>().is_err());
        assert!(EventCursor::START < EventCursor::new(1, 0));
    }
}

/// Wake-ups for followers: after a write that gives events, the id of its run, while
/// anyone listens. A hint only: followers read the events from the store, so a missed or
/// repeated wake-up delays nothing but itself (they also poll).
#[derive(Debug)]
pub struct EventWakes {
    rx: tokio::sync::broadcast::Receiver<std::sync::Arc<str>>,
}

/// What [`EventWakes::next`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventWake {
    /// This run has new events.
    Run(std::sync::Arc<str>),
    /// Wake-ups were dropped because this follower fell behind: any run may have new
    /// events.
    Lagged,
    /// The store stopped sending wake-ups.
    Closed,
}

impl EventWakes {
    /// The next wake-up.
    pub async fn next(&mut self) -> EventWake {
        use tokio::sync::broadcast::error::RecvError;
        match self.rx.recv().await {
            Ok(run) if run.is_empty() => EventWake::Lagged,
            Ok(run) => EventWake::Run(run),
            Err(RecvError::Lagged(_)) => EventWake::Lagged,
            Err(RecvError::Closed) => EventWake::Closed,
        }
    }
}

/// A store's side of the wake-ups: sends only while someone listens, so that a write with
/// no follower does nothing more than check a counter; a follower that falls behind loses
/// wake-ups, never the writer's time (the channel is bounded and never blocks).
#[derive(Debug, Clone)]
pub struct WakeHub {
    tx: tokio::sync::broadcast::Sender<std::sync::Arc<str>>,
}

impl Default for WakeHub {
    fn default() -> Self {
        Self::new()
    }
}

impl WakeHub {
    /// How many wake-ups a follower may be behind before it is told it lagged.
    pub const CAPACITY: usize = 1024;

    /// A hub nobody listens to yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            tx: tokio::sync::broadcast::channel(Self::CAPACITY).0,
        }
    }

    /// Whether anyone listens.
    #[must_use]
    pub fn is_listened(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Tell the listeners that `run_id` has new events.
    pub fn wake(&self, run_id: &str) {
        if self.is_listened() {
            let _ = self.tx.send(run_id.into());
        }
    }

    /// Tell the listeners that any run may have new events (after notifications may have
    /// been missed).
    pub fn wake_all(&self) {
        self.wake("");
    }

    /// A new listener.
    #[must_use]
    pub fn subscribe(&self) -> EventWakes {
        EventWakes {
            rx: self.tx.subscribe(),
        }
    }
}
