//! A read call whose policy says `journal_with_commit` has its journal entry written with
//! its step's commit: a step that calls one such read is one write, not two. The entry is
//! still durable before anything the step does next (another call), and a step that fails
//! writes it before its failure. A read without it is written as soon as it returns.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{CallStatus, EventCursor, EventLog, EventScope, HistoryStore};
use agent_core::tool::{Execute, Tool, ToolBox, ToolContext, ToolError, ToolPolicy, kind};
use agent_core::{Ctx, RunStatus, Runner, StepError, StepResult};
use agent_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

/// A read tool that doubles its input, cheap to repeat: journaled with the commit.
#[derive(Debug)]
struct Double;

impl Tool for Double {
    const NAME: &'static str = "Double";
    type Kind = kind::Read;
    type Input = u32;
    type Output = u32;
    fn policy() -> ToolPolicy {
        ToolPolicy {
            journal_with_commit: true,
            ..ToolPolicy::default()
        }
    }
}

/// The same, with the default policy: journaled as soon as it returns.
#[derive(Debug)]
struct Triple;

impl Tool for Triple {
    const NAME: &'static str = "Triple";
    type Kind = kind::Read;
    type Input = u32;
    type Output = u32;
}

impl Execute for Triple {
    async fn execute(&self, input: u32, _: &ToolContext) -> Result<u32, ToolError> {
        Ok(input * 3)
    }
}

impl Execute for Double {
    async fn execute(&self, input: u32, _: &ToolContext) -> Result<u32, ToolError> {
        Ok(input * 2)
    }
}

/// A read tool that says it started, then never answers (a call in flight).
#[derive(Debug)]
struct Hang(Arc<tokio::sync::Notify>);

impl Tool for Hang {
    const NAME: &'static str = "Hang";
    type Kind = kind::Read;
    type Input = u32;
    type Output = u32;
}

impl Execute for Hang {
    async fn execute(&self, _: u32, _: &ToolContext) -> Result<u32, ToolError> {
        self.0.notify_one();
        std::future::pending().await
    }
}

/// What a run does at each of its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Then {
    /// One read, then the next step.
    Read,
    /// One read, then a call that never answers.
    ReadThenHang,
    /// One read, then the handler fails.
    ReadThenFail,
    /// One read with the default policy.
    ReadAtOnce,
}

#[derive(Clone, Debug, Serialize, Deserialize, agent_core::Agent)]
#[agent(tools(read(Double), read(Triple), read(Hang)))]
enum Reads {
    #[agent(initial, tools(Double, Triple, Hang), to(Step, Done))]
    Step { then: Then, at: u32, of: u32 },
    #[agent(terminal)]
    Done { at: u32 },
}

struct Handlers;

impl ReadsHandlers for Handlers {
    async fn step(
        &self,
        ctx: Ctx<'_, reads::Step>,
        reads::Step { then, at, of }: reads::Step,
    ) -> StepResult<reads::Step> {
        if then == Then::ReadAtOnce {
            assert_eq!(ctx.call::<Triple>(at).await?, at * 3);
        } else {
            assert_eq!(ctx.call::<Double>(at).await?, at * 2);
        }
        match then {
            Then::Read | Then::ReadAtOnce => {}
            Then::ReadThenHang => {
                ctx.call::<Hang>(at).await?;
            }
            Then::ReadThenFail => return Err(StepError::Handler("it failed".into())),
        }
        Ok(if at + 1 >= of {
            ctx.to(reads::Done { at: at + 1 })
        } else {
            ctx.to(reads::Step {
                then,
                at: at + 1,
                of,
            })
        })
    }
}

async fn fresh() -> (
    Arc<SqliteStore>,
    PathBuf,
    Arc<tokio::sync::Notify>,
    Runner<Reads, Handlers>,
) {
    let path = common::new_db_path("");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let started = Arc::new(tokio::sync::Notify::new());
    let tools = ToolBox::new()
        .with(Double)
        .with(Triple)
        .with(Hang(started.clone()));
    let runner = Runner::<Reads, Handlers>::new(store.clone(), Handlers, tools).unwrap();
    (store, path, started, runner)
}

