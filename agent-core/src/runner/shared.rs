//! What the runner's rooms share: the runner's agent-independent part ([`Inner`]), what a
//! step knows of its run before it reads it, and how a step ended. The runner's loop
//! (`mod.rs`), its steps, commits and sagas all build on these; none of them is needed to
//! define them. The steps, sagas and the commit protocol take the `Inner` (and a step the
//! handlers), not the `Runner`: the `Runner` type stays in `mod.rs`, beside its
//! constructors (a compiler error about a bound of `Runner::new` then names
//! `Runner::<A, H>::new`, not the impl block's module), and nothing below it names it.

use std::sync::Arc;

use super::caches;
use super::{FaultHook, ImportedTools, RunnerConfig, RunnerError};
use crate::graph::GraphDescription;
use crate::router::Router;
use crate::secrets::Redactor;
use crate::store::{ClaimReads, RunRecord, Store};
use crate::tool::{ToolBox, ToolKind};

/// Everything a step needs that does not depend on the agent's type.
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) tools: ToolBox,
    /// Tools imported at start-up and the states that may call them.
    pub(crate) imported: ImportedTools,
    pub(crate) router: Option<Arc<dyn Router>>,
    pub(crate) config: RunnerConfig,
    pub(crate) faults: Arc<dyn FaultHook>,
    pub(crate) graph: &'static GraphDescription,
    pub(crate) fingerprint: String,
    /// Set once the graph is stored: a runner registers it at its first start, not at
    /// every one (a failed registration is tried again at the next start).
    pub(crate) registered: tokio::sync::OnceCell<()>,
    /// The tool registry as last read, shared by every run this runner drives.
    pub(crate) switches: caches::ToolSwitches,
    /// Per tool, the input fields its schema marks secret (computed at first use).
    pub(crate) marked: caches::MarkedFields,
    /// The configuration's one redactor, built when the configuration is set.
    pub(crate) redactor: Redactor,
    /// Set once the configured rate limits are declared in the store (at the first take).
    pub(crate) limits_declared: tokio::sync::OnceCell<()>,
}

/// What a step knows of its run's journal and signals before it reads them.
#[derive(Debug)]
pub(crate) enum Known {
    /// Nothing: the step reads what it needs.
    Nothing,
    /// The run's previous step was committed by this runner: nothing can be journaled at
    /// the new version yet.
    Fresh,
    /// What the claim read ([`RunStore::claim_next`]).
    Claimed(ClaimReads),
}

/// How a call to [`Runner::step`](super::Runner::step) ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome {
    /// A new version was committed; the run can go on.
    Committed(RunRecord),
    /// The run waits for a signal; nothing was committed by this call, or the wait was.
    Waiting(RunRecord),
    /// The run is final (completed, compensated, failed, quarantined, dead-lettered).
    Finished(RunRecord),
    /// The run was handed back until a rate limit has room for it (its `wake_at`, with
    /// `waiting_for` naming the limit); nothing was committed, and no worker holds it.
    Deferred(RunRecord),
}

impl StepOutcome {
    /// The outcome of a committed step. A run that just entered a waiting state is reported
    /// as committed, so the next step looks for a signal that may already be there.
    pub(crate) fn after_commit(record: RunRecord) -> Self {
        if record.status.is_final() {
            Self::Finished(record)
        } else {
            Self::Committed(record)
        }
    }
}

/// The label a step's end is counted under in the step metric: the run's status after it,
/// `lease_lost`, or `error` (bounded, whatever the error says).
pub(crate) fn metric_outcome(stepped: &Result<StepOutcome, RunnerError>) -> &'static str {
    match stepped {
        Ok(StepOutcome::Committed(r) | StepOutcome::Waiting(r) | StepOutcome::Finished(r)) => {
            r.status.as_str()
        }
        Ok(StepOutcome::Deferred(_)) => "deferred",
        Err(RunnerError::LeaseLost(_)) => "lease_lost",
        Err(_) => "error",
    }
}

/// Whether a tool of this kind gets an idempotency key.
pub(crate) fn keyed(kind: ToolKind) -> bool {
    kind.has_effect()
}

impl Inner {
    /// The tools legal in `state`: its compiled `tools(...)`, then the imported ones.
    pub(crate) fn tools_in<'a>(
        &'a self,
        state: &'a crate::graph::StateDescription,
    ) -> impl Iterator<Item = &'a str> + 'a {
        state.tools.iter().map(String::as_str).chain(
            self.imported
                .allowed_in(&state.name)
                .map(|name| -> &'a str { name }),
        )
    }
}
