//! Why the runner could not go on with a run.

use super::Crash;
use crate::store::StoreError;

/// Why the runner could not go on with a run. The run itself is safe in the store.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another worker holds the run, or took it over; this worker stopped.
    #[error("run `{0}` is held by another worker")]
    LeaseLost(String),
    /// A crash was injected (tests).
    #[error(transparent)]
    Crashed(#[from] Crash),
    /// No such run.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// A secret could not be stored sealed.
    #[error(transparent)]
    Seal(#[from] crate::secrets::SealError),
    /// The run belongs to another agent.
    #[error("run `{run_id}` belongs to agent `{found}`, not `{expected}`")]
    WrongAgent {
        /// The run.
        run_id: String,
        /// This runner's agent.
        expected: String,
        /// The run's agent.
        found: String,
    },
    /// A run must start in the initial state.
    #[error("state `{0}` is not the initial state of the agent")]
    NotInitial(String),
    /// A cycle through `children(...)` passes through a `dag` agent: its runs could start
    /// one another without end.
    #[error(
        "agent `{agent}` reaches a cycle through `children(...)` that a `dag` agent is part of: {cycle}; remove `dag`, or a child from the cycle"
    )]
    DagChildCycle {
        /// This runner's agent.
        agent: String,
        /// The agents of the cycle, each with the state that starts the next.
        cycle: String,
    },
    /// The tool box does not match the graph.
    #[error("tool box does not match agent `{agent}`: {problem}")]
    ToolBox {
        /// The agent.
        agent: String,
        /// What is wrong.
        problem: String,
    },
    /// An LLM-routed state, but no router.
    #[error(
        "state `{0}` is routed by an LLM but the runner has no router; build it with `Runner::builder(store, handlers, tools).router(router).build()`"
    )]
    NoRouter(String),
    /// The run is on a version of the agent this runner cannot run: a newer one, or an
    /// older one it declares no migration from. The run is left as it is (not
    /// quarantined), for a worker that can run it.
    #[error(
        "run `{run_id}` is on version {version} of `{agent}`, which this runner cannot run \
         (it runs {runs})"
    )]
    VersionNotRunnable {
        /// The run.
        run_id: String,
        /// The agent.
        agent: String,
        /// The run's version of the agent.
        version: u32,
        /// What this runner runs, as claim entries (`Agent@N`).
        runs: String,
    },
    /// A signal refused at send: the run has ended, no state waits for it, or its payload
    /// is not the type the waiting state declared.
    #[error(transparent)]
    SignalRefused(#[from] crate::signals::SignalRefusal),
    /// A run's initial state or a signal's payload is larger than
    /// [`RunnerConfig::max_payload_bytes`](super::RunnerConfig::max_payload_bytes): the
    /// message names it and its size. Nothing was stored.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// A budget that can never be met (a limit of zero), refused where it is set.
    #[error(transparent)]
    InvalidBudget(#[from] crate::store::InvalidBudget),
}
