//! The runner: executes an agent's graph, one durable step at a time.
//!
//! A step loads the run, runs the current state's handler (or the router loop of a
//! `route = llm` state), and commits one transition with a compare-and-set on the version
//! and the lease epoch. Every tool call and every decision is journaled *as it completes*,
//! before the step commits, so a crash anywhere resumes without repeating a committed
//! effect or re-asking a committed question: the handler is re-run and its calls are
//! served from the journal by their index in the step.
//!
//! ```text
//!   claim lease ─► load + check (state deserializes, graph compatible) ─► [wait for signal]
//!        ─► handler / router loop ─► tool calls (journal: started → succeeded/failed)
//!        ─► commit (CAS version+epoch) ─► next step … ─► terminal / waiting / compensating
//! ```
//!
//! Runs can carry labels from the start ([`Runner::start_with_labels`]), to be found by
//! them later ([`RunFilter::labels`](crate::store::RunFilter::labels),
//! `agentctl runs --label`).
//!
//! An operator's cancel ([`OperatorStore::cancel_run`](crate::store::OperatorStore::cancel_run)) reaches a
//! run the runner is executing at its next commit: the store refuses the commit with
//! [`StoreError::CancelRequested`], the runner writes the `cancel` transition in the
//! step's place ([`RunStore::accept_cancel`](crate::store::RunStore::accept_cancel)) and runs
//! the saga's compensations, journaled calls of the refused step included, and the run
//! ends `cancelled`. A run claimed with a cancel pending is cancelled before its handler
//! runs. A terminate ([`OperatorStore::terminate_run`](crate::store::OperatorStore::terminate_run)) fences
//! the runner out instead: its next write is refused with `LeaseLost`, and it stops.

mod builder;
mod caches;
mod children;
mod commit;
mod config;
mod cx;
mod edit;
mod error;
mod explore;
mod faults;
pub(crate) mod imported;
mod limits;
mod payload;
mod redaction;
mod retention;
mod route;
mod saga;
mod shared;
mod signal;
mod spend;
mod start;
mod step;
mod versions;
mod worker;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use tracing::{Instrument, info_span, warn};

/// The redactor's functions, where they were first published.
pub use crate::secrets::{SECRET_PIECE, redact_fields as redact, redact_secrets};
pub use builder::RunnerBuilder;
pub use children::child_run_id;
pub(crate) use commit::renew_if_due;
pub use config::RunnerConfig;
pub use error::RunnerError;
pub use explore::{Choice, Exploration, ExploreConfig, Scenario, Unexplored, explore};
pub use faults::{Crash, CrashAt, FaultHook, FaultPoint, NoFaults};
pub use imported::ImportedTools;
pub use retention::Retention;
pub use shared::StepOutcome;
use shared::metric_outcome;
pub(crate) use shared::{Inner, Known, keyed};
pub use spend::journal_spend;
pub use start::{JsonSignaller, JsonStarter, StartError, initial_state, initial_states};
pub use versions::{claim_entries, migrate_claimed, plan_migration};
pub use worker::{
    CHANGED_GRAPH_LISTED, SUSPECT_CLAIMS, VersionReport, Worker, WorkerConfig, WorkerStats,
};

use crate::agent::{Agent, Handle, RoutedByCode};
use crate::router::Router;
use crate::store::FailureCode;
use crate::store::{
    Budget, ClaimReads, Claimed, Labels, Lease, NewRun, RunFailure, RunRecord, RunStatus, Store,
    StoreError,
};
use crate::tool::ToolBox;
use crate::toolset::ToolsFor;

/// Executes runs of agent `A` with handlers `H`.
pub struct Runner<A, H> {
    pub(crate) inner: Arc<Inner>,
    handlers: Arc<H>,
    agent: PhantomData<fn() -> A>,
}

impl<A, H> Clone for Runner<A, H> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            handlers: Arc::clone(&self.handlers),
            agent: PhantomData,
        }
    }
}

impl<A: Agent, H> fmt::Debug for Runner<A, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("agent", &A::NAME)
            .field("worker", &self.inner.config.worker_id)
            .field("store", &self.inner.store)
            .finish_non_exhaustive()
    }
}

