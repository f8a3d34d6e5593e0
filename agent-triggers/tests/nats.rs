//! The NATS trigger against a real `nats-server -js`, over SQLite (a file in a temporary
//! folder): N messages start N runs; a message id seen again starts none; a consumer that
//! dies between the commit and the ack leaves the message to a redelivery that starts
//! nothing; bad messages land on the dead-letter stream; a bound on runs in flight holds;
//! a restarted server is reached again and the rest consumed.
//!
//! Skipped, saying so, when `nats-server` is not installed; under CI that fails.

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_triggers::nats::{NatsBroker, NatsConfig};
use agent_triggers::{
    AckFaults, ConsumeError, Consumer, Decision, Trigger, TriggerMonitor, TriggerState,
};
use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use common::servers::Server;
use common::{eventually, order_runs, order_state, runner};
use durable_agents::prelude::*;
use durable_agents::store::HistoryStore;
use futures::StreamExt;
use tempfile::TempDir;

const WITHIN: Duration = Duration::from_secs(30);

/// A server with the ORDERS stream (`orders.>`, duplicate window `window`) and the DEAD
/// stream for rejections, and a SQLite store.
struct Setup {
    server: Server,
    jetstream: jetstream::Context,
    store: Arc<SqliteStore>,
    _dir: TempDir,
}

