//! Editing a stopped run's state with the agent's code at hand (`Runner::edit_state`,
//! `Runner::edit_run`): the run continues from the edited state, the edit is one audited
//! transition the chain verifies, a state the agent's type refuses is refused before
//! anything is written, and secrets in the edited state are stored sealed.

use std::sync::Arc;

use durable_agents::runner::RunnerConfig;
use durable_agents::secrets::SealKeys;
use durable_agents::store::edit::{Edit, EditError, StateEdit};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::verify::verify_run;
use durable_agents::store::{OperatorNote, RunStatus, Store, TransitionKind};
use durable_agents::{Agent, Ctx, Runner, StepError, StepResult, ToolBox, Wake};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A refund: checked, approved by a person above 50, paid.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Refund {
    #[agent(initial, to(Approve, Done))]
    Check { amount: u32, api_key: String },
    #[agent(wait = "approve", to(Done))]
    Approve { amount: u32 },
    #[agent(terminal)]
    Done { paid: u32 },
}

const KEY: &str = "sk-live-0123456789";

#[derive(Clone, Debug)]
pub struct Handlers;

impl RefundHandlers for Handlers {
    async fn check(
        &self,
        ctx: Ctx<'_, refund::Check>,
        refund::Check { amount, api_key }: refund::Check,
    ) -> StepResult<refund::Check> {
        assert_eq!(api_key, KEY, "the handler reads the key opened");
        if amount > 100 {
            return Err(StepError::handler(format!("{amount} is over the limit")));
        }
        Ok(if amount > 50 {
            ctx.to(refund::Approve { amount })
        } else {
            ctx.to(refund::Done { paid: amount })
        })
    }

    async fn approve(
        &self,
        ctx: Ctx<'_, refund::Approve>,
        _: Wake,
        refund::Approve { amount }: refund::Approve,
    ) -> StepResult<refund::Approve> {
        Ok(ctx.to(refund::Done { paid: amount }))
    }
}

fn runner(store: &Arc<dyn Store>) -> Runner<Refund, Handlers> {
    Runner::<Refund, _>::builder(Arc::clone(store), Handlers, ToolBox::new())
        .config(RunnerConfig {
            seal_keys: SealKeys::generate("k1"),
            ..RunnerConfig::default()
        })
        .build()
        .unwrap()
}

fn note() -> OperatorNote {
    OperatorNote::new("ops@example.com", "the model read 5000 for 50")
}

fn check(amount: u32) -> Refund {
    Refund::Check {
        amount,
        api_key: KEY.into(),
    }
}

async fn stored_text(store: &Arc<dyn Store>, run: &str) -> String {
    let record = store.load_run(run).await.unwrap().unwrap();
    let history = store.history(run).await.unwrap();
    let mut text = serde_json::to_string(&record).unwrap();
    for t in &history {
        let state = store.state_at(run, t.version).await.unwrap().unwrap();
        text.push_str(&state.state.to_string());
    }
    text
}

#[tokio::test]
async fn a_failed_run_edited_continues_from_the_edited_state() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("r1", check(5000)).await.unwrap();
    let failed = runner.run("r1").await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);

    let edited = runner
        .edit_state("r1", check(50), false, note())
        .await
        .unwrap();
    assert_eq!(edited.status, RunStatus::Running);
    assert!(edited.error.is_none());
    let done = runner.run("r1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state, json!({ "Done": { "paid": 50 } }));

    let history = store.history("r1").await.unwrap();
    let edit = history
        .iter()
        .find(|t| t.kind == TransitionKind::Edited)
        .expect("an edited transition");
    assert_eq!(edit.note, Some(note()));
    assert_eq!(
        (edit.from_state.as_str(), edit.to_state.as_str()),
        ("Check", "Check")
    );
    assert_eq!(
        history
            .iter()
            .filter(|t| t.kind == TransitionKind::Edited)
            .count(),
        1
    );
    let report = verify_run(store.as_ref(), &done).await.unwrap();
    assert!(report.ok, "{:?}", report.problem);
    let text = stored_text(&store, "r1").await;
    assert!(
        !text.contains(KEY),
        "the key is stored in the clear: {text}"
    );
}

