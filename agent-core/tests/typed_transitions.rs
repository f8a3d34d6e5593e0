//! Typed transitions through the real runner: a transition that declares no argument is
//! offered with the closed empty object and refuses any; one that declares an argument
//! (`to(Refunding(args = Refund))`) is offered its type's schema, checked by the same
//! validator as a tool input and then by its `Deserialize`, and reaches the handler typed,
//! from the journal on resume.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use durable_agents::router::{DecisionRecord, RouteRequest, RouterReply, ScriptedRouter};
use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{EntryKind, JournalEntry, RunStatus, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

/// What the model must give to refund: limits the schema shows and the validator enforces,
/// and a reason whose `Deserialize` refuses blanks (stricter than its schema, a string).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct Refund {
    #[schemars(range(min = 1, max = 1000))]
    pub amount_cents: u32,
    #[serde(deserialize_with = "not_blank")]
    #[schemars(with = "String")]
    pub reason: String,
}

fn not_blank<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(serde::de::Error::custom("the reason is blank"));
    }
    Ok(s)
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Desk {
    #[agent(initial, route = llm, to(Refunding(args = Refund), Closed), on_error = Failed)]
    Triage,
    #[agent(to(Closed))]
    Refunding { amount_cents: u32, reason: String },
    #[agent(terminal)]
    Closed,
    #[agent(terminal)]
    Failed,
}

/// What the routed handler saw: `None` for `Closed`, the typed argument for `Refunding`.
type Seen = Arc<Mutex<Vec<Option<Refund>>>>;

#[derive(Clone, Debug, Default)]
pub struct Handlers {
    seen: Seen,
}

impl DeskHandlers for Handlers {
    async fn triage(
        &self,
        ctx: Ctx<'_, desk::Triage>,
        route: desk::TriageRoute,
        _: desk::Triage,
    ) -> StepResult<desk::Triage> {
        Ok(match route {
            desk::TriageRoute::Refunding(refund) => {
                self.seen.lock().unwrap().push(Some(refund.clone()));
                ctx.to(desk::Refunding {
                    amount_cents: refund.amount_cents,
                    reason: refund.reason,
                })
            }
            desk::TriageRoute::Closed => {
                self.seen.lock().unwrap().push(None);
                ctx.to(desk::Closed)
            }
        })
    }

    async fn refunding(
        &self,
        ctx: Ctx<'_, desk::Refunding>,
        _: desk::Refunding,
    ) -> StepResult<desk::Refunding> {
        Ok(ctx.to(desk::Closed))
    }
}

/// Plays `answers` in order and keeps every request it was sent.
fn script(answers: &[(&str, &str)]) -> (Arc<ScriptedRouter>, Arc<Mutex<Vec<RouteRequest>>>) {
    let queue: Mutex<VecDeque<RouterReply>> = Mutex::new(
        answers
            .iter()
            .map(|(name, args)| ScriptedRouter::choose(name, args))
            .collect(),
    );
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&requests);
    let router = ScriptedRouter::from_fn(move |request| {
        log.lock().unwrap().push(request.clone());
        queue.lock().unwrap().pop_front().unwrap_or_default()
    });
    (Arc::new(router), requests)
}

