//! `decision_timeout_ms` on a routed state bounds each ask of the model in that state,
//! in place of `RunnerConfig::decision_timeout`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use durable_agents::router::{RouteRequest, Router, RouterError, RouterReply, ScriptedRouter};
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{EntryKind, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox};
use serde::{Deserialize, Serialize};

/// Two routed states with the same choice; only `Quick` bounds its asks.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Triage {
    #[agent(initial, route = llm, to(Quick, Failed))]
    Patient,
    #[agent(route = llm, decision_timeout_ms = 100, to(Done, Failed), on_error = Failed)]
    Quick,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed,
}

#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl TriageHandlers for Handlers {
    async fn patient(
        &self,
        ctx: Ctx<'_, triage::Patient>,
        route: triage::PatientRoute,
        _: triage::Patient,
    ) -> StepResult<triage::Patient> {
        Ok(match route {
            triage::PatientRoute::Quick => ctx.to(triage::Quick),
            triage::PatientRoute::Failed => ctx.to(triage::Failed),
        })
    }

    async fn quick(
        &self,
        ctx: Ctx<'_, triage::Quick>,
        route: triage::QuickRoute,
        _: triage::Quick,
    ) -> StepResult<triage::Quick> {
        Ok(match route {
            triage::QuickRoute::Done => ctx.to(triage::Done),
            triage::QuickRoute::Failed => ctx.to(triage::Failed),
        })
    }
}

/// A model that takes 600 ms for every answer, then picks the first option it was offered.
#[derive(Debug)]
struct SlowModel;

#[async_trait]
impl Router for SlowModel {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let first = request.options.first().map_or("", |o| o.name.as_str());
        Ok(ScriptedRouter::choose(first, "{}"))
    }
}

#[tokio::test]
async fn a_state_bounds_its_own_asks() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Triage, _>::builder(Arc::clone(&store), Handlers, ToolBox::new())
        .router(Arc::new(SlowModel))
        .config(RunnerConfig {
            max_reasks: 1,
            ..RunnerConfig::default()
        })
        .build()
        .unwrap();
    runner.start("t", Triage::Patient).await.unwrap();
    let record = runner.run("t").await.unwrap();
    assert_eq!(record.state_name, "Failed", "{record:?}");

    let journal = store.journal("t", None).await.unwrap();
    let asks: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .map(|e| (e.state.as_str(), e.error_code.as_deref()))
        .collect();
    // `Patient` has the runner's 20 s default: its slow answer is accepted. `Quick` allows
    // 100 ms: both of its asks time out, and the state takes its failure path.
    assert_eq!(
        asks,
        [
            ("Patient", None),
            ("Quick", Some("ask.timeout")),
            ("Quick", Some("ask.timeout")),
        ],
        "{journal:#?}"
    );
}

#[test]
fn the_bound_is_in_the_graph_and_only_where_declared() {
    let graph = Triage::graph();
    assert_eq!(graph.state("Quick").unwrap().decision_timeout_ms, Some(100));
    assert_eq!(graph.state("Patient").unwrap().decision_timeout_ms, None);
}
