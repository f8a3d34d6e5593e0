//! The MQTT trigger against a real `mosquitto`, over SQLite (a file in a temporary
//! folder): N messages start N runs; the same message (same dedup field) twice starts one;
//! a consumer that dies between the commit and the PUBACK gets the message again from its
//! persistent session and starts nothing; bad messages land on the dead-letter topic; a
//! bound on runs in flight holds; a restarted broker is reached again; a dead letter counts
//! only once the broker acknowledged it.
//!
//! Skipped, saying so, when `mosquitto` is not installed; under CI that fails.

mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_triggers::mqtt::MqttBroker;
use agent_triggers::{
    AckFaults, Broker, BrokerError, ConsumeError, Consumer, Decision, DedupKey, Rejection, Trigger,
    TriggerMonitor, TriggerState,
};
use common::servers::Server;
use common::{eventually, order_runs, order_state, runner};
use durable_agents::prelude::*;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tempfile::TempDir;
use tokio::sync::mpsc;

const WITHIN: Duration = Duration::from_secs(30);

struct Setup {
    server: Server,
    store: Arc<SqliteStore>,
    publisher: AsyncClient,
    _dir: TempDir,
}

impl Setup {
    async fn new() -> Option<Self> {
        let server = Server::mosquitto()?;
        let dir = TempDir::new().unwrap();
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("runs.db"))
                .await
                .unwrap(),
        );
        let (publisher, mut event_loop) = AsyncClient::new(options(&server, "publisher"), 64);
        tokio::spawn(async move {
            loop {
                if event_loop.poll().await.is_err() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Some(Self {
            server,
            store,
            publisher,
            _dir: dir,
        })
    }

    fn trigger(&self) -> Trigger {
        Trigger::new("orders", runner(self.store.clone()), self.store.clone())
            .unwrap()
            .with_dedup_key(DedupKey::Field("/Received/order_id".to_owned()))
            .with_max_backoff(Duration::from_millis(500))
    }

    /// The trigger's broker: client id `orders-trigger`, so its session outlives it.
    fn broker(&self) -> MqttBroker {
        MqttBroker::connect(
            options(&self.server, "orders-trigger"),
            "orders/new",
            "orders/dead",
            Duration::from_millis(500),
        )
    }

    async fn publish(&self, body: Vec<u8>) {
        self.publisher
            .publish("orders/new", QoS::AtLeastOnce, false, body)
            .await
            .unwrap();
    }

    async fn run_count(&self) -> usize {
        order_runs(self.store.as_ref()).await.len()
    }
}

fn options(server: &Server, client_id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, "127.0.0.1", server.port());
    options.set_keep_alive(Duration::from_secs(5));
    options
}

/// Start a consumer and wait until its subscription is acknowledged.
async fn consuming(
    consumer: Consumer,
    broker: MqttBroker,
) -> (
    TriggerMonitor,
    tokio::task::JoinHandle<Result<(), ConsumeError>>,
) {
    let monitor = consumer.monitor();
    let task = tokio::spawn(async move { consumer.consume(broker).await });
    let mut states = monitor.watch();
    tokio::time::timeout(WITHIN, states.wait_for(|s| *s == TriggerState::Consuming))
        .await
        .expect("subscribed")
        .unwrap();
    (monitor, task)
}

