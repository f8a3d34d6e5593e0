//! Tool calls run concurrently inside a step keep the journal index of the order they were
//! made in: a resumed step serves the ones that completed from the journal and runs the
//! others again with their same idempotency keys, and the saga undoes hybrids in reverse
//! index order, however the calls finished.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_agents::router::{RawChoice, RouterReply, ScriptedRouter};
use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerError};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{EntryKind, RunStatus, Store, idempotency_key};
use durable_agents::tool::kind;
use durable_agents::{
    Agent, Compensate, Ctx, Execute, StepResult, Tool, ToolBox, ToolContext, ToolError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The item to hold.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Item {
    /// Its number: item `n` answers after `DELAY_MS[n]`.
    pub n: u32,
}

/// Answers come back in the order 1, 3, 2, 0: neither the order the calls were made in nor
/// its reverse.
const DELAY_MS: [u64; 4] = [60, 10, 40, 25];

/// What the service saw: requests per idempotency key, the most calls in flight at once, and
/// the order of releases.
#[derive(Debug, Default)]
pub struct Service {
    requests: Mutex<BTreeMap<String, u32>>,
    in_flight: AtomicU32,
    most_in_flight: AtomicU32,
    released: Mutex<Vec<u32>>,
    /// Item that is refused (to fail the step), if any.
    refuse: Option<u32>,
}

/// Hold an item (hybrid: released when the run fails).
#[derive(Clone, Debug)]
pub struct Hold(Arc<Service>);

impl Tool for Hold {
    const NAME: &'static str = "Hold";
    type Kind = kind::Hybrid;
    type Input = Item;
    type Output = Item;
}

impl Execute for Hold {
    async fn execute(&self, item: Item, cx: &ToolContext) -> Result<Item, ToolError> {
        let s = &self.0;
        let key = cx.idempotency_key.clone().unwrap_or_default();
        *s.requests.lock().unwrap().entry(key).or_default() += 1;
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(DELAY_MS[item.n as usize])).await;
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        if s.refuse == Some(item.n) {
            return Err(ToolError::permanent(format!("item {} is gone", item.n)));
        }
        Ok(item)
    }
}

impl Compensate for Hold {
    type With = Release;
    fn compensation(&self, _: &Item, held: &Item) -> Item {
        held.clone()
    }
}

/// Give a held item back.
#[derive(Clone, Debug)]
pub struct Release(Arc<Service>);

impl Tool for Release {
    const NAME: &'static str = "Release";
    type Kind = kind::Write;
    type Input = Item;
    type Output = ();
}

impl Execute for Release {
    async fn execute(&self, item: Item, _: &ToolContext) -> Result<(), ToolError> {
        self.0.released.lock().unwrap().push(item.n);
        Ok(())
    }
}

/// Hold four items at once, then done.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(hybrid(Hold(compensate = Release)), write(Release)))]
pub enum Desk {
    #[agent(initial, tools(Hold), to(Held), on_error = Failed)]
    Start,
    #[agent(terminal)]
    Held { items: Vec<u32> },
    #[agent(terminal, compensate)]
    Failed { reason: String },
}

/// The handlers.
#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl DeskHandlers for Handlers {
    async fn start(&self, ctx: Ctx<'_, desk::Start>, _: desk::Start) -> StepResult<desk::Start> {
        let mut items = Vec::new();
        for held in ctx.call_each::<Hold>((0..4).map(|n| Item { n }), 4).await {
            items.push(held?.n);
        }
        Ok(ctx.to(desk::Held { items }))
    }
}

fn runner(store: &Arc<dyn Store>, service: &Arc<Service>) -> Runner<Desk, Handlers> {
    runner_with(store, service, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    service: &Arc<Service>,
    faults: Arc<dyn FaultHook>,
) -> Runner<Desk, Handlers> {
    let tools = ToolBox::new()
        .hybrid(Hold(Arc::clone(service)))
        .with(Release(Arc::clone(service)));
    Runner::builder(Arc::clone(store), Handlers, tools)
        .faults(faults)
        .build()
        .unwrap()
}

#[tokio::test]
async fn concurrent_calls_keep_their_creation_index() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let service = Arc::new(Service::default());
    let r = runner(&store, &service);
    r.start("par", Desk::Start).await.unwrap();
    let done = r.run("par").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state["Held"]["items"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(
        service.most_in_flight.load(Ordering::SeqCst),
        4,
        "the four calls ran at once"
    );
    let journal = store.journal("par", Some(0)).await.unwrap();
    let calls: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Tool)
        .collect();
    assert_eq!(calls.len(), 4);
    for e in calls {
        // Item n is call n, and its key is (run, version, n), whenever it finished.
        assert_eq!(e.input["n"], e.seq, "{e:?}");
        assert_eq!(
            e.idempotency_key.as_deref(),
            Some(idempotency_key("par", 0, e.seq).as_str())
        );
    }
}