impl Setup {
    async fn new(window: Duration) -> Option<Self> {
        let server = Server::nats()?;
        let client = async_nats::connect(url(&server)).await.unwrap();
        let jetstream = jetstream::new(client);
        for (name, subject, duplicate_window) in [
            ("ORDERS", "orders.>", window),
            ("DEAD", "dead.orders", Duration::from_mins(2)),
        ] {
            jetstream
                .create_stream(stream::Config {
                    name: name.to_owned(),
                    subjects: vec![subject.to_owned()],
                    duplicate_window,
                    ..stream::Config::default()
                })
                .await
                .unwrap();
        }
        let dir = TempDir::new().unwrap();
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("runs.db"))
                .await
                .unwrap(),
        );
        Some(Self {
            server,
            jetstream,
            store,
            _dir: dir,
        })
    }

    fn trigger(&self) -> Trigger {
        Trigger::new("orders", runner(self.store.clone()), self.store.clone())
            .unwrap()
            .with_max_backoff(Duration::from_millis(500))
    }

    /// The trigger's broker: a client of its own, the durable consumer `orders`.
    async fn broker(&self, ack_wait: Duration) -> NatsBroker {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(url(&self.server))
            .await
            .unwrap();
        let mut config = NatsConfig::new("ORDERS", "orders", "dead.orders");
        config.ack_wait = ack_wait;
        config.fetch_wait = Duration::from_millis(500);
        NatsBroker::new(client, config)
    }

    /// Publish and wait for the stream to store it.
    async fn publish(&self, id: Option<&str>, body: Vec<u8>) {
        let mut headers = HeaderMap::new();
        if let Some(id) = id {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        }
        self.jetstream
            .publish_with_headers("orders.new", headers, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    async fn run_count(&self) -> usize {
        order_runs(self.store.as_ref()).await.len()
    }
}

fn url(server: &Server) -> String {
    format!("nats://127.0.0.1:{}", server.port())
}

fn spawn(
    consumer: Consumer,
    broker: NatsBroker,
) -> (
    TriggerMonitor,
    tokio::task::JoinHandle<Result<(), ConsumeError>>,
) {
    let monitor = consumer.monitor();
    (
        monitor,
        tokio::spawn(async move { consumer.consume(broker).await }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_starts_one_run_and_an_id_seen_again_starts_none() {
    // A short duplicate window: the stream stores the repeated id again, so the trigger's
    // own dedup is what is tested.
    let Some(setup) = Setup::new(Duration::from_millis(100)).await else {
        return;
    };
    for i in 0..10 {
        setup
            .publish(Some(&format!("order-{i}")), order_state(&format!("o{i}")))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.publish(Some("order-3"), order_state("o3")).await;
    // Without an id, the stream sequence is the key: two publishes, two runs.
    setup.publish(None, order_state("same")).await;
    setup.publish(None, order_state("same")).await;

    let trigger = setup.trigger();
    let (monitor, task) = spawn(
        Consumer::new(trigger.clone()),
        setup.broker(Duration::from_secs(30)).await,
    );
    eventually(WITHIN, "13 messages decided", || async {
        monitor.stats().started() + monitor.stats().duplicates() == 13
    })
    .await;
    assert_eq!(setup.run_count().await, 12);
    assert_eq!(monitor.stats().duplicates(), 1);
    let run = setup
        .store
        .load_run(&trigger.run_id("order-3"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.labels["trigger.message"], "order-3");
    assert_eq!(run.labels["trigger.origin"], "orders.new");
    assert_eq!(monitor.state(), TriggerState::Consuming);
    task.abort();
}

/// Dies before acknowledging the first started run, once.
#[derive(Debug, Default)]
struct CrashOnce(AtomicBool);

impl AckFaults for CrashOnce {
    fn crash_before_ack(&self, decision: &Decision) -> bool {
        matches!(decision, Decision::Started(_)) && !self.0.swap(true, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_dead_before_its_ack_gets_the_message_again_and_starts_nothing() {
    let Some(setup) = Setup::new(Duration::from_mins(2)).await else {
        return;
    };
    setup.publish(Some("order-1"), order_state("o1")).await;
    let ack_wait = Duration::from_secs(1);
    let crashing = Consumer::new(setup.trigger()).with_ack_faults(Arc::new(CrashOnce::default()));
    let crashed = crashing.consume(setup.broker(ack_wait).await).await;
    assert!(
        matches!(crashed, Err(ConsumeError::Crashed(_))),
        "{crashed:?}"
    );
    assert_eq!(
        setup.run_count().await,
        1,
        "the run committed before the crash"
    );

    // A new consumer process: the server delivers the unacknowledged message again once
    // `ack_wait` passed.
    let (monitor, task) = spawn(Consumer::new(setup.trigger()), setup.broker(ack_wait).await);
    eventually(WITHIN, "the redelivery decided", || async {
        monitor.stats().duplicates() == 1
    })
    .await;
    assert_eq!(monitor.stats().started(), 0);
    assert_eq!(setup.run_count().await, 1, "no second run");
    // Acknowledged this time: nothing left pending on the consumer.
    let consumer: jetstream::consumer::PullConsumer = setup
        .jetstream
        .get_stream("ORDERS")
        .await
        .unwrap()
        .get_consumer("orders")
        .await
        .unwrap();
    eventually(WITHIN, "no ack pending", || {
        let mut consumer = consumer.clone();
        async move {
            let info = consumer.info().await.unwrap();
            info.num_ack_pending == 0 && info.num_pending == 0
        }
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_go_to_the_dead_letter_stream_and_the_consumer_goes_on() {
    let Some(setup) = Setup::new(Duration::from_mins(2)).await else {
        return;
    };
    setup.publish(Some("bad-json"), b"{oops".to_vec()).await;
    setup
        .publish(
            Some("bad-state"),
            br#"{"Done": {"order_id": "x"}}"#.to_vec(),
        )
        .await;
    setup.publish(Some("good"), order_state("o1")).await;
    let (monitor, task) = spawn(
        Consumer::new(setup.trigger()),
        setup.broker(Duration::from_secs(30)).await,
    );
    eventually(WITHIN, "three messages decided", || async {
        monitor.stats().rejected() == 2 && monitor.stats().started() == 1
    })
    .await;
    let dead = setup
        .jetstream
        .get_stream("DEAD")
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config::default())
        .await
        .unwrap();
    let mut letters = dead
        .fetch()
        .max_messages(10)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(letter) = letters.next().await {
        let letter = letter.unwrap();
        let headers = letter.headers.clone().unwrap();
        seen.push((
            headers
                .get("Trigger-Message-Id")
                .unwrap()
                .as_str()
                .to_owned(),
            headers
                .get("Trigger-Rejection")
                .unwrap()
                .as_str()
                .to_owned(),
            letter.payload.to_vec(),
        ));
        assert_eq!(headers.get("Trigger").unwrap().as_str(), "orders");
        assert_eq!(
            headers.get("Trigger-Subject").unwrap().as_str(),
            "orders.new"
        );
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, "bad-json");
    assert!(seen[0].1.starts_with("the body is not JSON"), "{seen:?}");
    assert_eq!(seen[0].2, b"{oops", "the body as it came");
    assert_eq!(seen[1].0, "bad-state");
    assert!(seen[1].1.contains("is not an initial state"), "{seen:?}");
    assert_eq!(setup.run_count().await, 1);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_of_two_creates_two_runs_until_they_finish() {
    let Some(setup) = Setup::new(Duration::from_mins(2)).await else {
        return;
    };
    for i in 0..5 {
        setup
            .publish(Some(&format!("order-{i}")), order_state(&format!("o{i}")))
            .await;
    }
    let runner = runner(setup.store.clone());
    let trigger = Trigger::new("orders", runner.clone(), setup.store.clone())
        .unwrap()
        .with_max_in_flight(NonZeroU32::new(2).unwrap())
        .with_backpressure_poll(Duration::from_millis(50));
    let (monitor, task) = spawn(
        Consumer::new(trigger),
        setup.broker(Duration::from_secs(30)).await,
    );
    eventually(WITHIN, "paused at the bound", || async {
        monitor.state()
            == TriggerState::Paused {
                in_flight: 2,
                bound: 2,
            }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        setup.run_count().await,
        2,
        "no run beyond the bound while none finished"
    );

    for run in order_runs(setup.store.as_ref()).await {
        runner.run(&run.id).await.unwrap();
    }
    eventually(WITHIN, "the next two", || async {
        setup.run_count().await == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(setup.run_count().await, 4, "two more, not three");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reached_again_and_the_rest_consumed() {
    let Some(mut setup) = Setup::new(Duration::from_mins(2)).await else {
        return;
    };
    for i in 0..5 {
        setup
            .publish(Some(&format!("order-{i}")), order_state(&format!("o{i}")))
            .await;
    }
    let (monitor, task) = spawn(
        Consumer::new(setup.trigger()),
        setup.broker(Duration::from_secs(30)).await,
    );
    eventually(WITHIN, "the first five", || async {
        monitor.stats().started() == 5
    })
    .await;

    setup.server.stop();
    let mut states = monitor.watch();
    tokio::time::timeout(
        WITHIN,
        states.wait_for(|s| matches!(s, TriggerState::Disconnected { .. })),
    )
    .await
    .expect("the loss is reported")
    .unwrap();
    setup.server.start();

    // The publisher's own client reconnects too; it waits for the server.
    for i in 5..10 {
        setup
            .publish(Some(&format!("order-{i}")), order_state(&format!("o{i}")))
            .await;
    }
    eventually(WITHIN, "the other five", || async {
        setup.run_count().await == 10
    })
    .await;
    assert_eq!(monitor.state(), TriggerState::Consuming);
    assert_eq!(monitor.stats().started(), 10);
    task.abort();
}
