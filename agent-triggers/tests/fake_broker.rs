//! The consume loop against `FakeBroker`, a scripted in-memory stand-in for a broker
//! (it redelivers what was not acknowledged only when told, as a broker does after a
//! consumer's death), over the memory store: exactly one run per message, acks only after
//! the run committed, rejections dead-lettered, backpressure, and the state on a loss.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_triggers::{
    AckFaults, Broker, BrokerError, ConsumeError, Consumer, Decision, DedupKey, InitialState,
    Message, Rejection, SignalTarget, Trigger, TriggerConfigError, TriggerState,
};
use common::{eventually, order_runs, order_state, runner};
use durable_agents::backend::BackendError;
use durable_agents::prelude::*;
use durable_agents::runner::{JsonStarter, RunnerError, StartError};
use durable_agents::store::{HistoryStore, StoreError};
use futures::future::BoxFuture;

const WITHIN: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
struct FakeMessage {
    id: Option<String>,
    origin: String,
    body: Vec<u8>,
}

#[derive(Debug, Default)]
struct FakeState {
    ready: VecDeque<(u64, FakeMessage)>,
    outstanding: BTreeMap<u64, FakeMessage>,
    next_tag: u64,
    acked: Vec<u64>,
    dead_letters: Vec<(FakeMessage, String)>,
    failures: VecDeque<BrokerError>,
}

/// A scripted broker: messages published through it wait in `ready`, are `outstanding`
/// once received, and leave when acknowledged. Clones share the broker.
#[derive(Clone, Debug, Default)]
struct FakeBroker(Arc<Mutex<FakeState>>);

impl FakeBroker {
    fn publish(&self, id: Option<&str>, body: &[u8]) {
        let mut state = self.0.lock().unwrap();
        let tag = state.next_tag;
        state.next_tag += 1;
        state.ready.push_back((
            tag,
            FakeMessage {
                id: id.map(str::to_owned),
                origin: "orders.new".to_owned(),
                body: body.to_vec(),
            },
        ));
    }

    /// What a broker does when its consumer died: deliver again what it did not ack.
    fn redeliver_outstanding(&self) {
        let mut state = self.0.lock().unwrap();
        let outstanding = std::mem::take(&mut state.outstanding);
        state.ready.extend(outstanding);
    }

    fn fail_next_receives(&self, error: BrokerError, times: usize) {
        self.0
            .lock()
            .unwrap()
            .failures
            .extend(std::iter::repeat_n(error, times));
    }

    fn acked(&self) -> usize {
        self.0.lock().unwrap().acked.len()
    }

    fn outstanding(&self) -> usize {
        self.0.lock().unwrap().outstanding.len()
    }

    fn dead_letters(&self) -> Vec<(FakeMessage, String)> {
        self.0.lock().unwrap().dead_letters.clone()
    }
}

impl Broker for FakeBroker {
    type Delivery = (u64, FakeMessage);

    async fn receive(&mut self, max: usize) -> Result<Vec<(u64, FakeMessage)>, BrokerError> {
        let taken = {
            let mut state = self.0.lock().unwrap();
            if let Some(error) = state.failures.pop_front() {
                return Err(error);
            }
            let n = max.min(state.ready.len());
            let taken: Vec<_> = state.ready.drain(..n).collect();
            for (tag, message) in &taken {
                state.outstanding.insert(*tag, message.clone());
            }
            taken
        };
        if taken.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(taken)
    }

    fn message<'a>(&self, (_, message): &'a (u64, FakeMessage)) -> Message<'a> {
        Message {
            id: message.id.as_deref(),
            origin: &message.origin,
            body: &message.body,
        }
    }

    async fn ack(&mut self, (tag, _): &(u64, FakeMessage)) -> Result<(), BrokerError> {
        let mut state = self.0.lock().unwrap();
        assert!(
            state.outstanding.remove(tag).is_some(),
            "ack of message {tag}, which is not outstanding"
        );
        state.acked.push(*tag);
        Ok(())
    }

    async fn dead_letter(
        &mut self,
        _: &str,
        (_, message): &(u64, FakeMessage),
        rejection: &Rejection,
    ) -> Result<(), BrokerError> {
        let mut state = self.0.lock().unwrap();
        state
            .dead_letters
            .push((message.clone(), rejection.to_string()));
        Ok(())
    }
}

