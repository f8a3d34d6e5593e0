//! The store contract: what every backend guarantees, and the records it keeps.
//!
//! A backend (in-memory here, PostgreSQL in `agent-pg`, SQLite in `agent-sqlite`) keeps runs,
//! their versions, a journal of tool calls and LLM decisions, signals, leases, the tool
//! registry and each agent's graph. The contract comes in roles, each a trait:
//!
//! | role | for | used by |
//! |---|---|---|
//! | [`HistoryStore`] | reading runs, histories, journals, signals, graphs; time travel | every reader: the inspector, `agentctl show`, verification |
//! | [`RunStore`] | creating, claiming, journaling and committing runs | the runner and its workers |
//! | [`OperatorStore`] | cancel, terminate, retry, repair, edit a state, drop a signal, prune, tool switches | `agentctl`, the HTTP API |
//! | [`EventLog`] | the events of committed records, and wake-ups to follow them | followers, streams |
//! | [`ScheduleStore`] | schedules that start runs | the workers' tickers, `agentctl`, the HTTP API |
//! | [`LimitStore`] | rate limits every worker draws from | the runner, `agentctl limits` |
//!
//! [`Store`] is their sum: a backend implements the roles, and has `Store` for free.
//! `RunStore` and `OperatorStore` build on `HistoryStore` (acting on a run reads it); the
//! defaults of the optional methods let a third-party store start from the required ones.
//!
//! The runner relies on these guarantees, and the conformance suite (the crate
//! `durable-agents-conformance`) checks them for every backend:
//!
//! 1. Versions of a run form one chain `0, 1, 2, …` with no gap, duplicate or fork:
//!    [`RunStore::commit_step`] is a compare-and-set on `(version, epoch)`.
//! 2. Only the holder of the current lease epoch may write: every write that belongs to a
//!    step ([`RunStore::record_entry`], [`RunStore::commit_step`]) carries the [`Lease`],
//!    and a stale epoch gets
//!    [`StoreError::LeaseLost`]. A worker that sees it stops.
//! 3. Journal entries are durable as soon as `record_entry` returns, before the step commits:
//!    a completed write is never executed again; a decision is never asked again. Entries
//!    a commit carries (reads that are cheap to repeat) are durable with it.
//! 4. Storage grows linearly with the number of steps: versions are stored as deltas with
//!    snapshots spaced by size (see [`history`]), and [`OperatorStore::prune`] removes old ones.

mod canonical;
mod chain;
mod contract;
pub mod edit;
mod error;
pub mod events;
pub mod export;
mod failure_code;
mod forward;
pub mod history;
pub(crate) mod labels;
mod limit_store;
pub mod location;
pub mod memory;
pub mod migrate;
pub mod operator;
pub(crate) mod records;
pub mod repair;
mod run_id;
mod schedule_store;
mod stats;
pub mod tools;
pub mod verify;
mod waiting_for;

pub use canonical::{canonical_json, creation_hash, input_hash};
pub use chain::{ChainLink, legacy_transition_hash, transition_hash};
pub use contract::{EventLog, HistoryStore, OperatorStore, RunStore, Store};
pub use error::{BackendError, StoreError};
pub use events::{
    EventBuilder, EventCursor, EventKind, EventScope, EventWake, EventWakes, RunEvent,
    StatusChange, TransitionFacts, WakeHub,
};
pub use failure_code::FailureCode;
pub use labels::{validate_label, validate_labels};
pub use limit_store::LimitStore;
pub use migrate::{
    MigrationCommit, MigrationNote, agent_version_at, claimable_by, versioned_agent,
};
#[doc(hidden)]
pub use records::simulated_clock;
pub use records::{
    Bucket, Budget, CallStatus, ClaimReads, Claimed, DAY_MS, DaySpend, EntryKind, InspectedRun,
    InvalidBudget, InvalidRateLimit, JournalEntry, LabelValueCount, Labels, Lease, LimitScope,
    LimitState, MAX_LIMIT, MAX_LIMIT_NAME_BYTES, MAX_SIGNAL_KEY_BYTES, Millis, NewRun,
    OperatorNote, PruneReport, ROW_UNREADABLE, RateLimit, RetentionPolicy, RunFailure, RunFilter,
    RunKey, RunRecord, RunStatus, SignalReceipt, SignalRecord, SpawnedBy, Spend, Spending,
    StateAtVersion, StepCommit, ToolSwitch, TransitionKind, TransitionRecord, VersionCount,
    VersionSpan, check_signal_key, cost_micros, format_cost, idempotency_key, now_ms,
};
pub use repair::{RepairCommit, RepairError, plan_repair, repair};
pub use run_id::new_run_id;
pub use schedule_store::ScheduleStore;
pub use stats::{ToolStats, compute_tool_stats};
pub use waiting_for::{
    WAIT_ALL_CHILDREN, WAIT_CAPACITY_PREFIX, WAIT_FIRST_CHILD, WAIT_TIMER, WaitingFor,
};
