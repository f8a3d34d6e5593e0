//! # durable-agents
//!
//! LLM agents as compile-time-checked, durable state machines.
//!
//! An agent is an enum of states. [`#[derive(Agent)]`](macro@Agent) turns it into a graph
//! checked at compile time: which state may follow which, and which tools are legal in each.
//! A [`Runner`] executes it one durable step at a time over a
//! [`Store`]: every tool call and every LLM decision is journaled as it
//! completes, every transition is a compare-and-set commit, and a crash resumes from the last
//! committed version without repeating a committed effect or re-asking a committed question.
//!
//! **New here?** Read the tutorial, [`docs/tutorial.md`](https://example.invalid/durable-agents/blob/main/docs/tutorial.md)
//! in the repository: from `cargo new` to an agent served by a worker on SQLite, with tools
//! as functions, a wait and a signal, a model-routed state, and tests that replay a journal.
//! Its code is compiled and run by the test suite (the crate `tutorial/`).
//!
//! ## A complete agent
//!
//! ```
//! use std::sync::Arc;
//! use durable_agents::prelude::*;
//!
//! /// Count the letters of a word (a read tool: no side effect, journaled, served from the
//! /// journal on resume). The doc comment is what a model reads about the tool.
//! #[tool_fn(read)]
//! async fn count_letters(word: String) -> ToolResult<usize> {
//!     Ok(word.len())
//! }
//!
//! #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
//! #[agent(tools(read(CountLetters)))]
//! enum Speller {
//!     #[agent(initial, tools(CountLetters), to(Done))]
//!     Start { word: String },
//!     #[agent(terminal)]
//!     Done { letters: usize },
//! }
//!
//! struct Behaviour;
//!
//! impl SpellerHandlers for Behaviour {
//!     async fn start(
//!         &self,
//!         ctx: Ctx<'_, speller::Start>,
//!         speller::Start { word }: speller::Start, // the state, destructured by field name
//!     ) -> StepResult<speller::Start> {
//!         let letters = ctx.call::<CountLetters>(word).await?; // only tools listed in `Start` compile
//!         Ok(ctx.to(speller::Done { letters }))           // only declared successors compile
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new()); // or SqliteStore, durable_agents::postgres::PgStore
//! // `SpellerTools` has a field per declared tool: leaving one out does not compile.
//! let runner = Runner::new(store, Behaviour, SpellerTools { count_letters: CountLetters })?;
//! runner.start("run-1", Speller::Start { word: "durable".into() }).await?;
//! let done = runner.run("run-1").await?;
//! assert_eq!(done.status, RunStatus::Completed);
//! assert_eq!(done.state["Done"]["letters"], 7);
//! println!("{}", Speller::graph().to_mermaid());
//! # Ok(())
//! # }
//! ```
//!
//! A run's id is the caller's: name a run after the business event it serves (an order, a
//! ticket) and starting it twice starts it once. For runs that are just new, use
//! [`store::new_run_id`]`("checkout")`, which no two processes can both make (a UUID v7,
//! time-ordered), not a timestamp.
//!
//! What does not compile is part of the contract: calling a tool the state does not list,
//!
//! ```compile_fail,E0277
//! # use durable_agents::{Agent, Ctx, StepResult, Tool};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Tool)] #[tool(kind = read, input = String, output = usize)] struct CountLetters;
//! # #[derive(Tool)] #[tool(kind = write, input = String, output = ())] struct Publish;
//! # #[derive(Clone, Serialize, Deserialize, Agent)]
//! # #[agent(tools(read(CountLetters), write(Publish)))]
//! # enum Speller {
//! #     #[agent(initial, tools(CountLetters), to(Done))] Start { word: String },
//! #     #[agent(terminal)] Done { letters: usize },
//! # }
//! # struct Behaviour;
//! impl SpellerHandlers for Behaviour {
//!     async fn start(
//!         &self,
//!         ctx: Ctx<'_, speller::Start>,
//!         speller::Start { word }: speller::Start,
//!     ) -> StepResult<speller::Start> {
//!         ctx.call::<Publish>(word).await?; // error: tool `Publish` is not allowed in state `Start`
//!         Ok(ctx.to(speller::Done { letters: 0 }))
//!     }
//! }
//! ```
//!
//! or moving to a state that is not a declared successor, or a graph with an unreachable
//! state, a trap cycle, an unknown state in `to(...)` — see [`compile_errors`] for each.
//!
//! ## The pieces
//!
//! | module | what |
//! |---|---|
//! | [`graph`] | the checked graph as data: DOT, Mermaid, JSON, YAML exports, a stable fingerprint |
//! | [`tool`] | [`Tool`] (derivable), [`Execute`], [`Compensate`]; kinds read, write, hybrid; policies |
//! | [`runner`] | [`Runner`] and [`Worker`]: steps, journal, sagas, waits, budgets, leases, fault points |
//! | [`router`] | the LLM as a routing node: [`Router`](router::Router), validation, decision records, a scripted router for tests |
//! | [`timer`] | durable timers: a state that waits for a fixed delay (`timer_ms`) or a time its field holds (`timer = field`, a [`timer::Deadline`]) |
//! | [`store`] | runs as stored: the [`Store`] contract's reading and operating roles, records, run ids, an in-memory store |
//! | [`backend`] | for authors of a store: the runner's role of the contract, the records and hashes a backend writes |
//! | `conformance` | the suite every store backend runs, and its fixture agents (feature `conformance`) |
//!
//! Backends: [`sqlite`] (the embedded default, feature `sqlite`) and `postgres` (PostgreSQL,
//! many workers, feature `postgres`). Providers: `llm` (OpenAI-compatible and Anthropic,
//! feature `llm`). Which backend a URL or path names is decided by one rule,
//! [`store::location::StoreLocation`]: `postgres://` is PostgreSQL, `sqlite:` or a path is
//! SQLite, anything else is refused by name.
//!
//! ## Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `sqlite` | yes | [`sqlite::SqliteStore`]: the embedded store, one process, zero setup |
//! | `postgres` | no | `postgres::PgStore`: PostgreSQL, many workers on many machines |
//! | `llm` | no | `llm`: routers over OpenAI-compatible chat completions and Anthropic messages |
//! | `http` | no | `http`: the store over HTTP, an axum router to mount (runs, events as SSE, signals) |
//! | `mcp` | no | `mcp`: tools imported from MCP servers (stdio, streamable HTTP), each with a declared kind |
//! | `triggers-nats` | no | `triggers::nats`: runs started by NATS JetStream messages, one per message, acknowledged once the run is committed |
//! | `triggers-mqtt` | no | `triggers::mqtt`: runs started by MQTT messages (QoS 1, persistent session), acknowledged once the run is committed |
//! | `observe` | no | `observe`: OpenTelemetry traces over OTLP in the GenAI conventions, a Prometheus endpoint, JSON logs |
//! | `conformance` | no | `conformance`: the checks every store backend runs, `conformance::store_conformance!` and `conformance::runner_conformance!` (the crate `durable-agents-conformance`) |
//!
//! ## Guarantees
//!
//! For every run: versions form one chain `0, 1, 2, …`; every committed transition is a
//! declared edge and every journaled tool call was legal in its state; a committed write is
//! never executed again and an interrupted one is retried with the same idempotency key; a
//! committed decision is never asked again; at most one worker commits each version (the
//! lease's fencing epoch is checked in the commit); a run whose stored state no longer
//! deserializes, or whose graph changed incompatibly, is quarantined before any tool call;
//! storage grows linearly with the number of steps. Each is a test in the conformance suite.
#![warn(missing_docs)]