async fn remove(store: Arc<SqliteStore>, path: PathBuf) {
    store.close().await;
    common::remove_db_files(&path);
}

/// Start run `r` doing `then` for `steps` steps and drive it to its end: the record, and
/// the writes that went through the group commit meanwhile.
async fn run_counting_writes(
    store: &SqliteStore,
    runner: &Runner<Reads, Handlers>,
    then: Then,
    steps: u32,
) -> (agent_core::RunRecord, u64) {
    runner
        .start(
            "r",
            Reads::Step {
                then,
                at: 0,
                of: steps,
            },
        )
        .await
        .unwrap();
    let before = store.group_commit_stats();
    let done = runner.run("r").await.unwrap();
    (done, store.group_commit_stats().commits - before.commits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_and_its_read_are_one_write() {
    let (store, path, _, runner) = fresh().await;
    let steps = 3;
    let (done, writes) = run_counting_writes(&store, &runner, Then::Read, steps).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.version, u64::from(steps));
    // One write per step: the commit, carrying its read's entry.
    assert_eq!(
        writes,
        u64::from(steps),
        "writes through the group commit for {steps} steps of one read each"
    );
    let journal = store.journal("r", None).await.unwrap();
    let outputs: Vec<(u64, CallStatus, Option<serde_json::Value>)> = journal
        .iter()
        .map(|e| (e.version, e.status, e.output.clone()))
        .collect();
    assert_eq!(
        outputs,
        (0..steps)
            .map(|at| (
                u64::from(at),
                CallStatus::Succeeded,
                Some(serde_json::json!(at * 2))
            ))
            .collect::<Vec<_>>()
    );
    // Each call's events precede its step's version, as when the entry is written alone.
    let events = store
        .events(&EventScope::Run("r".into()), EventCursor::START, 100)
        .await
        .unwrap();
    let types: Vec<String> = events
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let step = ["tool_started", "tool_finished", "transition_committed"];
    let mut expected = vec!["run_created"];
    for _ in 0..steps {
        expected.extend(step);
    }
    expected.push("run_finished");
    assert_eq!(types, expected);
    remove(store, path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_durable_before_the_next_call_begins() {
    let (store, path, started, runner) = fresh().await;
    runner
        .start(
            "r",
            Reads::Step {
                then: Then::ReadThenHang,
                at: 5,
                of: 9,
            },
        )
        .await
        .unwrap();
    let run = tokio::spawn({
        let runner = runner.clone();
        async move { runner.run("r").await }
    });
    tokio::time::timeout(Duration::from_secs(20), started.notified())
        .await
        .expect("the second call starts");
    let journal = store.journal("r", Some(0)).await.unwrap();
    run.abort();
    assert_eq!(journal.len(), 1, "the read's entry, written: {journal:?}");
    assert_eq!(journal[0].name, "Double");
    assert_eq!(journal[0].output, Some(serde_json::json!(10)));
    remove(store, path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_writes_its_reads() {
    let (store, path, _, runner) = fresh().await;
    runner
        .start(
            "r",
            Reads::Step {
                then: Then::ReadThenFail,
                at: 2,
                of: 9,
            },
        )
        .await
        .unwrap();
    let done = runner.run("r").await.unwrap();
    assert_eq!(done.status, RunStatus::Failed);
    let journal = store.journal("r", Some(0)).await.unwrap();
    assert_eq!(journal.len(), 1, "the read's entry, written: {journal:?}");
    assert_eq!(journal[0].output, Some(serde_json::json!(4)));
    remove(store, path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_with_the_default_policy_is_written_as_it_returns() {
    let (store, path, _, runner) = fresh().await;
    let steps = 3;
    let (done, writes) = run_counting_writes(&store, &runner, Then::ReadAtOnce, steps).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        writes,
        2 * u64::from(steps),
        "each step writes its read's entry, then commits"
    );
    assert_eq!(store.journal("r", None).await.unwrap().len(), 3);
    remove(store, path).await;
}
