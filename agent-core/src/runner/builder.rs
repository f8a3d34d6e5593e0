//! How a runner is put together: [`Runner::builder`], then the optional parts, then
//! [`build`](RunnerBuilder::build).

use std::marker::PhantomData;
use std::sync::Arc;

use super::{FaultHook, ImportedTools, NoFaults, Runner, RunnerConfig, RunnerError};
use crate::agent::{Agent, Handle, RoutedByCode, RoutedByLlm};
use crate::router::Router;
use crate::store::Store;
use crate::tool::ToolBox;

/// A runner being put together: made by [`Runner::builder`], finished by
/// [`build`](Self::build), which checks the parts and never panics.
///
/// `R` is what answers in `route = llm` states: `()` until [`router`](Self::router) gives
/// one, so that `build` compiles for an agent without such states ([`RoutedByCode`]) only
/// without a router, and for one with them ([`RoutedByLlm`]) only with one.
///
/// ```
/// # use std::sync::Arc;
/// # use durable_agents::prelude::*;
/// # #[derive(Clone, Serialize, Deserialize, Agent)]
/// # enum Hello { #[agent(initial, to(Done))] Start, #[agent(terminal)] Done }
/// # struct Behaviour;
/// # impl HelloHandlers for Behaviour {
/// #     async fn start(&self, ctx: Ctx<'_, hello::Start>, _: hello::Start) -> StepResult<hello::Start> {
/// #         Ok(ctx.to(hello::Done))
/// #     }
/// # }
/// # fn main() -> Result<(), durable_agents::RunnerError> {
/// let runner = Runner::<Hello, _>::builder(Arc::new(MemoryStore::new()), Behaviour, ToolBox::new())
///     .config(RunnerConfig { worker_id: "worker-1".into(), ..RunnerConfig::default() })
///     .build()?;
/// # let _ = runner;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RunnerBuilder<A, H, R = ()> {
    store: Arc<dyn Store>,
    handlers: H,
    tools: ToolBox,
    router: R,
    config: RunnerConfig,
    faults: Arc<dyn FaultHook>,
    imported: Option<ImportedTools>,
    agent: PhantomData<fn() -> A>,
}

impl<A: Agent, H, R> std::fmt::Debug for RunnerBuilder<A, H, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerBuilder")
            .field("agent", &A::NAME)
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<A, H> RunnerBuilder<A, H, ()> {
    pub(super) fn new(store: Arc<dyn Store>, handlers: H, tools: ToolBox) -> Self {
        Self {
            store,
            handlers,
            tools,
            router: (),
            config: RunnerConfig::default(),
            faults: Arc::new(NoFaults),
            imported: None,
            agent: PhantomData,
        }
    }

    /// What answers in the agent's `route = llm` states: a provider from
    /// `durable-agents-llm` in production, a [`ScriptedRouter`](crate::router::ScriptedRouter)
    /// in tests. Only an agent with such a state ([`RoutedByLlm`]) takes one.
    pub fn router(self, router: Arc<dyn Router>) -> RunnerBuilder<A, H, Arc<dyn Router>>
    where
        A: RoutedByLlm,
    {
        RunnerBuilder {
            store: self.store,
            handlers: self.handlers,
            tools: self.tools,
            router,
            config: self.config,
            faults: self.faults,
            imported: self.imported,
            agent: PhantomData,
        }
    }
}

impl<A, H, R> RunnerBuilder<A, H, R> {
    /// The settings (default: [`RunnerConfig::default`]).
    pub fn config(mut self, config: RunnerConfig) -> Self {
        self.config = config;
        self
    }

    /// A fault hook, to crash the runner at chosen points (tests and the reliability
    /// battery; default: none).
    pub fn faults(mut self, faults: Arc<dyn FaultHook>) -> Self {
        self.faults = faults;
        self
    }

    /// Tools imported at start-up (from MCP servers: `durable-agents-mcp`) and the states
    /// that may call them; checked by [`build`](RunnerBuilder::build).
    pub fn imported_tools(mut self, imported: ImportedTools) -> Self {
        self.imported = Some(imported);
        self
    }

    pub(crate) fn finish(self, router: Option<Arc<dyn Router>>) -> Result<Runner<A, H>, RunnerError>
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        Runner::assemble(super::Parts {
            store: self.store,
            handlers: self.handlers,
            tools: self.tools,
            router,
            config: self.config,
            faults: self.faults,
            imported: self.imported.unwrap_or_default(),
        })
    }
}

impl<A, H> RunnerBuilder<A, H, ()>
where
    A: Agent + Handle<H> + RoutedByCode,
    H: Send + Sync + 'static,
{
    /// The runner.
    ///
    /// # Errors
    /// [`RunnerError::ToolBox`] when a tool declared on the agent is missing from the tool
    /// box or has another kind, or naming every problem of the imported tools (a state the
    /// agent does not have or a terminal one, a tool allowed but not imported, an imported
    /// tool with the name of a compiled one, a hybrid whose compensation is missing or not
    /// a write); [`RunnerError::NoRouter`] when the agent's graph has a routed state anyway
    /// (only a hand-written [`RoutedByCode`] impl can say so wrongly).
    pub fn build(self) -> Result<Runner<A, H>, RunnerError> {
        self.finish(None)
    }
}

impl<A, H> RunnerBuilder<A, H, Arc<dyn Router>>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// The runner.
    ///
    /// # Errors
    /// [`RunnerError::ToolBox`] as for a runner without a router.
    pub fn build(self) -> Result<Runner<A, H>, RunnerError> {
        let router = Arc::clone(&self.router);
        self.finish(Some(router))
    }
}