// The root holds what a program that writes and runs agents names; the rest is one module
// deep, by audience: `store` for those who read and operate runs, `backend` for those who
// write a store. Nothing is re-exported by glob, so what the root offers is written here.

/// Derive an agent from an enum of states: see [`agent_core::Agent`](macro@agent_core::Agent).
pub use agent_core::Agent;
pub use agent_core::{Tool, tool_fn};

// Writing handlers.
pub use agent_core::{Ctx, Failure, FailureCode, StepError, StepResult, Wake};
// Writing tools.
pub use agent_core::{
    Compensate, Execute, Shared, ToolBox, ToolContext, ToolError, ToolKind, ToolResult,
};
// Running agents.
pub use agent_core::{
    MemoryStore, RunRecord, RunStatus, Runner, RunnerConfig, RunnerError, Store, Worker,
    WorkerConfig,
};

pub use agent_core::{
    agent, events, graph, replay, router, runner, schedule, schema, secrets, timer, versions,
};

/// Tools: [`Tool`](trait@tool::Tool) (derivable), [`Execute`], [`Compensate`]; kinds read,
/// write, hybrid; policies; the tool box; an agent's tools built from shared resources.
pub mod tool {
    pub use agent_core::tool::{
        Compensate, DynTool, ErrorClass, Execute, RetryPolicy, Tool, ToolBox, ToolContext,
        ToolError, ToolKind, ToolPolicy, ToolResult, kind,
    };
    pub use agent_core::toolset::{BuildTool, FromShared, Shared, ToolsFor};
}

/// How to read the compile errors of `#[derive(Agent)]`, each with what to do about it.
#[doc = include_str!("../../docs/compile-errors.md")]
pub mod compile_errors {}

