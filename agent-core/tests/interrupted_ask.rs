//! An ask of the model is journaled before it is sent: a worker killed while the model
//! thinks leaves a `started` decision entry (a trace, and a `decision_asked` event for
//! followers), and the worker that resumes asks again under the same index, counting the
//! interrupted attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use durable_agents::router::{RouteRequest, Router, RouterError, RouterReply, ScriptedRouter};
use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{CallStatus, EntryKind, EventCursor, EventKind, EventScope, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Ticket {
    #[agent(initial, route = llm, to(Closed, Escalated))]
    Open,
    #[agent(terminal)]
    Closed,
    #[agent(terminal)]
    Escalated,
}

#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl TicketHandlers for Handlers {
    async fn open(
        &self,
        ctx: Ctx<'_, ticket::Open>,
        route: ticket::OpenRoute,
        _: ticket::Open,
    ) -> StepResult<ticket::Open> {
        Ok(match route {
            ticket::OpenRoute::Closed => ctx.to(ticket::Closed),
            ticket::OpenRoute::Escalated => ctx.to(ticket::Escalated),
        })
    }
}

/// Counts the asks that reached it.
#[derive(Debug, Default)]
struct Model(AtomicU32);

#[async_trait]
impl Router for Model {
    async fn decide(&self, _: &RouteRequest) -> Result<RouterReply, RouterError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ScriptedRouter::choose("Closed", "{}"))
    }
}

fn runner(store: &Arc<dyn Store>, model: &Arc<Model>, worker: &str) -> Runner<Ticket, Handlers> {
    runner_with(store, model, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    model: &Arc<Model>,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Runner<Ticket, Handlers> {
    Runner::builder(Arc::clone(store), Handlers, ToolBox::new())
        .router(model.clone())
        .config(RunnerConfig {
            worker_id: worker.to_owned(),
            lease_ttl: Duration::from_millis(100),
            ..RunnerConfig::default()
        })
        .faults(faults)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_interrupted_ask_leaves_a_trace_and_is_asked_again_counted() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Arc::new(Model::default());
    let crashy = runner_with(
        &store,
        &model,
        "crashy",
        Arc::new(CrashAt::new(FaultPoint::LlmAnswered, 0)),
    );
    crashy.start("t", Ticket::Open).await.unwrap();
    assert!(matches!(
        crashy.run("t").await,
        Err(RunnerError::Crashed(_))
    ));

    // The model answered, but the worker died before the answer was journaled.
    let journal = store.journal("t", None).await.unwrap();
    assert_eq!(journal.len(), 1, "{journal:#?}");
    let trace = &journal[0];
    assert_eq!(
        (trace.kind, trace.status, trace.attempts),
        (EntryKind::Decision, CallStatus::Started, 1),
        "{trace:#?}"
    );
    assert_eq!(
        trace.input["options"],
        serde_json::json!(["Closed", "Escalated"])
    );
    let events = store
        .events(&EventScope::Run("t".into()), EventCursor::START, 100)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::DecisionAsked { options, .. } if options == &["Closed", "Escalated"])),
        "{events:#?}"
    );

    tokio::time::sleep(Duration::from_millis(150)).await;
    let record = runner(&store, &model, "healthy").run("t").await.unwrap();
    assert_eq!(record.state_name, "Closed");
    assert_eq!(model.0.load(Ordering::SeqCst), 2, "asked again once");
    let journal = store.journal("t", None).await.unwrap();
    let decisions: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .map(|e| (e.seq, e.status, e.attempts))
        .collect();
    assert_eq!(
        decisions,
        [(0, CallStatus::Succeeded, 2)],
        "one decision entry, the interrupted attempt counted: {journal:#?}"
    );
}
