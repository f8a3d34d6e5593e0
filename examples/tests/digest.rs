//! The digest example's agent under its schedule: one worker ticking an every-second
//! schedule on a SQLite file starts one run per tick, each named after its tick, each waits
//! on its durable timer and sends its digest once; with a real `nats-server`, a request
//! published twice with one message id starts one digest.

use std::sync::Arc;
use std::time::Duration;

use durable_agents::ToolBox;
use durable_agents::backend::now_ms;
use durable_agents::runner::{Runner, Worker, WorkerConfig};
use durable_agents::schedule::{NewSchedule, ScheduleSpec, create_schedule, pause_schedule};
use durable_agents::store::{RunFilter, RunStatus, Store, TransitionKind};
use examples::digest::{Digest, Handlers};

/// A SQLite file in `dir`, and a runner of the digest agent on it with its handlers.
async fn digests_on_sqlite(
    dir: &tempfile::TempDir,
) -> (Arc<dyn Store>, Handlers, Runner<Digest, Handlers>) {
    let sqlite = durable_agents::sqlite::SqliteStore::open(dir.path().join("runs.sqlite3"))
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(sqlite);
    let handlers = Handlers::default();
    let runner = Runner::new(Arc::clone(&store), handlers.clone(), ToolBox::new()).unwrap();
    (store, handlers, runner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_starts_one_run_that_waits_on_its_timer_and_sends_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, handlers, runner) = digests_on_sqlite(&dir).await;
    let new: NewSchedule = serde_json::from_value(serde_json::json!({
        "id": "digest", "agent": "Digest",
        "spec": { "interval": { "every_ms": 1000 } },
        "overlap": "allow_all",
        "initial_state": { "Start": { "topic": "news" } },
    }))
    .unwrap();
    assert!(matches!(new.spec, ScheduleSpec::Interval { .. }));
    create_schedule(store.as_ref(), new, Some(&runner), now_ms())
        .await
        .unwrap();
    let worker = Worker::new(
        runner,
        WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    );
    worker
        .run_until(tokio::time::sleep(Duration::from_millis(3_500)))
        .await;
    pause_schedule(store.as_ref(), "digest", now_ms())
        .await
        .unwrap();
    // What the worker left waiting on its timer (300 ms), it finishes once the timer is due
    // (the schedule is paused: no new tick). A worker run until idle does not wait for
    // timers: it stops when nothing is claimable, so it is run again after each timer (a
    // run started by the last tick takes its first step, then waits on its timer).
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        worker.run_until_idle().await;
    }

    let runs = store
        .list_runs(&RunFilter {
            labels: [("schedule".to_owned(), "digest".to_owned())].into(),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(
        (2..=5).contains(&runs.len()),
        "about one run per second over 3.5 s: {}",
        runs.len()
    );
    for run in &runs {
        let tick = &run.labels["schedule.tick"];
        assert_eq!(run.id, format!("digest@{tick}"));
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.state_name, "Sent");
        // It waited on its timer: the step into `Settling` left it waiting.
        let history = store.history(&run.id).await.unwrap();
        assert!(
            history.iter().any(|t| t.kind == TransitionKind::Step
                && t.to_state == "Settling"
                && t.status == RunStatus::Waiting),
            "{history:?}"
        );
    }
    assert_eq!(
        handlers.outbox.lock().unwrap().len(),
        runs.len(),
        "each run sent its digest once"
    );
}

/// The brokers agent-triggers' tests run, started the same way (`nats-server -js` on a free
/// port, skipped when missing, failed under CI).
#[path = "../../agent-triggers/tests/common/servers.rs"]
#[allow(dead_code)]
mod servers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_published_twice_on_nats_starts_one_digest() {
    let Some(nats) = servers::Server::nats() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (store, handlers, runner) = digests_on_sqlite(&dir).await;
    let url = format!("nats://127.0.0.1:{}", nats.port());
    examples::digest::start_from_nats(&url, &runner, &store)
        .await
        .unwrap();
    let by_message = RunFilter {
        labels: [("trigger".to_owned(), examples::digest::TRIGGER.to_owned())].into(),
        ..RunFilter::default()
    };
    let worker = Worker::new(
        runner,
        WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    );
    // The run is started once its message is consumed, then waits on its timer (300 ms).
    let store_seen = Arc::clone(&store);
    let filter = by_message.clone();
    worker
        .run_until(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while tokio::time::Instant::now() < deadline {
                let runs = store_seen.list_runs(&filter).await.unwrap_or_default();
                if runs.iter().any(|r| r.status == RunStatus::Completed) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    // The second publish of the same `Nats-Msg-Id` is dropped by JetStream's own
    // deduplication; a redelivery would be the trigger's duplicate: one run either way.
    let runs = store.list_runs(&by_message).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:?}", runs[0]);
    assert_eq!(runs[0].labels["trigger.origin"], "digests.requested");
    assert_eq!(handlers.outbox.lock().unwrap().len(), 1, "sent once");
}