/// Runs as stored, for programs that read and operate them: the [`Store`] contract's
/// reading and operating roles, the records they return, run ids, store locations, the
/// in-memory store, the hash chain's verifier.
///
/// Writing a store of your own is [`backend`]'s business.
pub mod store {
    pub use agent_core::store::{
        Budget, CallStatus, DAY_MS, DaySpend, EntryKind, EventCursor, EventKind, EventLog,
        EventScope, FailureCode, HistoryStore, InspectedRun, InvalidRateLimit, JournalEntry,
        LabelValueCount, Labels, LimitScope, LimitState, LimitStore, OperatorNote, OperatorStore,
        PruneReport, RateLimit, RetentionPolicy, RunEvent, RunFailure, RunFilter, RunRecord,
        RunStatus, ScheduleStore, SignalRecord, Spend, StateAtVersion, Store, StoreError,
        ToolStats, ToolSwitch, TransitionKind, TransitionRecord, WaitingFor, canonical_json,
        cost_micros, idempotency_key, input_hash, new_run_id,
    };
    pub use agent_core::store::{edit, export, location, memory, repair, verify};
}

/// For authors of a store backend: the runner's role of the contract ([`RunStore`](agent_core::store::RunStore)),
/// the records a backend reads and writes, the hashes and plans every backend computes the
/// same way, and [`BackendError`](agent_core::store::BackendError) for what a database
/// said. The suites a backend runs are the crate `durable-agents-conformance`
/// (`durable_agents::conformance` with the feature `conformance`).
///
/// Named for what its reader writes, a backend (as `sqlite` and `postgres` are), apart
/// from [`store`], which is what every program reading runs needs: the two
/// audiences meet at the [`Store`] trait, which both see.
pub mod backend {
    pub use agent_core::store::{
        BackendError, Bucket, ChainLink, ClaimReads, Claimed, EventBuilder, EventLog, EventWake,
        EventWakes, HistoryStore, Lease, LimitStore, MigrationCommit, MigrationNote, Millis,
        NewRun, OperatorStore, ROW_UNREADABLE, RepairCommit, RunKey, RunStore, ScheduleStore,
        SpawnedBy, StatusChange, StepCommit, Store, StoreError, TransitionFacts, VersionCount,
        VersionSpan, WAIT_ALL_CHILDREN, WAIT_CAPACITY_PREFIX, WAIT_FIRST_CHILD, WakeHub,
        agent_version_at, claimable_by, compute_tool_stats, creation_hash, legacy_transition_hash,
        now_ms, transition_hash, validate_label, validate_labels, versioned_agent,
    };
    pub use agent_core::store::{history, migrate, operator, tools};
}

/// What an agent file needs, in one import: `use durable_agents::prelude::*;`.
///
/// The derives and the tool attribute ([`Agent`](macro@crate::Agent),
/// [`Tool`](macro@crate::Tool), [`tool_fn`](macro@crate::tool_fn)), what handlers and tools
/// name ([`Ctx`], [`StepResult`], [`StepError`], [`Failure`], [`FailureCode`],
/// [`ToolContext`], [`ToolError`], [`Shared`]), the tool traits and kinds, what runs an
/// agent ([`Runner`], [`Worker`], the stores), and
/// the derives the types of states and tools need: `Serialize` and `Deserialize` (serde's
/// derives expand to `serde::...` paths, so add `serde` with its `derive` feature to your
/// manifest) and [`JsonSchema`](schemars::JsonSchema), re-exported with the `schemars` crate
/// itself so that its derive finds it: no `schemars` in your manifest, and no major version
/// of it to match.
pub mod prelude {
    pub use agent_core::{
        Agent, BuildTool, Compensate, Ctx, Execute, Failure, FailureCode, FromShared, MemoryStore,
        RunRecord, RunStatus, Runner, RunnerConfig, Shared, StepError, StepResult, Store, Tool,
        ToolBox, ToolContext, ToolError, ToolKind, ToolResult, ToolsFor, Wake, Worker,
        WorkerConfig, tool_fn,
    };
    #[cfg(feature = "sqlite")]
    pub use agent_sqlite::SqliteStore;
    pub use schemars::{self, JsonSchema};
    pub use serde::{Deserialize, Serialize};
}

#[doc(hidden)]
pub use agent_core::__private;

#[cfg(feature = "conformance")]
pub use agent_conformance as conformance;
#[cfg(feature = "http")]
pub use agent_http as http;
#[cfg(feature = "llm")]
pub use agent_llm as llm;
#[cfg(feature = "mcp")]
pub use agent_mcp as mcp;
#[cfg(feature = "observe")]
pub use agent_observe as observe;
#[cfg(feature = "postgres")]
pub use agent_pg as postgres;
#[cfg(feature = "sqlite")]
pub use agent_sqlite as sqlite;
#[cfg(any(feature = "triggers-nats", feature = "triggers-mqtt"))]
pub use agent_triggers as triggers;
