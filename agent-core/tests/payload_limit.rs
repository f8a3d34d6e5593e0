//! The size bound of what a run stores (`RunnerConfig::max_payload_bytes`): a tool output, a
//! state, an initial state and a signal's payload past it are refused with an error that
//! names them and their size, and nothing of them is stored; below it, nothing changes.

use std::sync::Arc;

use durable_agents::runner::{RunnerConfig, RunnerError};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{CallStatus, EntryKind, RunStatus, Store};
use durable_agents::tool::ToolsFor;
use durable_agents::{Agent, Ctx, Runner, StepResult, ToolResult, Wake, tool_fn};
use serde::{Deserialize, Serialize};
use serde_json::json;

const LIMIT: usize = 10_000;

/// A page of `bytes` characters.
#[tool_fn(read)]
pub async fn fetch_page(
    /// How many characters.
    bytes: usize,
) -> ToolResult<String> {
    Ok("x".repeat(bytes))
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(FetchPage)))]
pub enum Reader {
    #[agent(initial, tools(FetchPage), to(Keep), on_error = Failed)]
    Fetch {
        bytes: usize,
        copies: usize,
        note: String,
    },
    #[agent(wait = "go", to(Done))]
    Keep { text: String },
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed(String),
}

#[derive(Clone, Debug)]
pub struct Handlers;

impl ReaderHandlers for Handlers {
    async fn fetch(
        &self,
        ctx: Ctx<'_, reader::Fetch>,
        reader::Fetch { bytes, copies, .. }: reader::Fetch,
    ) -> StepResult<reader::Fetch> {
        let page = ctx.call::<FetchPage>(FetchPageInput { bytes }).await?;
        Ok(ctx.to(reader::Keep {
            text: page.repeat(copies),
        }))
    }

    async fn keep(
        &self,
        ctx: Ctx<'_, reader::Keep>,
        _: Wake,
        _: reader::Keep,
    ) -> StepResult<reader::Keep> {
        Ok(ctx.to(reader::Done))
    }
}

fn runner(store: &Arc<dyn Store>) -> Runner<Reader, Handlers> {
    Runner::<Reader, _>::builder(
        Arc::clone(store),
        Handlers,
        ReaderTools::from_shared(&()).into_tool_box(),
    )
    .config(RunnerConfig {
        max_payload_bytes: LIMIT,
        ..RunnerConfig::default()
    })
    .build()
    .unwrap()
}

fn fetch(bytes: usize, copies: usize) -> Reader {
    Reader::Fetch {
        bytes,
        copies,
        note: String::new(),
    }
}

#[tokio::test]
async fn values_under_the_bound_are_stored_as_before() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner.start("small", fetch(LIMIT / 2, 1)).await.unwrap();
    let waiting = runner.run("small").await.unwrap();
    assert_eq!(waiting.state_name, "Keep");
    runner.signal("small", "go", json!({})).await.unwrap();
    assert_eq!(
        runner.run("small").await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_tool_output_past_the_bound_fails_the_call_for_good() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    runner
        .start("big-output", fetch(2 * LIMIT, 1))
        .await
        .unwrap();
    let ended = runner.run("big-output").await.unwrap();
    assert_eq!(ended.state_name, "Failed", "{ended:?}");
    let journal = store.journal("big-output", None).await.unwrap();
    let call = journal
        .iter()
        .find(|e| e.kind == EntryKind::Tool && e.name == "FetchPage")
        .expect("the call is journaled");
    assert_eq!(call.status, CallStatus::Failed);
    assert_eq!(call.attempts, 1, "a permanent failure is not retried");
    assert!(call.output.is_none(), "the output is not stored");
    let message = call.error_message.clone().unwrap_or_default();
    assert!(
        message.contains("the output of `FetchPage` is 19.5 KiB as JSON")
            && message.contains("max_payload_bytes"),
        "{message}"
    );
}

#[tokio::test]
async fn a_state_past_the_bound_is_not_committed_and_the_step_fails() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    // Each page fits; three of them in the next state do not.
    runner
        .start("big-state", fetch(LIMIT / 2, 3))
        .await
        .unwrap();
    let ended = runner.run("big-state").await.unwrap();
    assert_eq!(ended.state_name, "Failed", "{ended:?}");
    let why = ended.state.to_string();
    assert!(
        why.contains("the state `Keep` is") && why.contains("max_payload_bytes"),
        "{why}"
    );
    let history = store.history("big-state").await.unwrap();
    assert!(
        history.iter().all(|t| t.to_state != "Keep"),
        "the state past the bound was committed"
    );
}

#[tokio::test]
async fn an_initial_state_or_a_signal_past_the_bound_is_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store);
    let big = Reader::Fetch {
        bytes: 1,
        copies: 1,
        note: "n".repeat(2 * LIMIT),
    };
    match runner.start("big-start", big).await {
        Err(RunnerError::PayloadTooLarge(why)) => {
            assert!(why.contains("the initial state `Fetch`"), "{why}");
        }
        other => panic!("a start past the bound gave {other:?}"),
    }
    assert!(store.load_run("big-start").await.unwrap().is_none());

    runner.start("waits", fetch(10, 1)).await.unwrap();
    runner.run("waits").await.unwrap();
    let payload = json!({ "blob": "b".repeat(2 * LIMIT) });
    match runner.signal("waits", "go", payload).await {
        Err(RunnerError::PayloadTooLarge(why)) => {
            assert!(why.contains("the payload of signal `go`"), "{why}");
        }
        other => panic!("a signal past the bound gave {other:?}"),
    }
    assert!(store.pending_signals("waits").await.unwrap().is_empty());
}