/// What [`RunnerBuilder`] hands over to make a runner.
struct Parts<H> {
    store: Arc<dyn Store>,
    handlers: H,
    tools: ToolBox,
    router: Option<Arc<dyn Router>>,
    config: RunnerConfig,
    faults: Arc<dyn FaultHook>,
    imported: ImportedTools,
}

/// A claimed run after the checks before its first step.
// Moved out of once, as soon as it is returned: boxing the ended run would cost more.
#[allow(clippy::large_enum_variant)]
enum Ready {
    /// The run ended there (dead-lettered or quarantined).
    Ended(RunRecord),
    /// The run is to be stepped.
    Steps {
        lease: Lease,
        record: Box<RunRecord>,
        known: Known,
        read_cache: caches::ReadCache,
    },
}

impl<A, H> Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// A runner for agent `A` over `store`, calling `handlers` and `tools`, to be
    /// completed: a router for an agent with `route = llm` states, settings, a fault hook,
    /// imported tools ([`RunnerBuilder`]), then [`build`](RunnerBuilder::build).
    ///
    /// `tools` is the agent's generated tools struct (`CheckoutTools` for `Checkout`: a
    /// missing tool does not compile) or a [`ToolBox`] (checked by `build`, for tools known
    /// only at run time).
    pub fn builder(
        store: Arc<dyn Store>,
        handlers: H,
        tools: impl ToolsFor<A>,
    ) -> RunnerBuilder<A, H> {
        RunnerBuilder::new(store, handlers, tools.into_tool_box())
    }

    /// The short form of [`builder`](Self::builder)`(store, handlers, tools).build()`: a
    /// runner with the default settings for an agent no state of which is routed by an LLM
    /// ([`RoutedByCode`]). An agent with a `route = llm` state needs
    /// [`router`](RunnerBuilder::router), so a runner without one does not compile.
    ///
    /// # Errors
    /// As [`RunnerBuilder::build`].
    pub fn new(
        store: Arc<dyn Store>,
        handlers: H,
        tools: impl ToolsFor<A>,
    ) -> Result<Self, RunnerError>
    where
        A: RoutedByCode,
    {
        Self::builder(store, handlers, tools).build()
    }

    fn assemble(parts: Parts<H>) -> Result<Self, RunnerError> {
        let Parts {
            store,
            handlers,
            mut tools,
            router,
            config,
            faults,
            imported,
        } = parts;
        let graph = A::graph();
        if let Some(cycle) = crate::agent::dag_child_cycle::<A>() {
            return Err(RunnerError::DagChildCycle {
                agent: A::NAME.to_owned(),
                cycle,
            });
        }
        for declared in &graph.tools {
            let problem = match tools.get(&declared.name) {
                None => Some(format!("tool `{}` is not in the tool box", declared.name)),
                Some(t) if t.kind() != declared.kind => Some(format!(
                    "tool `{}` is declared {} but the tool box has it as {}",
                    declared.name,
                    declared.kind,
                    t.kind()
                )),
                Some(_) => None,
            };
            if let Some(problem) = problem {
                return Err(RunnerError::ToolBox {
                    agent: A::NAME.to_owned(),
                    problem,
                });
            }
        }
        if router.is_none()
            && let Some(state) = graph
                .states
                .iter()
                .find(|s| s.route == crate::graph::Routing::Llm)
        {
            return Err(RunnerError::NoRouter(state.name.clone()));
        }
        let problems = imported.problems(graph, &tools);
        if !problems.is_empty() {
            return Err(RunnerError::ToolBox {
                agent: A::NAME.to_owned(),
                problem: problems.join("; "),
            });
        }
        for tool in imported.tools() {
            tools = tools.with_dyn(Arc::clone(tool));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                tools,
                imported,
                router,
                redactor: config.redactor(),
                config,
                faults,
                graph,
                fingerprint: graph.fingerprint(),
                registered: tokio::sync::OnceCell::new(),
                limits_declared: tokio::sync::OnceCell::new(),
                switches: caches::ToolSwitches::default(),
                marked: caches::MarkedFields::default(),
            }),
            handlers: Arc::new(handlers),
            agent: PhantomData,
        })
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &RunnerConfig {
        &self.inner.config
    }

    /// Create run `run_id` in `initial` (idempotent: starting the same run twice returns it),
    /// and, at this runner's first start, store the agent's graph for `agentctl`.
    ///
    /// # Errors
    /// [`RunnerError::NotInitial`] when `initial` is not in the initial state;
    /// [`RunnerError::NoRouter`] when a state is routed by an LLM and the runner has no
    /// router; store errors.
    pub async fn start(&self, run_id: &str, initial: A) -> Result<RunRecord, RunnerError> {
        self.start_with_labels(run_id, initial, Labels::new()).await
    }

    /// [`start`](Self::start) with labels to find the run by
    /// ([`RunFilter::labels`](crate::store::RunFilter::labels), `agentctl runs --label`).
    ///
    /// # Errors
    /// As [`start`](Self::start); [`StoreError::InvalidLabel`] for a label the store
    /// refuses ([`validate_labels`](crate::store::validate_labels)).
    pub async fn start_with_labels(
        &self,
        run_id: &str,
        initial: A,
        labels: Labels,
    ) -> Result<RunRecord, RunnerError> {
        let new = self.new_run(run_id, &initial, labels).await?;
        Ok(self.inner.store.create_run(new).await?)
    }

    /// [`start_with_labels`](Self::start_with_labels) with a budget for the whole run in
    /// place of the agent's (`#[agent(budget(...))]`): what it may spend in model tokens and
    /// cost, asks and tool calls before it takes its state's `on_budget` edge. An operator
    /// can change it later ([`set_budget`](Self::set_budget)).
    ///
    /// # Errors
    /// As [`start_with_labels`](Self::start_with_labels);
    /// [`RunnerError::InvalidBudget`] for a limit of zero or past
    /// [`MAX_LIMIT`](crate::store::MAX_LIMIT).
    pub async fn start_with_budget(
        &self,
        run_id: &str,
        initial: A,
        labels: Labels,
        budget: Budget,
    ) -> Result<RunRecord, RunnerError> {
        budget.validate()?;
        let new = self.new_run(run_id, &initial, labels).await?;
        Ok(self
            .inner
            .store
            .create_run(new.with_budget(Some(budget)))
            .await?)
    }

    /// Set run `run_id`'s budget for the whole run (`None`, or one without a limit: none),
    /// for an operator raising the budget of a run that spent it: the run keeps its spend,
    /// and checks the new budget from its next claim. A run that ended in its `on_budget`
    /// state goes on from there as its graph says; one that failed on its budget can then be
    /// retried.
    ///
    /// # Errors
    /// [`RunnerError::InvalidBudget`] for a limit of zero or past
    /// [`MAX_LIMIT`](crate::store::MAX_LIMIT); [`StoreError::NotFound`].
    pub async fn set_budget(
        &self,
        run_id: &str,
        budget: Option<Budget>,
    ) -> Result<RunRecord, RunnerError> {
        if let Some(b) = &budget {
            b.validate()?;
        }
        let budget = budget.filter(|b| !b.is_unlimited());
        Ok(self.inner.store.set_budget(run_id, budget).await?)
    }

    /// [`start`](Self::start) and [`run`](Self::run) in one: create run `run_id` in
    /// `initial` already claimed by this runner, and drive it until it is final or waiting.
    ///
    /// Where `start` then `run` write the run, then claim it and read what its first step
    /// needs, this creates it claimed in one write ([`RunStore::create_run_claimed`](crate::store::RunStore::create_run_claimed)): no
    /// other worker can take it in between, and a short run costs two statements less
    /// (W1 in `BENCHMARKS.md`). Idempotent as `start`: for a run of this id created from
    /// the same request it is `run`.
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`run`](Self::run).
    pub async fn start_and_run(&self, run_id: &str, initial: A) -> Result<RunRecord, RunnerError> {
        let new = self.new_run(run_id, &initial, Labels::new()).await?;
        let claimed = self
            .inner
            .store
            .create_run_claimed(
                new,
                &self.inner.config.worker_id,
                self.inner.config.lease_ttl,
            )
            .await?;
        self.drive_if_claimed(run_id, claimed.map(Box::new)).await
    }

    /// The run `start` creates, checked; the agent's graph stored at the first.
    async fn new_run(
        &self,
        run_id: &str,
        initial: &A,
        labels: Labels,
    ) -> Result<NewRun, RunnerError> {
        self.check_router()?;
        let name = initial.state_name();
        if !self.inner.graph.state(name).is_some_and(|s| s.initial) {
            return Err(RunnerError::NotInitial(name.to_owned()));
        }
        self.inner
            .registered
            .get_or_try_init(|| self.inner.store.register_agent(self.inner.graph))
            .await?;
        let mut state = serde_json::to_value(initial)
            .map_err(|e| StoreError::backend(format!("initial state does not serialize: {e}")))?;
        self.inner.seal_state(&mut state, name)?;
        let limit = self.inner.config.max_payload_bytes;
        payload::fits(&state, limit, &format!("the initial state `{name}`"))
            .map_err(RunnerError::PayloadTooLarge)?;
        Ok(
            NewRun::new(run_id, A::NAME, self.inner.fingerprint.clone(), name, state)
                .with_labels(crate::trace::with_current_parent(labels))
                .with_agent_version(A::VERSION)
                .with_budget(self.inner.graph.budget),
        )
    }

    /// Drive a run until it is final or waiting: claim it, step, release.
    ///
    /// # Errors
    /// [`RunnerError::LeaseLost`] when another worker holds or takes the run; store errors
    /// after retries; [`RunnerError::Crashed`] when a fault hook crashed the runner;
    /// [`RunnerError::NoRouter`] as for [`start`](Self::start), before anything is claimed.
    /// After an error the lease is released (except when it was lost or a crash was
    /// injected), so the run can be claimed again at once.
    ///
    /// A run whose stored row does not read is quarantined by the store when claimed
    /// ([`RunStore::claim_run`](crate::store::RunStore::claim_run)) and returned as far as it reads ([`HistoryStore::inspect_run`](crate::store::HistoryStore::inspect_run)), so
    /// that a caller driving several runs goes on with the others.
    pub async fn run(&self, run_id: &str) -> Result<RunRecord, RunnerError> {
        self.check_router()?;
        let claimed = self
            .inner
            .store
            .claim_run(
                run_id,
                &self.inner.config.worker_id,
                self.inner.config.lease_ttl,
            )
            .await;
        let claimed = match claimed {
            Err(StoreError::Corrupt { .. }) => None,
            other => other?,
        };
        self.drive_if_claimed(run_id, claimed.map(Box::new)).await
    }

    /// Drive `claimed`; without a claim, the run as it is when final, else
    /// [`RunnerError::LeaseLost`] (another worker holds it).
    async fn drive_if_claimed(
        &self,
        run_id: &str,
        claimed: Option<Box<Claimed>>,
    ) -> Result<RunRecord, RunnerError> {
        let Some(claimed) = claimed else {
            let record = self
                .inner
                .store
                .inspect_run(run_id)
                .await?
                .ok_or_else(|| RunnerError::NotFound(run_id.to_owned()))?
                .record;
            if record.status.is_final() {
                return Ok(record);
            }
            return Err(RunnerError::LeaseLost(run_id.to_owned()));
        };
        self.drive(claimed).await
    }

    /// [`RunnerError::NoRouter`] for an agent with a routed state and no router: found
    /// before the first run is created or claimed, not at the routed state after commits;
    /// a [`Worker`](super::Worker) checks it before its first claim and claims nothing.
    /// (A derived agent cannot get here: `Runner::new` does not compile for it and the
    /// builder's `build` only once `.router(..)` was given.)
    pub(crate) fn check_router(&self) -> Result<(), RunnerError> {
        if self.inner.router.is_some() {
            return Ok(());
        }
        match (self.inner.graph.states.iter()).find(|s| s.route == crate::graph::Routing::Llm) {
            Some(state) => Err(RunnerError::NoRouter(state.name.clone())),
            None => Ok(()),
        }
    }

    /// Drive a claimed run until it is final or waiting, then release the lease. What the
    /// claim read for it (`reads`), if anything, spares its first step those reads.
    ///
    /// The claim comes boxed: a worker holds one of these futures per run in flight, and
    /// an `async fn` keeps its arguments for its whole life beside the locals they are
    /// moved to; boxed, the run's record is held once (issue 22, W4).
    pub(crate) async fn drive(&self, claimed: Box<Claimed>) -> Result<RunRecord, RunnerError> {
        // One span per claim ("run"), a child of the run's own span: every worker that
        // claims the run reports to the same trace (`crate::trace`).
        let span = info_span!(
            "run",
            otel.name = %format_args!("run {}", A::NAME),
            gen_ai.agent.name = A::NAME,
            run_id = %claimed.record.id,
            worker = %self.inner.config.worker_id,
        );
        crate::trace::adopt(&span, &claimed.record.id, &claimed.record.labels);
        let driven = self.drive_claimed(claimed).instrument(span).await;
        if let Ok(record) = &driven {
            crate::trace::finish(record);
        }
        driven
    }

    async fn drive_claimed(&self, claimed: Box<Claimed>) -> Result<RunRecord, RunnerError> {
        crate::metrics::claimed(A::NAME);
        // The checks before the first step run in a future of their own, freed before the
        // steps: this one lives as long as the run is in flight, one per run (W4).
        //
        // What holds a run record by value (`Ready`, a step's outcome) is taken apart
        // where no await follows while it is in scope: a match keeps its scrutinee's
        // space through the awaits of its arms, and this future keeps that space for the
        // run's whole life.
        let (mut lease, mut record, mut known, read_cache) = {
            let ready = Box::pin(self.ready_to_step(claimed)).await?;
            match ready {
                Ready::Ended(record) => return Ok(record),
                Ready::Steps {
                    lease,
                    record,
                    known,
                    read_cache,
                } => (lease, record, known, read_cache),
            }
        };
        let ended = loop {
            // The state's name from the graph (`'static`, a bounded label); a stored name
            // the graph does not know is quarantined by the step, and counted as `unknown`.
            let state =
                (self.inner.graph.state(&record.state_name)).map_or("unknown", |s| &*s.name);
            let began = std::time::Instant::now();
            let stepped = self
                .step_inner(&mut lease, record, known, &read_cache)
                .await;
            crate::metrics::step(A::NAME, state, metric_outcome(&stepped), began.elapsed());
            match stepped {
                Ok(StepOutcome::Committed(next)) => {
                    record = Box::new(next);
                    known = Known::Fresh;
                }
                Ok(
                    StepOutcome::Waiting(r) | StepOutcome::Finished(r) | StepOutcome::Deferred(r),
                ) => break Ok(Box::new(r)),
                Err(e) => break Err(e),
            }
        };
        match ended {
            Ok(r) => {
                self.release_if_held(&lease, &r).await;
                Ok(*r)
            }
            Err(e) => {
                if matches!(e, RunnerError::LeaseLost(_)) {
                    crate::metrics::lease_lost(A::NAME);
                }
                Box::pin(self.release_after(&lease, &e)).await;
                Err(e)
            }
        }
    }

    /// What comes before a claimed run's first step: a run claimed too often without
    /// progress is dead-lettered, a run whose history contradicts its row is
    /// quarantined (both end here); otherwise the run, boxed, and what its first step
    /// knows.
    async fn ready_to_step(&self, claimed: Box<Claimed>) -> Result<Ready, RunnerError> {
        let Claimed {
            lease,
            record,
            reads,
        } = *claimed;
        self.inner
            .faults
            .check(FaultPoint::RunClaimed, &record.id, record.version)?;
        if record.claims_without_progress >= self.inner.config.max_claims_without_progress {
            return self.dead_letter(&lease, record).await.map(Ready::Ended);
        }
        if let Some(error) = self.history_problem(&record, reads.as_ref()).await? {
            // The run row and its history disagree: a commit would fail or fork. The
            // run is quarantined without writing a version, fenced by this lease: no
            // other worker claims it in between, and a claim answered late (another
            // worker has taken the run on since, so its history moved) is refused
            // with `LeaseLost`, leaving that worker's run alone.
            return match self.inner.store.quarantine(&lease, error).await {
                Err(StoreError::LeaseLost { .. }) => Err(RunnerError::LeaseLost(record.id)),
                quarantined => Ok(Ready::Ended(quarantined?)),
            };
        }
        // The run's read results, kept from one step to the next: known to be none
        // before a first step that has journaled nothing.
        let nothing_yet =
            record.version == 0 && reads.as_ref().is_some_and(|r| !r.journaled_at_version);
        let read_cache = if nothing_yet {
            caches::empty_read_cache()
        } else {
            caches::unloaded_read_cache()
        };
        // After a commit of our own, nothing can be journaled at the new version yet:
        // the next step skips reading its journal. The first step uses what the claim
        // read, when it read anything.
        Ok(Ready::Steps {
            lease,
            record: Box::new(record),
            known: reads.map_or(Known::Nothing, Known::Claimed),
            read_cache,
        })
    }

    /// Dead-letter a run claimed too often without progress (its step crashes its
    /// workers), cancelling its children first.
    async fn dead_letter(
        &self,
        lease: &Lease,
        record: RunRecord,
    ) -> Result<RunRecord, RunnerError> {
        let error = RunFailure {
            code: FailureCode::CrashLoop,
            message: format!(
                "{} lost claims in a row without progress; the step crashes its worker",
                record.claims_without_progress
            ),
        };
        let why = format!("its parent was dead-lettered: {}", error.message);
        children::cancel_children(self.inner.store.as_ref(), self.inner.graph, &record, &why)
            .await?;
        let record = self
            .inner
            .commit_status(lease, &record, RunStatus::DeadLettered, Some(error))
            .await?;
        self.release_if_held(lease, &record).await;
        Ok(record)
    }

    /// Whether the stored history of a claimed run contradicts its run row: no versions, a
    /// last version other than the run's, or a gap. The span is the one the claim read
    /// (`reads`), else it is read here.
    async fn history_problem(
        &self,
        record: &RunRecord,
        reads: Option<&ClaimReads>,
    ) -> Result<Option<RunFailure>, RunnerError> {
        let span = match reads {
            Some(reads) => Ok(reads.span),
            None => self.inner.store.version_span(&record.id).await,
        };
        let problem = match span {
            Err(StoreError::Corrupt { message, .. }) => {
                Some(format!("history unreadable: {message}"))
            }
            Err(e) => return Err(e.into()),
            Ok(None) => Some("the run has no stored versions".to_owned()),
            Ok(Some(span)) if span.last != record.version => Some(format!(
                "the run is at version {} but its last stored version is {}",
                record.version, span.last
            )),
            Ok(Some(span)) if span.count != span.last - span.first + 1 => Some(format!(
                "versions {}..={} have {} rows: the history has a gap",
                span.first, span.last, span.count
            )),
            Ok(Some(_)) => None,
        };
        Ok(problem.map(|message| RunFailure {
            code: FailureCode::HistoryInconsistent,
            message,
        }))
    }

    /// Release the lease unless `record` shows it ended already: a commit to a final
    /// status ends it in the same write (`RunStore::commit_step`).
    async fn release_if_held(&self, lease: &Lease, record: &RunRecord) {
        if record.lease_owner.is_none() {
            return;
        }
        if let Err(e) = self.inner.store.release_lease(lease).await {
            warn!(error = %e, "could not release lease; it will expire");
        }
    }

    /// After a step returned `error`, give the lease up so that the run can be claimed again
    /// at once (by this worker's next attempt or another) rather than when the lease runs
    /// out, which read as `LeaseLost` at the next start. Not after a lost lease (it is not
    /// ours) nor an injected crash (a crashed process releases nothing).
    async fn release_after(&self, lease: &Lease, error: &RunnerError) {
        if matches!(error, RunnerError::LeaseLost(_) | RunnerError::Crashed(_)) {
            return;
        }
        if matches!(error, RunnerError::VersionNotRunnable { .. }) {
            // Nothing was executed: the claim does not count against the run.
            if let Err(e) = self.inner.store.hand_back(lease).await {
                warn!(error = %e, "could not hand a run of another version back; its lease will expire");
            }
            return;
        }
        if let Err(e) = self.inner.store.release_lease(lease).await {
            warn!(error = %e, "could not release lease after a step error; it will expire");
        }
    }

    /// Execute one step of a claimed run.
    ///
    /// # Errors
    /// As [`Runner::run`].
    pub async fn step(
        &self,
        lease: &mut Lease,
        record: RunRecord,
    ) -> Result<StepOutcome, RunnerError> {
        self.step_inner(
            lease,
            Box::new(record),
            Known::Nothing,
            &caches::unloaded_read_cache(),
        )
        .await
    }

    async fn step_inner(
        &self,
        lease: &mut Lease,
        record: Box<RunRecord>,
        known: Known,
        read_cache: &caches::ReadCache,
    ) -> Result<StepOutcome, RunnerError> {
        if record.agent != A::NAME {
            return Err(RunnerError::WrongAgent {
                run_id: record.id.clone(),
                expected: A::NAME.to_owned(),
                found: record.agent.clone(),
            });
        }
        if record.status.is_final() {
            return Ok(StepOutcome::Finished(*record));
        }
        if record.agent_version != A::VERSION {
            // Boxed, as the step below: it is rare, and kept out of every step's future.
            return Box::pin(self.step_other_version(lease, *record)).await;
        }
        let state: A = match self.check_loaded(&record) {
            Ok(state) => state,
            Err(error) => {
                // Quarantined without writing a version: a version is hash-chained over
                // its state, and this state is one no step may build on. Its stored form
                // (a patch from the row's state) could not replay to it either when the row
                // was changed outside the store, which would break the chain for good.
                return match self.inner.store.quarantine(lease, error).await {
                    Err(StoreError::LeaseLost { .. }) => Err(RunnerError::LeaseLost(record.id)),
                    quarantined => Ok(StepOutcome::Finished(quarantined?)),
                };
            }
        };
        if record.cancel_requested.is_some() && record.status != RunStatus::Compensating {
            // Cancelled while another worker held the run (or before this one stepped it):
            // take the cancel before any tool call of the step.
            let record = Box::pin(self.inner.accept_cancel(lease, &record.id)).await?;
            return Ok(StepOutcome::after_commit(record));
        }
        renew_if_due(&self.inner, lease, &record.id, record.version).await?;
        let span = info_span!(
            "step",
            otel.name = %format_args!("step {}", record.state_name),
            run_id = %record.id,
            state = record.state_name.as_str(),
            version = record.version,
            worker = %self.inner.config.worker_id,
        );
        // A child of the run's span, not of this claim's: a worker killed mid-claim never
        // exports its claim's span, and the steps it finished stay in the run's tree.
        crate::trace::adopt(&span, &record.id, &record.labels);
        // Boxed: moving the step's future through every layer of every step cost more
        // than one allocation (about a fifth of a worker's CPU per step with 64 runs in
        // flight on PostgreSQL). Its rare paths are boxed inside it, so the future every
        // run in flight holds while its tool call waits stays small (BENCHMARKS.md, W4).
        // The record stays boxed from the claim on, so that no future holds it twice (as
        // its argument and as the local it is moved to).
        let outcome = Box::pin(step::execute::<A, H>(
            &self.inner,
            &*self.handlers,
            lease,
            record,
            state,
            known,
            read_cache,
        ))
        .instrument(span.clone())
        .await;
        if let Ok(
            StepOutcome::Committed(r)
            | StepOutcome::Waiting(r)
            | StepOutcome::Finished(r)
            | StepOutcome::Deferred(r),
        ) = &outcome
        {
            span.in_scope(|| {
                tracing::debug!(to = %r.state_name, status = r.status.as_str(), "step ended");
            });
        }
        outcome
    }

    /// Refuse to execute a run whose stored state no longer deserializes, or whose graph
    /// changed so that its state no longer exists: quarantine it before any tool call.
    fn check_loaded(&self, record: &RunRecord) -> Result<A, RunFailure> {
        let graph = self.inner.graph;
        if record.fingerprint != self.inner.fingerprint && graph.state(&record.state_name).is_none()
        {
            return Err(RunFailure {
                code: FailureCode::GraphIncompatible,
                message: format!(
                    "the run is in state `{}`, which the current graph of `{}` (fingerprint {}) \
                     no longer has; it was started with fingerprint {}",
                    record.state_name,
                    A::NAME,
                    &self.inner.fingerprint[..12],
                    short(&record.fingerprint)
                ),
            });
        }
        let opened = self
            .inner
            .config
            .open_state(&record.state)
            .map_err(|e| RunFailure {
                code: e.code().into(),
                message: format!("state `{}`: {e}", record.state_name),
            })?;
        let state = A::deserialize(&*opened).map_err(|e| RunFailure {
            code: FailureCode::StateCorrupt,
            message: format!(
                "stored state of `{}` does not deserialize: {e}",
                record.state_name
            ),
        })?;
        if state.state_name() != record.state_name {
            return Err(RunFailure {
                code: FailureCode::StateCorrupt,
                message: format!(
                    "stored state name `{}` disagrees with the stored state `{}`",
                    record.state_name,
                    state.state_name()
                ),
            });
        }
        Ok(state)
    }
}
fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}