fn runner(
    store: &Arc<dyn Store>,
    handlers: &Handlers,
    router: Arc<ScriptedRouter>,
) -> Runner<Desk, Handlers> {
    runner_with(store, handlers, router, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    handlers: &Handlers,
    router: Arc<ScriptedRouter>,
    faults: Arc<dyn FaultHook>,
) -> Runner<Desk, Handlers> {
    Runner::<Desk, _>::builder(Arc::clone(store), handlers.clone(), ToolBox::new())
        .router(router)
        .config(RunnerConfig {
            max_reasks: 8,
            ..RunnerConfig::default()
        })
        .faults(faults)
        .build()
        .unwrap()
}

async fn decisions(store: &Arc<dyn Store>, run: &str) -> Vec<JournalEntry> {
    store
        .journal(run, Some(0))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .collect()
}

fn codes(entries: &[JournalEntry]) -> Vec<Option<&str>> {
    entries.iter().map(|e| e.error_code.as_deref()).collect()
}

const VALID: &str = r#"{"amount_cents":250,"reason":"damaged"}"#;

fn refund() -> Refund {
    Refund {
        amount_cents: 250,
        reason: "damaged".into(),
    }
}

#[tokio::test]
async fn each_transition_is_offered_with_the_schema_it_is_checked_against() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (router, requests) = script(&[("Closed", "{}")]);
    let r = runner(&store, &Handlers::default(), router);
    r.start("offer", Desk::Triage).await.unwrap();
    r.run("offer").await.unwrap();
    let requests = requests.lock().unwrap();
    let schema = |name: &str| {
        let o = requests[0].options.iter().find(|o| o.name == name).unwrap();
        o.schema.clone().unwrap()
    };
    assert_eq!(
        schema("Closed"),
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    let refunding = schema("Refunding");
    assert_eq!(refunding["additionalProperties"], false, "{refunding}");
    assert_eq!(refunding["properties"]["amount_cents"]["maximum"], 1000);
    assert_eq!(refunding["required"], json!(["amount_cents", "reason"]));
    // The graph holds the same document, with the type as written.
    let declared = Desk::graph()
        .state("Triage")
        .unwrap()
        .arguments_of("Refunding")
        .unwrap();
    assert_eq!(declared.type_name, "Refund");
    assert_eq!(declared.schema, refunding);
}

#[tokio::test]
async fn arguments_on_a_transition_that_takes_none_are_rejected_and_nothing_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Handlers::default();
    let (router, requests) = script(&[
        ("Closed", r#"{"note":"refund them anyway"}"#),
        ("Closed", "[]"),
        ("Closed", ""),
    ]);
    let r = runner(&store, &handlers, router);
    r.start("none", Desk::Triage).await.unwrap();
    let done = r.run("none").await.unwrap();
    assert_eq!(done.state_name, "Closed");
    let journal = decisions(&store, "none").await;
    assert_eq!(
        codes(&journal),
        [
            Some("decision.schema_violation"),
            Some("decision.schema_violation"),
            None
        ],
        "{journal:#?}"
    );
    let message = journal[0].error_message.as_deref().unwrap();
    assert!(message.contains("`Closed` takes no arguments"), "{message}");
    // The handler ran once, for the accepted answer; the rejection was fed back.
    assert_eq!(*handlers.seen.lock().unwrap(), [None]);
    let feedback = requests.lock().unwrap()[1].feedback.clone();
    assert!(
        feedback[0].contains("decision.schema_violation"),
        "{feedback:?}"
    );

    // Only such answers: the state's failure path, and the handler never ran.
    let handlers = Handlers::default();
    let bad = [("Closed", r#"{"x":1}"#); 9];
    let (router, _) = script(&bad);
    let r = runner(&store, &handlers, router);
    r.start("never", Desk::Triage).await.unwrap();
    let failed = r.run("never").await.unwrap();
    assert_eq!(failed.state_name, "Failed");
    assert_eq!(decisions(&store, "never").await.len(), 9);
    assert!(handlers.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn typed_arguments_that_break_the_schema_or_the_type_are_rejected() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Handlers::default();
    let (router, _) = script(&[
        ("Refunding", r#"{"amount_cents":999999,"reason":"x"}"#),
        ("Refunding", r#"{"amount_cents":0,"reason":"x"}"#),
        (
            "Refunding",
            r#"{"amount_cents":250,"reason":"x","admin":true}"#,
        ),
        (
            "Refunding",
            r#"{"amount_cents":250,"amount_cents":999999,"reason":"x"}"#,
        ),
        ("Refunding", r#"[250,"x"]"#),
        ("Refunding", r#"{"amount_cents":250}"#),
        ("Refunding", r#"{"amount_cents":250,"reason":"  "}"#),
        ("Refunding", VALID),
    ]);
    let r = runner(&store, &handlers, router);
    r.start("typed", Desk::Triage).await.unwrap();
    let done = r.run("typed").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let journal = decisions(&store, "typed").await;
    let sv = Some("decision.schema_violation");
    assert_eq!(
        codes(&journal),
        [
            sv,
            sv,
            sv,
            Some("decision.duplicate_key"),
            sv,
            sv,
            // The schema says a string; the type's `Deserialize` refuses a blank one.
            Some("decision.invalid_arguments"),
            None,
        ],
        "{journal:#?}"
    );
    // Only the valid answer reached the handler, as the declared type.
    assert_eq!(*handlers.seen.lock().unwrap(), [Some(refund())]);
    // The next state was built from it.
    let history = store.history("typed").await.unwrap();
    assert!(
        history.iter().any(|t| t.to_state == "Refunding"),
        "{history:#?}"
    );
}

#[tokio::test]
async fn the_journaled_decision_keeps_the_arguments_and_a_resumed_step_reads_them_there() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Handlers::default();
    let (router, _) = script(&[("Refunding", VALID)]);
    // The process dies after the handler ran, before its transition is committed.
    let crashing = runner_with(
        &store,
        &handlers,
        router,
        Arc::new(CrashAt::new(FaultPoint::CommitSent, 0)),
    );
    crashing.start("resume", Desk::Triage).await.unwrap();
    let crashed = crashing.run("resume").await;
    assert!(
        matches!(crashed, Err(RunnerError::Crashed(_))),
        "{crashed:?}"
    );

    let journal = decisions(&store, "resume").await;
    assert_eq!(journal.len(), 1);
    let record: DecisionRecord =
        serde_json::from_value(journal[0].output.clone().unwrap()).unwrap();
    assert_eq!(
        serde_json::to_value(record.decision.unwrap()).unwrap(),
        json!({"kind": "transition", "to": "Refunding", "arguments": {"amount_cents": 250, "reason": "damaged"}})
    );

    release(&store, "resume").await;
    // A router with nothing to say: the committed decision is never asked again.
    let (silent, asked) = script(&[]);
    let done = runner(&store, &handlers, silent)
        .run("resume")
        .await
        .unwrap();
    assert_eq!(done.state_name, "Closed");
    assert!(
        asked.lock().unwrap().is_empty(),
        "the model was asked again"
    );
    assert_eq!(decisions(&store, "resume").await.len(), 1);
    // Before the crash and after it, the handler got the same typed argument.
    assert_eq!(
        *handlers.seen.lock().unwrap(),
        [Some(refund()), Some(refund())]
    );
}

/// The same agent, built again with a stricter argument: at most 100 cents.
mod stricter {
    use super::{Deserialize, JsonSchema, Serialize};
    use durable_agents::{Agent, Ctx, StepResult};

    #[derive(Debug, Deserialize, JsonSchema)]
    pub(crate) struct Refund {
        #[schemars(range(min = 1, max = 100))]
        pub(crate) amount_cents: u32,
        pub(crate) reason: String,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
    #[agent(name = "Desk")]
    pub(crate) enum Desk {
        #[agent(initial, route = llm, to(Refunding(args = Refund), Closed), on_error = Failed)]
        Triage,
        #[agent(to(Closed))]
        Refunding { amount_cents: u32, reason: String },
        #[agent(terminal)]
        Closed,
        #[agent(terminal)]
        Failed,
    }

    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Handlers;

    impl DeskHandlers for Handlers {
        async fn triage(
            &self,
            ctx: Ctx<'_, desk::Triage>,
            route: desk::TriageRoute,
            _: desk::Triage,
        ) -> StepResult<desk::Triage> {
            Ok(match route {
                desk::TriageRoute::Refunding(r) => ctx.to(desk::Refunding {
                    amount_cents: r.amount_cents,
                    reason: r.reason,
                }),
                desk::TriageRoute::Closed => ctx.to(desk::Closed),
            })
        }

        async fn refunding(
            &self,
            ctx: Ctx<'_, desk::Refunding>,
            _: desk::Refunding,
        ) -> StepResult<desk::Refunding> {
            Ok(ctx.to(desk::Closed))
        }
    }
}

#[tokio::test]
async fn a_journaled_argument_the_new_type_refuses_quarantines_the_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (router, _) = script(&[("Refunding", VALID)]);
    let crashing = runner_with(
        &store,
        &Handlers::default(),
        router,
        Arc::new(CrashAt::new(FaultPoint::CommitSent, 0)),
    );
    crashing.start("changed", Desk::Triage).await.unwrap();
    assert!(crashing.run("changed").await.is_err());
    release(&store, "changed").await;

    // Deployed again with `amount_cents` at most 100: the journaled 250 no longer fits.
    let (silent, asked) = script(&[]);
    let newer = Runner::<stricter::Desk, _>::builder(
        Arc::clone(&store),
        stricter::Handlers,
        ToolBox::new(),
    )
    .router(silent)
    .build()
    .unwrap();
    let record = newer.run("changed").await.unwrap();
    assert_eq!(record.status, RunStatus::Quarantined, "{record:?}");
    let error = record.error.unwrap();
    assert_eq!(error.code, "graph.incompatible");
    assert!(
        error.message.contains("`Refunding` with arguments"),
        "{}",
        error.message
    );
    assert!(asked.lock().unwrap().is_empty());
}

async fn release(store: &Arc<dyn Store>, run: &str) {
    // A crashed process keeps its lease until it expires; the tests let it go at once.
    let record = store.load_run(run).await.unwrap().unwrap();
    let lease = durable_agents::backend::Lease {
        run_id: run.into(),
        worker: record.lease_owner.clone().unwrap(),
        epoch: record.epoch,
        expires_at: record.lease_expires_at.unwrap(),
    };
    store.release_lease(&lease).await.unwrap();
}

#[test]
fn an_untyped_route_is_unchanged_and_a_typed_one_shows_no_arguments() {
    assert_eq!(
        format!("{:?}", desk::TriageRoute::Refunding(refund())),
        "Refunding(..)"
    );
    assert_eq!(format!("{:?}", desk::TriageRoute::Closed), "Closed");
}
