//! Children of children: an agent that starts a run of itself until its depth is used up.
//! Within `RunnerConfig::max_child_depth` every level completes and hands its result up;
//! beyond it the run that would nest too deep fails with a budget error, and its parent
//! receives that failure typed instead of waiting for ever.

use std::sync::Arc;
use std::time::Duration;

use durable_agents::agent::ChildOutcome;
use durable_agents::runner::{Runner, RunnerConfig, Worker, WorkerConfig, child_run_id};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{HistoryStore, RunStatus, Store};
use durable_agents::tool::ToolBox;
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Nest {
    /// Start one child one level down, unless this is the bottom.
    #[agent(initial, children(Nest), to(Done))]
    Go { levels: u32 },
    /// What the levels below said.
    #[agent(terminal)]
    Done { below: String },
}

struct Handlers;

impl NestHandlers for Handlers {
    async fn go(
        &self,
        ctx: Ctx<'_, nest::Go>,
        nest::Go { levels }: nest::Go,
    ) -> StepResult<nest::Go> {
        if levels == 0 {
            return Ok(ctx.to(nest::Done {
                below: "bottom".to_owned(),
            }));
        }
        let child = ctx
            .spawn_first::<Nest>([Nest::Go { levels: levels - 1 }])
            .await?;
        let below = match child.outcome {
            ChildOutcome::Completed(Nest::Done { below }) => format!("{levels}>{below}"),
            ChildOutcome::Completed(other) => format!("{levels}>{}", other.state_name()),
            ChildOutcome::Ended { status, error } => format!("{levels}>{status}:{}", error.code),
        };
        Ok(ctx.to(nest::Done { below }))
    }
}

async fn run_tree(max_child_depth: u32) -> (Arc<MemoryStore>, String) {
    let store = Arc::new(MemoryStore::new());
    let runner = Runner::<Nest, Handlers>::builder(
        Arc::clone(&store) as Arc<dyn Store>,
        Handlers,
        ToolBox::new(),
    )
    .config(RunnerConfig {
        max_child_depth,
        ..RunnerConfig::default()
    })
    .build()
    .expect("no tools");
    runner
        .start("root", Nest::Go { levels: 3 })
        .await
        .expect("start");
    let worker = Worker::new(
        runner,
        WorkerConfig {
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
    );
    for _ in 0..50 {
        worker.run_until_idle().await;
        let root = store.load_run("root").await.unwrap().unwrap();
        if root.status.is_final() {
            let Ok(Nest::Done { below }) = serde_json::from_value(root.state) else {
                panic!("the root must be done");
            };
            return (store, below);
        }
    }
    panic!("the tree did not finish");
}

#[tokio::test]
async fn children_of_children_hand_their_results_up() {
    let (store, below) = run_tree(8).await;
    assert_eq!(below, "3>2>1>bottom");
    let deepest = child_run_id(&child_run_id(&child_run_id("root", 0, 0), 0, 0), 0, 0);
    let record = store
        .load_run(&deepest)
        .await
        .unwrap()
        .expect("three levels down");
    assert_eq!(record.status, RunStatus::Completed);
    let by = record.spawned_by.expect("a child names its parent");
    assert_eq!(by.run_id, child_run_id(&child_run_id("root", 0, 0), 0, 0));
}

#[tokio::test]
async fn nesting_beyond_the_depth_limit_fails_that_run_and_its_parent_hears_of_it() {
    let (store, below) = run_tree(2).await;
    // root (depth 0) and its child (1) start children; the grandchild (2) may not.
    assert_eq!(below, "3>2>failed:budget");
    let grandchild = child_run_id(&child_run_id("root", 0, 0), 0, 0);
    let record = store.load_run(&grandchild).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    let error = record.error.expect("a budget error");
    assert!(
        error.message.contains("max_child_depth"),
        "{}",
        error.message
    );
    assert!(
        store
            .load_run(&child_run_id(&grandchild, 0, 0))
            .await
            .unwrap()
            .is_none(),
        "no run is created beyond the limit"
    );
}