/// A subscriber to the dead-letter topic, its messages on a channel.
async fn dead_letters(server: &Server) -> mpsc::UnboundedReceiver<serde_json::Value> {
    let (client, mut event_loop) = AsyncClient::new(options(server, "dead-reader"), 64);
    let (sender, receiver) = mpsc::unbounded_channel();
    let (subscribed, mut on_subscribed) = mpsc::unbounded_channel();
    client
        .subscribe("orders/dead", QoS::AtLeastOnce)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _client = client;
        loop {
            match event_loop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = sender.send(serde_json::from_slice(&p.payload).unwrap());
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = subscribed.send(());
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    on_subscribed.recv().await.unwrap();
    receiver
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_starts_one_run_and_the_same_order_twice_starts_one() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let (monitor, task) = consuming(Consumer::new(setup.trigger()), setup.broker()).await;
    for i in 0..10 {
        setup.publish(order_state(&format!("o{i}"))).await;
    }
    setup.publish(order_state("o4")).await;
    eventually(WITHIN, "11 messages decided", || async {
        monitor.stats().started() + monitor.stats().duplicates() == 11
    })
    .await;
    assert_eq!(setup.run_count().await, 10);
    assert_eq!(monitor.stats().duplicates(), 1);
    let runs = order_runs(setup.store.as_ref()).await;
    let run = runs
        .iter()
        .find(|r| r.labels["trigger.message"] == "o4")
        .unwrap();
    assert_eq!(run.labels["trigger.origin"], "orders/new");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_field_identical_messages_are_one_run() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let trigger = setup.trigger().with_dedup_key(DedupKey::MessageId);
    let (monitor, task) = consuming(Consumer::new(trigger), setup.broker()).await;
    setup.publish(order_state("o1")).await;
    setup.publish(order_state("o1")).await;
    setup.publish(order_state("o2")).await;
    eventually(WITHIN, "3 messages decided", || async {
        monitor.stats().started() + monitor.stats().duplicates() == 3
    })
    .await;
    assert_eq!(setup.run_count().await, 2);
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
async fn a_consumer_dead_before_its_puback_gets_the_message_again_and_starts_nothing() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let crashing = Consumer::new(setup.trigger()).with_ack_faults(Arc::new(CrashOnce::default()));
    let monitor = crashing.monitor();
    let broker = setup.broker();
    let crashed = tokio::spawn(async move { crashing.consume(broker).await });
    let mut states = monitor.watch();
    states
        .wait_for(|s| *s == TriggerState::Consuming)
        .await
        .unwrap();
    setup.publish(order_state("o1")).await;
    let crashed = tokio::time::timeout(WITHIN, crashed)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(crashed, Err(ConsumeError::Crashed(_))),
        "{crashed:?}"
    );
    assert_eq!(
        setup.run_count().await,
        1,
        "the run committed before the crash"
    );
    // The broker was dropped with the task: its connection is closed, the message
    // unacknowledged in the session.

    let (monitor, task) = consuming(Consumer::new(setup.trigger()), setup.broker()).await;
    eventually(WITHIN, "the redelivery decided", || async {
        monitor.stats().duplicates() == 1
    })
    .await;
    assert_eq!(monitor.stats().started(), 0);
    assert_eq!(setup.run_count().await, 1, "no second run");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_go_to_the_dead_letter_topic_and_the_consumer_goes_on() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let mut letters = dead_letters(&setup.server).await;
    let (monitor, task) = consuming(Consumer::new(setup.trigger()), setup.broker()).await;
    setup.publish(b"{oops".to_vec()).await;
    setup.publish(vec![0xff, 0xfe]).await;
    setup
        .publish(br#"{"Done": {"order_id": "x"}}"#.to_vec())
        .await;
    setup.publish(order_state("o1")).await;
    eventually(WITHIN, "four messages decided", || async {
        monitor.stats().rejected() == 3 && monitor.stats().started() == 1
    })
    .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            tokio::time::timeout(WITHIN, letters.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    for letter in &seen {
        assert_eq!(letter["trigger"], "orders");
        assert_eq!(letter["topic"], "orders/new");
    }
    assert_eq!(seen[0]["payload"], "{oops");
    assert!(
        seen[0]["rejection"]
            .as_str()
            .unwrap()
            .starts_with("the body is not JSON")
    );
    assert_eq!(seen[1]["payload_hex"], "fffe");
    assert!(
        seen[2]["rejection"]
            .as_str()
            .unwrap()
            .contains("dedup field `/Received/order_id` is missing"),
        "{seen:?}"
    );
    assert_eq!(setup.run_count().await, 1);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_of_two_creates_two_runs_until_they_finish() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let runner = runner(setup.store.clone());
    let trigger = setup
        .trigger()
        .with_max_in_flight(NonZeroU32::new(2).unwrap())
        .with_backpressure_poll(Duration::from_millis(50));
    let (monitor, task) = consuming(Consumer::new(trigger), setup.broker()).await;
    for i in 0..5 {
        setup.publish(order_state(&format!("o{i}"))).await;
    }
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
async fn a_restarted_broker_is_reached_again_and_the_rest_consumed() {
    let Some(mut setup) = Setup::new().await else {
        return;
    };
    let (monitor, task) = consuming(Consumer::new(setup.trigger()), setup.broker()).await;
    for i in 0..5 {
        setup.publish(order_state(&format!("o{i}"))).await;
    }
    eventually(WITHIN, "the first five", || async {
        setup.run_count().await == 5
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
    tokio::time::timeout(WITHIN, states.wait_for(|s| *s == TriggerState::Consuming))
        .await
        .expect("consuming again")
        .unwrap();

    for i in 5..10 {
        setup.publish(order_state(&format!("o{i}"))).await;
    }
    eventually(WITHIN, "the other five", || async {
        setup.run_count().await == 10
    })
    .await;
    task.abort();
}

/// Call `receive` until the broker's subscription is acknowledged.
async fn subscribed(broker: &mut MqttBroker) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while broker.receive(16).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_counts_only_once_the_broker_acknowledged_it() {
    let Some(mut setup) = Setup::new().await else {
        return;
    };
    let mut broker = setup.broker().with_confirm_wait(Duration::from_secs(1));
    subscribed(&mut broker).await;
    let rejected = rumqttc::Publish::new("orders/new", QoS::AtLeastOnce, b"{oops".to_vec());
    let rejection = Rejection::NotJson("expected a value".to_owned());

    // The broker is gone: the dead letter is not acknowledged, so neither may the original
    // be (the consumer leaves it to be delivered again).
    setup.server.stop();
    let unconfirmed = broker.dead_letter("orders", &rejected, &rejection).await;
    assert!(
        matches!(&unconfirmed, Err(BrokerError::Lost(why)) if why.contains("did not acknowledge")),
        "{unconfirmed:?}"
    );

    setup.server.start();
    let mut letters = dead_letters(&setup.server).await;
    subscribed(&mut broker).await;
    broker
        .dead_letter("orders", &rejected, &rejection)
        .await
        .expect("acknowledged once the broker is back");
    let letter = tokio::time::timeout(WITHIN, letters.recv())
        .await
        .expect("the dead letter arrives")
        .unwrap();
    assert_eq!(letter["payload"], "{oops");
}