/// Crash before the first ack of a started run.
#[derive(Debug)]
struct CrashBeforeFirstAck;

impl AckFaults for CrashBeforeFirstAck {
    fn crash_before_ack(&self, decision: &Decision) -> bool {
        matches!(decision, Decision::Started(_))
    }
}

fn order_trigger(store: &Arc<MemoryStore>) -> Trigger {
    Trigger::new("orders", runner(store.clone()), store.clone()).unwrap()
}

fn spawn(
    consumer: Consumer,
    broker: FakeBroker,
) -> tokio::task::JoinHandle<Result<(), ConsumeError>> {
    tokio::spawn(async move { consumer.consume(broker).await })
}

#[tokio::test]
async fn each_message_starts_one_run_labelled_with_its_trigger() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    for i in 0..5 {
        broker.publish(Some(&format!("m{i}")), &order_state(&format!("o{i}")));
    }
    let trigger = order_trigger(&store);
    let consumer = Consumer::new(trigger.clone());
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "five acks", || async { broker.acked() == 5 }).await;
    let runs = order_runs(store.as_ref()).await;
    assert_eq!(runs.len(), 5);
    let run = runs.iter().find(|r| r.id == trigger.run_id("m3")).unwrap();
    assert_eq!(run.labels["trigger"], "orders");
    assert_eq!(run.labels["trigger.message"], "m3");
    assert_eq!(run.labels["trigger.origin"], "orders.new");
    assert_eq!(run.state["Received"]["order_id"], "o3");
    assert_eq!(monitor.stats().started(), 5);
    assert_eq!(monitor.state(), TriggerState::Consuming);
    task.abort();
}

#[tokio::test]
async fn a_message_delivered_twice_starts_one_run() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    broker.publish(Some("same"), &order_state("o1"));
    broker.publish(Some("same"), &order_state("o1"));
    let consumer = Consumer::new(order_trigger(&store));
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "two acks", || async { broker.acked() == 2 }).await;
    assert_eq!(order_runs(store.as_ref()).await.len(), 1);
    assert_eq!(monitor.stats().started(), 1);
    assert_eq!(monitor.stats().duplicates(), 1);
    task.abort();
}

#[tokio::test]
async fn a_declared_field_is_the_dedup_key_and_a_body_can_be_wrapped() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    // Different broker ids, the same order: one run.
    broker.publish(Some("a"), br#"{"order_id": "o7"}"#);
    broker.publish(Some("b"), br#"{"order_id": "o7"}"#);
    broker.publish(Some("c"), br#"{"order_id": "o8"}"#);
    let trigger = order_trigger(&store)
        .with_initial_state(InitialState::Wrap("Received".to_owned()))
        .unwrap()
        .with_dedup_key(DedupKey::Field("/order_id".to_owned()));
    let task = spawn(Consumer::new(trigger.clone()), broker.clone());
    eventually(WITHIN, "three acks", || async { broker.acked() == 3 }).await;
    let runs = order_runs(store.as_ref()).await;
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().any(|r| r.id == trigger.run_id("o7")));
    task.abort();
}

#[tokio::test]
async fn a_consumer_dead_after_the_commit_leaves_the_message_to_a_redelivery_that_starts_nothing() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    broker.publish(Some("m1"), &order_state("o1"));
    let crashing =
        Consumer::new(order_trigger(&store)).with_ack_faults(Arc::new(CrashBeforeFirstAck));
    let crashed = crashing.consume(broker.clone()).await;
    assert!(
        matches!(crashed, Err(ConsumeError::Crashed(_))),
        "{crashed:?}"
    );
    assert_eq!(
        order_runs(store.as_ref()).await.len(),
        1,
        "the run committed"
    );
    assert_eq!(
        (broker.acked(), broker.outstanding()),
        (0, 1),
        "not acknowledged"
    );

    broker.redeliver_outstanding();
    let consumer = Consumer::new(order_trigger(&store));
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "the redelivery acked", || async {
        broker.acked() == 1
    })
    .await;
    assert_eq!(order_runs(store.as_ref()).await.len(), 1, "no second run");
    assert_eq!(monitor.stats().duplicates(), 1);
    task.abort();
}

