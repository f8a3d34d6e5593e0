//! A worker with `WorkerConfig::retention` keeps its store bounded while it works: final
//! runs are deleted once old enough, runs it has not finished keep their current version
//! and resume.

use std::sync::Arc;
use std::time::Duration;

use durable_agents::runner::{Retention, Runner, Worker, WorkerConfig};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RunFilter, RunStatus, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox, Wake};
use serde::{Deserialize, Serialize};

/// Three steps, then done; or a wait for `go` first.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Count {
    #[agent(initial, to(Step, Hold, Done))]
    Step { n: u32, hold: bool },
    #[agent(wait = "go", to(Done))]
    Hold { n: u32 },
    #[agent(terminal)]
    Done { n: u32 },
}

#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl CountHandlers for Handlers {
    async fn step(
        &self,
        ctx: Ctx<'_, count::Step>,
        count::Step { n, hold }: count::Step,
    ) -> StepResult<count::Step> {
        Ok(if n >= 3 && hold {
            ctx.to(count::Hold { n })
        } else if n >= 3 {
            ctx.to(count::Done { n })
        } else {
            ctx.to(count::Step { n: n + 1, hold })
        })
    }

    async fn hold(
        &self,
        ctx: Ctx<'_, count::Hold>,
        _wake: Wake,
        count::Hold { n }: count::Hold,
    ) -> StepResult<count::Hold> {
        Ok(ctx.to(count::Done { n }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_deletes_old_final_runs_and_compacts_the_others() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Count, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    for i in 0..5 {
        runner
            .start(&format!("done-{i}"), Count::Step { n: 0, hold: false })
            .await
            .unwrap();
    }
    runner
        .start("held", Count::Step { n: 0, hold: true })
        .await
        .unwrap();
    let worker = Worker::new(
        runner.clone(),
        WorkerConfig {
            poll_interval: Duration::from_millis(20),
            retention: Some(Retention {
                interval: Duration::from_millis(50),
                history_window: Some(Duration::from_millis(100)),
                delete_final_after: Some(Duration::from_millis(100)),
                max_runs_per_batch: 2,
            }),
            ..WorkerConfig::default()
        },
    );
    worker
        .run_until(tokio::time::sleep(Duration::from_millis(800)))
        .await;

    let left: Vec<String> = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, ["held"], "the final runs were not all deleted");
    let held = store.load_run("held").await.unwrap().unwrap();
    assert_eq!(held.status, RunStatus::Waiting);
    let versions: Vec<u64> = store
        .history("held")
        .await
        .unwrap()
        .iter()
        .map(|t| t.version)
        .collect();
    assert_eq!(
        versions,
        [held.version],
        "versions older than the window were not compacted"
    );

    // The compacted run resumes and ends.
    store
        .send_signal("held", "go", &serde_json::json!({}))
        .await
        .unwrap();
    let done = runner.run("held").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let report = durable_agents::store::verify::verify_run(store.as_ref(), &done)
        .await
        .unwrap();
    assert!(report.ok, "{report:?}");
}