#[tokio::test]
async fn a_crash_among_concurrent_calls_reruns_only_the_unfinished_ones() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let service = Arc::new(Service::default());
    // Answers come back 1, 3, 2, 0: the process dies after the second one (item 3) answered
    // and before it is journaled; item 1 is journaled, items 2 and 0 are still running.
    let crashing = runner_with(
        &store,
        &service,
        Arc::new(CrashAt::new(FaultPoint::ToolAnswered, 1)),
    );
    crashing.start("crash", Desk::Start).await.unwrap();
    let crashed = crashing.run("crash").await;
    assert!(
        matches!(crashed, Err(RunnerError::Crashed(_))),
        "{crashed:?}"
    );
    let resumed = runner(&store, &service);
    // A crashed process keeps its lease until it expires; this test lets it go at once.
    let record = store.load_run("crash").await.unwrap().unwrap();
    let lease = durable_agents::backend::Lease {
        run_id: "crash".into(),
        worker: record.lease_owner.clone().unwrap(),
        epoch: record.epoch,
        expires_at: record.lease_expires_at.unwrap(),
    };
    store.release_lease(&lease).await.unwrap();
    let done = resumed.run("crash").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state["Held"]["items"], serde_json::json!([0, 1, 2, 3]));
    let requests = service.requests.lock().unwrap().clone();
    let key = |n| idempotency_key("crash", 0, n);
    assert_eq!(
        requests[&key(1)],
        1,
        "journaled before the crash: served from the journal"
    );
    for n in [0, 2, 3] {
        assert_eq!(
            requests[&key(n)],
            2,
            "item {n}: run again, with its same key"
        );
    }
    assert_eq!(requests.len(), 4, "no other key: {requests:?}");
}

#[tokio::test]
async fn concurrent_hybrids_are_compensated_in_reverse_index_order() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // Item 0 answers last and is refused: items 1, 3, 2 are held by then, in that order.
    let service = Arc::new(Service {
        refuse: Some(0),
        ..Service::default()
    });
    let r = runner(&store, &service);
    r.start("saga", Desk::Start).await.unwrap();
    let done = r.run("saga").await.unwrap();
    assert_eq!(done.status, RunStatus::Compensated, "{done:?}");
    assert_eq!(
        *service.released.lock().unwrap(),
        [3, 2, 1],
        "last made, first undone: by index, not by completion"
    );
}

/// Two holds made in one order and awaited in the other.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(hybrid(Hold(compensate = Release)), write(Release)))]
pub enum Pair {
    #[agent(initial, tools(Hold), to(Held))]
    Start,
    #[agent(terminal)]
    Held,
}

impl PairHandlers for Handlers {
    async fn start(&self, ctx: Ctx<'_, pair::Start>, _: pair::Start) -> StepResult<pair::Start> {
        let first = ctx.call::<Hold>(Item { n: 0 });
        let second = ctx.call::<Hold>(Item { n: 1 });
        // Polled second first: the index is the order of the `call`s, not of the polls.
        let (second, first) = tokio::join!(second, first);
        first?;
        second?;
        Ok(ctx.to(pair::Held))
    }
}

#[tokio::test]
async fn the_index_is_taken_when_the_call_is_made_not_when_it_is_polled() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let service = Arc::new(Service::default());
    let tools = ToolBox::new()
        .hybrid(Hold(Arc::clone(&service)))
        .with(Release(Arc::clone(&service)));
    let r = Runner::<Pair, _>::new(Arc::clone(&store), Handlers, tools).unwrap();
    r.start("pair", Pair::Start).await.unwrap();
    r.run("pair").await.unwrap();
    let journal = store.journal("pair", Some(0)).await.unwrap();
    for e in journal.iter().filter(|e| e.kind == EntryKind::Tool) {
        assert_eq!(e.input["n"], e.seq, "{e:?}");
    }
}