#[tokio::test]
async fn bad_messages_go_to_the_dead_letters_with_their_reason_and_the_consumer_goes_on() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    broker.publish(Some("not-json"), b"{not json");
    broker.publish(Some("terminal"), br#"{"Done": {"order_id": "o1"}}"#);
    broker.publish(Some("unknown"), br#"{"Shipped": {}}"#);
    broker.publish(Some("good"), &order_state("o2"));
    let keyed = FakeBroker::default();
    keyed.publish(Some("no-field"), &order_state("o3"));
    let task = spawn(Consumer::new(order_trigger(&store)), broker.clone());
    let keyed_task = spawn(
        Consumer::new(order_trigger(&store).with_dedup_key(DedupKey::Field("/id".to_owned()))),
        keyed.clone(),
    );
    eventually(WITHIN, "all acked", || async {
        broker.acked() == 4 && keyed.acked() == 1
    })
    .await;
    let reasons: Vec<String> = broker.dead_letters().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].starts_with("the body is not JSON"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("`Done` is not an initial state"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("start it in `Received`"), "{reasons:?}");
    assert_eq!(
        keyed.dead_letters()[0].1,
        Rejection::NoDedupKey {
            field: "/id".to_owned(),
            problem: "is missing"
        }
        .to_string()
    );
    let runs = order_runs(store.as_ref()).await;
    assert_eq!(runs.len(), 1, "only the good message started a run");
    task.abort();
    keyed_task.abort();
}

#[tokio::test]
async fn a_bounded_trigger_pauses_at_its_bound_and_resumes_when_runs_finish() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    for i in 0..5 {
        broker.publish(Some(&format!("m{i}")), &order_state(&format!("o{i}")));
    }
    let runner = runner(store.clone());
    let trigger = Trigger::new("orders", runner.clone(), store.clone())
        .unwrap()
        .with_max_in_flight(NonZeroU32::new(2).unwrap())
        .with_backpressure_poll(Duration::from_millis(20));
    let consumer = Consumer::new(trigger);
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "paused at 2", || async {
        monitor.state()
            == TriggerState::Paused {
                in_flight: 2,
                bound: 2,
            }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        order_runs(store.as_ref()).await.len(),
        2,
        "nothing pulled beyond the bound"
    );
    assert_eq!(broker.outstanding(), 0, "and nothing held unacknowledged");

    // Finish runs as they come until all five ran.
    eventually(WITHIN, "five runs completed", || async {
        let runs = order_runs(store.as_ref()).await;
        for run in runs.iter().filter(|r| r.status == RunStatus::Running) {
            runner.run(&run.id).await.unwrap();
        }
        let runs = order_runs(store.as_ref()).await;
        assert!(
            runs.iter()
                .filter(|r| r.status == RunStatus::Running)
                .count()
                <= 2,
            "more than 2 runs in flight"
        );
        runs.len() == 5 && runs.iter().all(|r| r.status == RunStatus::Completed)
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn a_lost_broker_shows_as_disconnected_until_it_answers_again() {
    let store = Arc::new(MemoryStore::new());
    let broker = FakeBroker::default();
    broker.fail_next_receives(BrokerError::Lost("connection refused".to_owned()), 3);
    let consumer =
        Consumer::new(order_trigger(&store).with_max_backoff(Duration::from_millis(300)));
    let mut states = consumer.monitor().watch();
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    states
        .wait_for(|s| matches!(s, TriggerState::Disconnected { error, .. } if error == "connection refused"))
        .await
        .unwrap();
    broker.publish(Some("m1"), &order_state("o1"));
    eventually(WITHIN, "consuming again", || async { broker.acked() == 1 }).await;
    assert_eq!(monitor.state(), TriggerState::Consuming);
    task.abort();
}

#[test]
fn a_trigger_name_must_fit_a_label_and_a_run_id() {
    let store = Arc::new(MemoryStore::new());
    for bad in ["", "-orders", "orders/eu", "orders eu", &"x".repeat(65)] {
        let made = Trigger::new(bad, runner(store.clone()), store.clone());
        assert_eq!(
            made.err(),
            Some(TriggerConfigError::BadName(bad.to_owned())),
            "{bad:?}"
        );
    }
    let trigger = order_trigger(&store);
    assert_eq!(trigger.run_id("k"), trigger.run_id("k"));
    assert_ne!(trigger.run_id("k"), trigger.run_id("l"));
    assert!(trigger.run_id(&"k".repeat(10_000)).len() < 64);
}

/// A parcel waits for the signal that it was delivered.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Parcel {
    #[agent(initial, wait = "delivered", wait_payload = Delivered, to(Done, InTransit))]
    InTransit { parcel: String },
    #[agent(terminal)]
    Done { parcel: String, by: String },
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct Delivered {
    by: String,
}

struct ParcelBehaviour;

impl ParcelHandlers for ParcelBehaviour {
    async fn in_transit(
        &self,
        ctx: Ctx<'_, parcel::InTransit>,
        wake: Wake,
        parcel::InTransit { parcel }: parcel::InTransit,
    ) -> StepResult<parcel::InTransit> {
        let Ok(Delivered { by }) = wake.payload() else {
            return Ok(ctx.to(parcel::InTransit { parcel }));
        };
        Ok(ctx.to(parcel::Done { parcel, by }))
    }
}

/// A runner of `Parcel` on `store`, parcel `p1` started and in transit.
async fn parcel_in_transit(store: &Arc<MemoryStore>) -> Arc<Runner<Parcel, ParcelBehaviour>> {
    let runner = Arc::new(
        Runner::<Parcel, _>::builder(store.clone(), ParcelBehaviour, ToolBox::new())
            .build()
            .unwrap(),
    );
    let parcel = Parcel::InTransit {
        parcel: "p1".to_owned(),
    };
    runner.start("p1", parcel).await.unwrap();
    runner
}

/// A trigger signalling `delivered` to the parcel a message names, with its `delivery`.
fn deliveries(runner: &Arc<Runner<Parcel, ParcelBehaviour>>, store: &Arc<MemoryStore>) -> Trigger {
    let target = SignalTarget {
        name: "delivered".to_owned(),
        run_field: "/parcel".to_owned(),
        payload_field: Some("/delivery".to_owned()),
    };
    Trigger::signalling("deliveries", runner.clone(), target, store.clone()).unwrap()
}

#[tokio::test]
async fn a_signalling_trigger_signals_the_run_its_message_names_and_rejects_what_it_cannot() {
    let store = Arc::new(MemoryStore::new());
    let runner = parcel_in_transit(&store).await;
    let trigger = deliveries(&runner, &store);
    let broker = FakeBroker::default();
    broker.publish(
        Some("d1"),
        br#"{"parcel": "p1", "delivery": {"by": "ann"}}"#,
    );
    broker.publish(
        Some("d2"),
        br#"{"parcel": "nowhere", "delivery": {"by": "ann"}}"#,
    );
    broker.publish(Some("d3"), br#"{"parcel": "p1", "delivery": {"by": 7}}"#);
    broker.publish(Some("d4"), br#"{"delivery": {"by": "ann"}}"#);
    let consumer = Consumer::new(trigger);
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "four acks", || async { broker.acked() == 4 }).await;
    assert_eq!(monitor.stats().signalled(), 1);
    let reasons: Vec<String> = broker.dead_letters().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].contains("run `nowhere` not found"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with("the signal was refused"),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[2],
        "the run field `/parcel` is missing or not a string"
    );

    let done = runner.run("p1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state["Done"]["by"], "ann");
    task.abort();
}

/// Crash before the ack of a stored signal.
#[derive(Debug)]
struct CrashBeforeSignalAck;

impl AckFaults for CrashBeforeSignalAck {
    fn crash_before_ack(&self, decision: &Decision) -> bool {
        matches!(decision, Decision::Signalled { .. })
    }
}

#[tokio::test]
async fn a_redelivered_signal_message_signals_once_even_after_the_run_moved_on() {
    let store = Arc::new(MemoryStore::new());
    let runner = parcel_in_transit(&store).await;
    let broker = FakeBroker::default();
    broker.publish(
        Some("d1"),
        br#"{"parcel": "p1", "delivery": {"by": "ann"}}"#,
    );
    let crashed = Consumer::new(deliveries(&runner, &store))
        .with_ack_faults(Arc::new(CrashBeforeSignalAck))
        .consume(broker.clone())
        .await;
    assert!(
        matches!(crashed, Err(ConsumeError::Crashed(_))),
        "{crashed:?}"
    );
    assert_eq!(broker.outstanding(), 1, "not acknowledged");
    // The run consumes the signal and ends before the message comes again: the redelivery
    // is a duplicate, not a signal the run no longer waits for (a dead letter).
    let done = runner.run("p1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);

    broker.redeliver_outstanding();
    let consumer = Consumer::new(deliveries(&runner, &store));
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    eventually(WITHIN, "the redelivery acked", || async {
        broker.acked() == 1
    })
    .await;
    assert_eq!(
        (monitor.stats().signalled(), monitor.stats().duplicates()),
        (0, 1)
    );
    assert!(
        broker.dead_letters().is_empty(),
        "{:?}",
        broker.dead_letters()
    );
    assert!(
        store.pending_signals("p1").await.unwrap().is_empty(),
        "the redelivery stored a second signal"
    );
    task.abort();
}

/// Starts through a real runner, after failing the first `failures` starts as a store
/// that is down would.
struct FlakyStarter {
    runner: Arc<dyn JsonStarter>,
    failures: Mutex<u32>,
}

impl JsonStarter for FlakyStarter {
    fn agent(&self) -> &'static str {
        self.runner.agent()
    }

    fn check_initial_state(&self, state: &serde_json::Value) -> Result<(), StartError> {
        self.runner.check_initial_state(state)
    }

    fn start_json(
        &self,
        id: String,
        state: serde_json::Value,
        labels: durable_agents::store::Labels,
    ) -> BoxFuture<'_, Result<RunRecord, StartError>> {
        let fail = {
            let mut failures = self.failures.lock().unwrap();
            let fail = *failures > 0;
            *failures = failures.saturating_sub(1);
            fail
        };
        if fail {
            let down = StoreError::Unavailable(BackendError::new("database is down"));
            return Box::pin(async move { Err(StartError::Runner(RunnerError::Store(down))) });
        }
        self.runner.start_json(id, state, labels)
    }
}

#[tokio::test]
async fn a_failing_store_keeps_the_message_unacknowledged_and_is_tried_again() {
    let store = Arc::new(MemoryStore::new());
    let starter = Arc::new(FlakyStarter {
        runner: runner(store.clone()),
        failures: Mutex::new(3),
    });
    let trigger = Trigger::new("orders", starter, store.clone())
        .unwrap()
        .with_max_backoff(Duration::from_millis(200));
    let broker = FakeBroker::default();
    broker.publish(Some("m1"), &order_state("o1"));
    let consumer = Consumer::new(trigger);
    let mut states = consumer.monitor().watch();
    let monitor = consumer.monitor();
    let task = spawn(consumer, broker.clone());
    tokio::time::timeout(
        WITHIN,
        states.wait_for(
            |s| matches!(s, TriggerState::StoreUnavailable { error, .. } if error.contains("database is down")),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        broker.acked(),
        0,
        "nothing acknowledged while the store is down"
    );
    assert_eq!(broker.dead_letters().len(), 0, "and nothing dead-lettered");
    eventually(WITHIN, "acked once the store answers", || async {
        broker.acked() == 1
    })
    .await;
    assert_eq!(order_runs(store.as_ref()).await.len(), 1);
    assert_eq!(monitor.stats().started(), 1);
    assert_eq!(monitor.state(), TriggerState::Consuming);
    task.abort();
}