#[tokio::test]
async fn a_patch_edits_the_current_state_and_keeps_its_sealed_values() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("r2", check(5000)).await.unwrap();
    runner.run("r2").await.unwrap();
    let patch = StateEdit::patch(json!([
        { "op": "replace", "path": "/Check/amount", "value": 20 }
    ]))
    .unwrap();
    runner
        .edit_run(
            "r2",
            Edit {
                state: patch,
                state_name: None,
                override_graph: false,
                note: note(),
            },
        )
        .await
        .unwrap();
    // The handler asserts that it reads the key as it was: opened, not sealed twice.
    let done = runner.run("r2").await.unwrap();
    assert_eq!(done.state, json!({ "Done": { "paid": 20 } }));
    assert!(!stored_text(&store, "r2").await.contains(KEY));
}

#[tokio::test]
async fn a_state_the_agent_does_not_read_is_refused_and_nothing_is_written() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("r3", check(5000)).await.unwrap();
    let failed = runner.run("r3").await.unwrap();
    for bad in [
        json!({ "Check": { "amount": "lots", "api_key": KEY } }),
        json!({ "Check": { "amount": 5 } }),
        json!({ "Elsewhere": {} }),
    ] {
        let refused = runner
            .edit_run(
                "r3",
                Edit {
                    state: StateEdit::Whole(bad.clone()),
                    state_name: None,
                    override_graph: false,
                    note: note(),
                },
            )
            .await;
        assert!(
            matches!(refused, Err(EditError::Invalid { .. })),
            "{bad}: {refused:?}"
        );
    }
    let after = store.load_run("r3").await.unwrap().unwrap();
    assert_eq!(
        after.version, failed.version,
        "a refused edit wrote a version"
    );
    assert_eq!(after.status, RunStatus::Failed);
}

#[tokio::test]
async fn a_waiting_run_edited_waits_again_in_the_edited_state() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("r4", check(80)).await.unwrap();
    let waiting = runner.run("r4").await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);

    // Back to `Check` is not an edge from `Approve`: refused, then allowed as an override.
    match runner.edit_state("r4", check(80), false, note()).await {
        Err(EditError::NotAnEdge { from, to, .. }) => {
            assert_eq!((from.as_str(), to.as_str()), ("Approve", "Check"));
        }
        other => panic!("an edit against the graph gave {other:?}"),
    }
    runner
        .edit_state("r4", Refund::Approve { amount: 60 }, false, note())
        .await
        .unwrap();
    let again = runner.run("r4").await.unwrap();
    assert_eq!(again.status, RunStatus::Waiting);
    assert_eq!(again.state, json!({ "Approve": { "amount": 60 } }));
    runner.signal("r4", "approve", json!(null)).await.unwrap();
    let done = runner.run("r4").await.unwrap();
    assert_eq!(done.state, json!({ "Done": { "paid": 60 } }));
    let report = verify_run(store.as_ref(), &done).await.unwrap();
    assert!(report.ok, "{:?}", report.problem);
}

#[tokio::test]
async fn running_and_ended_runs_are_not_edited() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("r5", check(10)).await.unwrap();
    match runner.edit_state("r5", check(20), false, note()).await {
        Err(EditError::NotStopped { status, .. }) => assert_eq!(status, RunStatus::Running),
        other => panic!("an edit of a running run gave {other:?}"),
    }
    runner.run("r5").await.unwrap();
    match runner.edit_state("r5", check(20), false, note()).await {
        Err(e @ EditError::NotStopped { .. }) => {
            assert!(e.to_string().contains("fork it"), "{e}");
        }
        other => panic!("an edit of a completed run gave {other:?}"),
    }
}
