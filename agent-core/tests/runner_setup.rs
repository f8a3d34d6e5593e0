//! What the runner finds before it runs anything, and what it leaves behind when a step
//! stops with an error.

use std::sync::Arc;
use std::time::Duration;

use durable_agents::runner::{Runner, RunnerError, Worker, WorkerConfig};
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
    ) -> StepResult<pick::Start> {
        Ok(match route {
            pick::StartRoute::Left => ctx.to(pick::Left::new()),
            pick::StartRoute::Right => ctx.to(pick::Right::new()),
        })
    }
}

impl PlainHandlers for Handlers {
    async fn start(&self, ctx: Ctx<'_, plain::Start>) -> StepResult<plain::Start> {
        Ok(ctx.to(plain::Done::new()))
    }
}

#[tokio::test]
async fn a_routed_agent_without_a_router_is_refused_before_anything_is_stored() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Pick, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    match runner.start("r", Pick::Start).await {
        Err(RunnerError::NoRouter(state)) => assert_eq!(state, "Start"),
        other => panic!("start without a router: {other:?}"),
    }
    assert!(
        store
            .list_runs(&RunFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "no run was created"
    );
    assert!(matches!(
        runner.run("r").await,
        Err(RunnerError::NoRouter(_))
    ));
    // A worker says so once and claims nothing.
    let stats = Worker::new(runner, WorkerConfig::default())
        .run_until(tokio::time::sleep(Duration::from_secs(5)))
        .await;
    assert_eq!((stats.runs_driven, stats.errors), (0, 1), "{stats:?}");
}

#[tokio::test]
async fn a_step_that_stops_with_an_error_gives_its_lease_back() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let plain = Runner::<Plain, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    plain.start("p", Plain::Start).await.unwrap();
    // A runner of another agent claims the run, then finds it is not its own.
    let other = Runner::<Pick, _>::new(Arc::clone(&store), Handlers, ToolBox::new())
        .unwrap()
        .with_router(Arc::new(durable_agents::router::ScriptedRouter::from_fn(
            |_| durable_agents::router::ScriptedRouter::choose("Left", "{}"),
        )));
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
