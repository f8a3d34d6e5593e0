//! What the runner finds before it runs anything, and what it leaves behind when a step
//! stops with an error.

use std::sync::Arc;

use durable_agents::runner::{Runner, RunnerError};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RunFilter, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox};
use serde::{Deserialize, Serialize};

/// The model picks the ending.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Pick {
    #[agent(initial, route = llm, to(Left, Right))]
    Start,
    #[agent(terminal)]
    Left,
    #[agent(terminal)]
    Right,
}

/// No model: the handler goes straight to the end.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Plain {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

/// The handlers of both.
#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl PickHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, pick::Start>,
        route: pick::StartRoute,
        _: pick::Start,
    ) -> StepResult<pick::Start> {
        Ok(match route {
            pick::StartRoute::Left => ctx.to(pick::Left),
            pick::StartRoute::Right => ctx.to(pick::Right),
        })
    }
}

impl PlainHandlers for Handlers {
    async fn start(&self, ctx: Ctx<'_, plain::Start>, _: plain::Start) -> StepResult<plain::Start> {
        Ok(ctx.to(plain::Done))
    }
}

/// What only a hand-written impl can claim: `Pick` has a routed state. A derived agent
/// cannot get a runner without a router (`Runner::new` does not compile for it: the ui spec
/// `runner/routed-agent-without-router.rs`); this checks the constructor's own guard.
impl durable_agents::agent::RoutedByCode for Pick {}

#[tokio::test]
async fn a_routed_agent_without_a_router_is_refused_when_the_runner_is_built() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    match Runner::<Pick, _>::new(Arc::clone(&store), Handlers, ToolBox::new()) {
        Err(RunnerError::NoRouter(state)) => assert_eq!(state, "Start"),
        other => panic!("a runner without a router: {other:?}"),
    }
    assert!(
        store
            .list_runs(&RunFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "no run was created"
    );
}

#[tokio::test]
async fn a_step_that_stops_with_an_error_gives_its_lease_back() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let plain = Runner::<Plain, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    plain.start("p", Plain::Start).await.unwrap();
    // A runner of another agent claims the run, then finds it is not its own.
    let other = Runner::<Pick, _>::builder(Arc::clone(&store), Handlers, ToolBox::new())
        .router(Arc::new(durable_agents::router::ScriptedRouter::from_fn(
            |_| durable_agents::router::ScriptedRouter::choose("Left", "{}"),
        )))
        .build()
        .unwrap();
    assert!(matches!(
        other.run("p").await,
        Err(RunnerError::WrongAgent { .. })
    ));
    let after = store.load_run("p").await.unwrap().unwrap();
    assert_eq!(
        after.lease_owner, None,
        "the lease was given back: {after:?}"
    );
    // So the run's own runner takes it at once, rather than after the lease's 30 s.
    let done = plain.run("p").await.unwrap();
    assert!(done.status.is_final(), "{done:?}");
}

#[tokio::test]
async fn start_and_run_drives_a_new_run_and_is_idempotent() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let plain = Runner::<Plain, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    let done = plain.start_and_run("p", Plain::Start).await.unwrap();
    assert_eq!(
        (done.status, done.state_name.as_str(), done.version),
        (durable_agents::store::RunStatus::Completed, "Done", 1),
        "{done:?}"
    );
    assert_eq!(done.lease_owner, None, "the final commit ended the lease");
    // A retry of the same request answers with the finished run; nothing runs twice.
    let again = plain.start_and_run("p", Plain::Start).await.unwrap();
    assert_eq!(again.version, 1, "{again:?}");
    assert_eq!(
        store.history("p").await.unwrap().len(),
        2,
        "start and one step"
    );
}

/// A runner is configured where it is built (configuring a clone of a built runner used to
/// panic; there is no longer a way to): two runners built over one store keep their own
/// settings, a clone shares its runner's, and the runs of each complete.
#[tokio::test]
async fn runners_are_configured_where_they_are_built() {
    let store = Arc::new(MemoryStore::new());
    let runner = Runner::<Plain, Handlers>::new(store.clone(), Handlers, ToolBox::new()).unwrap();
    let original_worker = runner.config().worker_id.clone();
    let configured = Runner::<Plain, Handlers>::builder(store.clone(), Handlers, ToolBox::new())
        .config(durable_agents::runner::RunnerConfig {
            worker_id: "the-other".into(),
            ..durable_agents::runner::RunnerConfig::default()
        })
        .build()
        .unwrap();
    assert_eq!(configured.config().worker_id, "the-other");
    assert_eq!(configured.clone().config().worker_id, "the-other");
    assert_eq!(runner.config().worker_id, original_worker);
    for (id, r) in [("by-default", &runner), ("by-other", &configured)] {
        r.start(id, Plain::Start).await.unwrap();
        let done = r.run(id).await.unwrap();
        assert_eq!(done.state_name, "Done", "{id}");
    }
}