/// The model may hold two items with one answer.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(hybrid(Hold(compensate = Release)), write(Release)))]
pub enum Routed {
    #[agent(initial, route = llm, tools(Hold), tools_per_answer = 2, to(Held))]
    Start,
    #[agent(terminal)]
    Held,
}

impl RoutedHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, routed::Start>,
        route: routed::StartRoute,
        _: routed::Start,
    ) -> StepResult<routed::Start> {
        Ok(match route {
            routed::StartRoute::Held => ctx.to(routed::Held),
        })
    }
}

fn hold(n: u32) -> RawChoice {
    RawChoice {
        name: "Hold".into(),
        arguments: format!(r#"{{"n": {n}}}"#),
    }
}

/// Answers: first `first`, then the transition.
fn answering(first: Vec<RawChoice>) -> Arc<ScriptedRouter> {
    Arc::new(ScriptedRouter::from_fn(move |request| {
        if request.tool_results.is_empty() && request.feedback.is_empty() {
            RouterReply {
                choices: first.clone(),
                ..ScriptedRouter::choose("Held", "{}")
            }
        } else {
            ScriptedRouter::choose("Held", "{}")
        }
    }))
}

fn routed(
    store: &Arc<dyn Store>,
    service: &Arc<Service>,
    router: Arc<ScriptedRouter>,
) -> Runner<Routed, Handlers> {
    let tools = ToolBox::new()
        .hybrid(Hold(Arc::clone(service)))
        .with(Release(Arc::clone(service)));
    Runner::builder(Arc::clone(store), Handlers, tools)
        .router(router)
        .build()
        .unwrap()
}

#[tokio::test]
async fn one_answer_calls_several_tools_at_once_journaled_as_one_decision() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let service = Arc::new(Service::default());
    let r = routed(&store, &service, answering(vec![hold(0), hold(1)]));
    r.start("multi", Routed::Start).await.unwrap();
    let done = r.run("multi").await.unwrap();
    assert_eq!(done.state_name, "Held");
    assert_eq!(
        service.most_in_flight.load(Ordering::SeqCst),
        2,
        "the two calls ran at once"
    );
    let journal = store.journal("multi", Some(0)).await.unwrap();
    let kinds: Vec<_> = journal
        .iter()
        .map(|e| (e.seq, e.kind, e.input.get("n").cloned()))
        .collect();
    assert_eq!(
        kinds,
        [
            (0, EntryKind::Decision, None),
            (1, EntryKind::Tool, Some(serde_json::json!(0))),
            (2, EntryKind::Tool, Some(serde_json::json!(1))),
            (3, EntryKind::Decision, None),
        ],
        "one decision, then its calls in the answer's order, then the next ask"
    );
}

#[tokio::test]
async fn one_illegal_call_rejects_the_whole_answer_and_nothing_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let service = Arc::new(Service::default());
    let too_many = answering(vec![hold(0), hold(1), hold(2)]);
    let illegal = answering(vec![
        hold(0),
        RawChoice {
            name: "Release".into(),
            arguments: r#"{"n": 0}"#.into(),
        },
    ]);
    for (id, router, code) in [
        ("three", too_many, "decision.several"),
        ("illegal", illegal, "decision.unknown_option"),
    ] {
        let r = routed(&store, &service, router);
        r.start(id, Routed::Start).await.unwrap();
        let done = r.run(id).await.unwrap();
        assert_eq!(done.state_name, "Held", "{id}: re-asked, then moved on");
        let journal = store.journal(id, Some(0)).await.unwrap();
        assert_eq!(
            journal[0].error_code.as_deref(),
            Some(code),
            "{id}: {:?}",
            journal[0]
        );
        assert!(
            journal.iter().all(|e| e.kind != EntryKind::Tool),
            "{id}: no call of a rejected answer ran"
        );
    }
    assert!(
        service.requests.lock().unwrap().is_empty(),
        "the tool never ran"
    );
}
