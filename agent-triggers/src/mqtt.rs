//! A trigger on an MQTT topic (3.1.1) at QoS 1, with a persistent session and manual acks.
//!
//! **The session is persistent** (`clean_session = false`): the broker keeps the
//! subscription and every QoS 1 message not acknowledged while the trigger is away, and
//! delivers them again when a client of the same id comes back. Give each trigger its own
//! client id, stable across restarts.
//!
//! **Acknowledgement** (the PUBACK) is sent only after
//! [`Trigger::decide`](crate::Trigger::decide) returned, so after the run's creation
//! committed. A trigger that dies in between leaves the message unacknowledged and the
//! broker delivers it again on the next connection.
//!
//! **The message id.** MQTT gives a message no id that survives redelivery (the packet id
//! is reused), so [`DedupKey::MessageId`](crate::DedupKey::MessageId) means a SHA-256 of
//! the topic and the payload: *two messages with the same topic and payload are one run*.
//! Publishers that may send equal payloads for different events should put an id in the
//! body and declare it with [`DedupKey::Field`](crate::DedupKey::Field).
//!
//! **Dead letters** are published at QoS 1 to the configured topic as a JSON envelope
//! (MQTT 3.1.1 has no headers): `{"trigger", "topic", "rejection", "payload"}`, the payload
//! as a string when it is UTF-8, else as `"payload_hex"`. The original's PUBACK is sent only
//! after the broker acknowledged the dead letter (its own PUBACK, awaited up to
//! [`MqttBroker::with_confirm_wait`]): a crash or a lost connection in between leaves the
//! original to be delivered and rejected again, so a dead letter is written at least once,
//! never lost.
//!
//! **Backpressure.** While the trigger is paused it does not acknowledge; the broker stops
//! sending once its in-flight window for the client is full (mosquitto's
//! `max_inflight_messages`, 20 by default) and queues the rest in the session. The
//! connection is kept alive meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, Publish, QoS};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::consume::{Backoff, Broker, BrokerError};
use crate::trigger::{Message, Rejection};

/// What the connection's task tells the broker.
#[derive(Debug)]
enum Incoming {
    Publish(Publish),
    Subscribed,
    Lost(String),
}

/// The [`Broker`] over an MQTT topic at QoS 1.
#[derive(Debug)]
pub struct MqttBroker {
    client: AsyncClient,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    subscribed: bool,
    pending_error: Option<String>,
    dead_letter_topic: String,
    receive_wait: Duration,
    confirm_wait: Duration,
    confirming: Confirming,
    connection: JoinHandle<()>,
}

/// Dead letters waiting for the broker's PUBACK. The event loop sends this client's
/// publishes (only dead letters) in the order they were made and numbers each as it goes
/// out: a waiter is queued before its publish, given the packet id when the loop reports
/// the publish sent, and told when the PUBACK of that id arrives.
#[derive(Clone, Default)]
struct Confirming(Arc<Mutex<Waiters>>);

#[derive(Default)]
struct Waiters {
    /// Published, not sent yet, oldest first.
    queued: VecDeque<oneshot::Sender<()>>,
    /// Sent, by packet id, waiting for its PUBACK.
    sent: HashMap<u16, oneshot::Sender<()>>,
}

impl std::fmt::Debug for Confirming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiters = self.lock();
        f.debug_struct("Confirming")
            .field("queued", &waiters.queued.len())
            .field("sent", &waiters.sent.len())
            .finish()
    }
}

impl Confirming {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.lock().queued.push_back(tx);
        rx
    }

    fn sent(&self, pkid: u16) {
        let mut waiters = self.lock();
        // A publish sent again after a reconnection keeps its id and its waiter.
        if !waiters.sent.contains_key(&pkid)
            && let Some(waiter) = waiters.queued.pop_front()
        {
            waiters.sent.insert(pkid, waiter);
        }
    }

    fn acknowledged(&self, pkid: u16) {
        if let Some(waiter) = self.lock().sent.remove(&pkid) {
            // The waiter may have given up (its message is delivered again).
            let _ = waiter.send(());
        }
    }
}

impl Drop for MqttBroker {
    fn drop(&mut self) {
        // The event loop owns the socket: ending its task closes the connection, leaving
        // what was not acknowledged to the broker's session.
        self.connection.abort();
    }
}

impl MqttBroker {
    /// Connect with `options` (its client id names the persistent session; set TLS and
    /// credentials there) and subscribe to `topic` (may hold wildcards) at QoS 1; rejected
    /// messages go to `dead_letter_topic`. `clean_session` is set to `false` and manual acks
    /// are turned on, whatever `options` said: the guarantees need both.
    ///
    /// The connection is made, and made again after a loss (with backoff up to
    /// `max_backoff`), by a task of its own; the trigger's state says how it goes.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    #[must_use]
    pub fn connect(
        mut options: MqttOptions,
        topic: impl Into<String>,
        dead_letter_topic: impl Into<String>,
        max_backoff: Duration,
    ) -> Self {
        options.set_clean_session(false);
        options.set_manual_acks(true);
        let (client, event_loop) = AsyncClient::new(options, 64);
        let (sender, incoming) = mpsc::unbounded_channel();
        let confirming = Confirming::default();
        let connection = tokio::spawn(drive(
            event_loop,
            client.clone(),
            topic.into(),
            sender,
            confirming.clone(),
            max_backoff,
        ));
        Self {
            client,
            incoming,
            subscribed: false,
            pending_error: None,
            dead_letter_topic: dead_letter_topic.into(),
            receive_wait: Duration::from_millis(500),
            confirm_wait: Duration::from_secs(10),
            confirming,
            connection,
        }
    }

