//! A cycle through `children(...)` that a `dag` agent is part of cannot be seen by the derive
//! (it expands one enum at a time), so the runner refuses it at start-up, naming the cycle;
//! an agent that is not a `dag` may still start runs of itself.

use std::sync::Arc;

use durable_agents::agent::dag_child_cycle;
use durable_agents::runner::{Runner, RunnerError};
use durable_agents::store::Store;
use durable_agents::store::memory::MemoryStore;
use durable_agents::tool::ToolBox;
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(dag)]
enum Parent {
    #[agent(initial, children(Child), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Child {
    #[agent(initial, to(Ask))]
    Start,
    #[agent(children(Parent), to(Done))]
    Ask,
    #[agent(terminal)]
    Done,
}

/// Not a `dag`: starting runs of itself is recursion bounded by `max_child_depth`.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Nest {
    #[agent(initial, children(Self), to(Done))]
    Go,
    #[agent(terminal)]
    Done,
}

struct H;

impl ParentHandlers for H {
    async fn start(
        &self,
        ctx: Ctx<'_, parent::Start>,
        _: parent::Start,
    ) -> StepResult<parent::Start> {
        Ok(ctx.to(parent::Done))
    }
}

impl ChildHandlers for H {
    async fn start(&self, ctx: Ctx<'_, child::Start>, _: child::Start) -> StepResult<child::Start> {
        Ok(ctx.to(child::Ask))
    }

    async fn ask(&self, ctx: Ctx<'_, child::Ask>, _: child::Ask) -> StepResult<child::Ask> {
        Ok(ctx.to(child::Done))
    }
}

impl NestHandlers for H {
    async fn go(&self, ctx: Ctx<'_, nest::Go>, _: nest::Go) -> StepResult<nest::Go> {
        Ok(ctx.to(nest::Done))
    }
}

fn store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

#[test]
fn a_cycle_through_a_dag_agent_is_found_from_either_end() {
    assert_eq!(
        dag_child_cycle::<Parent>().as_deref(),
        Some("`Parent` (state `Start`) -> `Child` (state `Ask`) -> `Parent`")
    );
    assert_eq!(
        dag_child_cycle::<Child>().as_deref(),
        Some("`Child` (state `Ask`) -> `Parent` (state `Start`) -> `Child`")
    );
}

#[test]
fn the_runner_refuses_it_at_start_up() {
    let Err(e) = Runner::<Parent, H>::new(store(), H, ToolBox::new()) else {
        panic!("a runner for an agent in a dag cycle");
    };
    assert!(matches!(e, RunnerError::DagChildCycle { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("`Parent` (state `Start`) -> `Child` (state `Ask`) -> `Parent`"),
        "{text}"
    );
    assert!(Runner::<Child, H>::new(store(), H, ToolBox::new()).is_err());
}

#[test]
fn recursion_without_dag_is_allowed() {
    assert_eq!(dag_child_cycle::<Nest>(), None);
    assert!(Runner::<Nest, H>::new(store(), H, ToolBox::new()).is_ok());
}