    /// How long a dead letter waits for the broker's PUBACK before the rejected message is
    /// left unacknowledged, to be delivered and rejected again (10 s by default).
    #[must_use]
    pub fn with_confirm_wait(mut self, wait: Duration) -> Self {
        self.confirm_wait = wait;
        self
    }

    /// Apply one event from the connection; a publish is added to `into`.
    fn apply(&mut self, event: Incoming, into: &mut Vec<Publish>) {
        match event {
            Incoming::Publish(publish) => into.push(publish),
            Incoming::Subscribed => self.subscribed = true,
            Incoming::Lost(error) => {
                self.subscribed = false;
                self.pending_error = Some(error);
            }
        }
    }
}

/// Poll the event loop for ever: subscribe on every connection, pass publishes and losses
/// on, wait with backoff after a loss (the next poll reconnects).
async fn drive(
    mut event_loop: EventLoop,
    client: AsyncClient,
    topic: String,
    sender: mpsc::UnboundedSender<Incoming>,
    confirming: Confirming,
    max_backoff: Duration,
) {
    let mut backoff = Backoff::new(max_backoff);
    loop {
        let incoming = match event_loop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                backoff.reset();
                // Also when the broker kept the session: subscribing again is harmless,
                // and covers a broker that lost its persistence.
                if let Err(e) = client.try_subscribe(topic.clone(), QoS::AtLeastOnce) {
                    Some(Incoming::Lost(format!("subscribe to `{topic}`: {e}")))
                } else {
                    None
                }
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => Some(Incoming::Subscribed),
            Ok(Event::Incoming(Packet::Publish(publish))) => Some(Incoming::Publish(publish)),
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                confirming.sent(pkid);
                None
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                confirming.acknowledged(ack.pkid);
                None
            }
            Ok(_) => None,
            Err(e) => {
                let lost = sender.send(Incoming::Lost(e.to_string()));
                if lost.is_err() {
                    return;
                }
                tokio::time::sleep(backoff.next()).await;
                None
            }
        };
        if let Some(incoming) = incoming
            && sender.send(incoming).is_err()
        {
            // The broker was dropped.
            return;
        }
    }
}

impl Broker for MqttBroker {
    type Delivery = Publish;

    async fn receive(&mut self, max: usize) -> Result<Vec<Publish>, BrokerError> {
        let mut publishes = Vec::new();
        if self.pending_error.is_none() && max > 0 {
            // Wait a little for the first event, then take what is there.
            if let Ok(Some(event)) =
                tokio::time::timeout(self.receive_wait, self.incoming.recv()).await
            {
                self.apply(event, &mut publishes);
            }
            while publishes.len() < max && self.pending_error.is_none() {
                match self.incoming.try_recv() {
                    Ok(event) => self.apply(event, &mut publishes),
                    Err(_) => break,
                }
            }
        }
        if !publishes.is_empty() {
            // Decided on now; a loss seen meanwhile is reported by the next call.
            return Ok(publishes);
        }
        if let Some(error) = self.pending_error.take() {
            return Err(BrokerError::Lost(error));
        }
        if self.subscribed {
            Ok(publishes)
        } else {
            Err(BrokerError::Connecting(
                "waiting for the MQTT broker to acknowledge the subscription".to_owned(),
            ))
        }
    }

    fn message<'a>(&self, delivery: &'a Publish) -> Message<'a> {
        Message {
            id: None,
            origin: &delivery.topic,
            body: &delivery.payload,
        }
    }

    async fn ack(&mut self, delivery: &Publish) -> Result<(), BrokerError> {
        self.client
            .ack(delivery)
            .await
            .map_err(|e| BrokerError::Lost(format!("ack: {e}")))
    }

    async fn dead_letter(
        &mut self,
        trigger: &str,
        delivery: &Publish,
        rejection: &Rejection,
    ) -> Result<(), BrokerError> {
        let mut envelope = json!({
            "trigger": trigger,
            "topic": delivery.topic,
            "rejection": rejection.to_string(),
        });
        match std::str::from_utf8(&delivery.payload) {
            Ok(text) => envelope["payload"] = json!(text),
            Err(_) => envelope["payload_hex"] = json!(hex::encode(&delivery.payload)),
        }
        // Acknowledged by the broker before the rejected message is: a crash in between
        // delivers the message again, and it is rejected again (a dead letter at least
        // once, never none).
        let confirmed = self.confirming.wait();
        self.client
            .publish(
                self.dead_letter_topic.clone(),
                QoS::AtLeastOnce,
                false,
                envelope.to_string(),
            )
            .await
            .map_err(|e| BrokerError::Lost(format!("dead letter: {e}")))?;
        match tokio::time::timeout(self.confirm_wait, confirmed).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(BrokerError::Lost(format!(
                "the broker did not acknowledge the dead letter on `{}` within {:?}; the \
                 message stays unacknowledged",
                self.dead_letter_topic, self.confirm_wait
            ))),
        }
    }
}
