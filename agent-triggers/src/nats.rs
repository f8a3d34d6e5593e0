//! A trigger on NATS JetStream: a durable pull consumer with explicit acks.
//!
//! **The message id** is the `Nats-Msg-Id` header when the publisher set one, else the
//! stream's name and the message's stream sequence (`ORDERS:42`). The stream sequence
//! names a stored message for good: every redelivery of it carries the same one. The
//! publisher's `Nats-Msg-Id` is preferred when present because it also names a message the
//! publisher sent twice (a retry after a lost publish acknowledgement), which the stream
//! stores twice, under two sequences, once its duplicate window has passed.
//!
//! **Acknowledgement** goes after [`Trigger::decide`](crate::Trigger::decide) returned, so
//! after the run's creation committed, and waits for the server's confirmation (a double
//! ack). A consumer that dies in between leaves the message unacknowledged; the server
//! delivers it again after the consumer's `ack_wait`, and the run found then is the same.
//!
//! **Dead letters** are published through JetStream to the configured subject (which a
//! stream must capture, so a rejection is stored, not fire-and-forget), with the body
//! unchanged and headers saying why: `Trigger`, `Trigger-Rejection`, `Trigger-Subject`,
//! `Trigger-Message-Id`, and a `Nats-Msg-Id` derived from the message so that a rejection
//! published twice is stored once. The original is acknowledged only once the dead-letter
//! stream confirmed it.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull};
use async_nats::{Client, HeaderMap, connection::State};
use futures::StreamExt;

use crate::consume::{Broker, BrokerError};
use crate::trigger::{Message, Rejection};

/// Where a NATS trigger reads and where it puts what it rejects.
#[derive(Clone, Debug)]
pub struct NatsConfig {
    /// The JetStream stream holding the messages (created by the operator).
    pub stream: String,
    /// The durable consumer's name: its position survives restarts of the trigger.
    pub durable: String,
    /// Only messages of this subject (may hold wildcards); all of the stream's when `None`.
    pub filter_subject: Option<String>,
    /// Where rejected messages go; a stream must capture this subject.
    pub dead_letter_subject: String,
    /// How long the server waits for an ack before delivering a message again (30 s by
    /// default): longer than deciding on a batch takes.
    pub ack_wait: Duration,
    /// How long one pull waits for messages before returning none (1 s by default).
    pub fetch_wait: Duration,
}

impl NatsConfig {
    /// Consume `stream` through the durable consumer `durable`, rejecting to
    /// `dead_letter_subject`.
    #[must_use]
    pub fn new(
        stream: impl Into<String>,
        durable: impl Into<String>,
        dead_letter_subject: impl Into<String>,
    ) -> Self {
        Self {
            stream: stream.into(),
            durable: durable.into(),
            filter_subject: None,
            dead_letter_subject: dead_letter_subject.into(),
            ack_wait: Duration::from_secs(30),
            fetch_wait: Duration::from_secs(1),
        }
    }
}

/// A JetStream message and its id.
#[derive(Debug)]
pub struct NatsDelivery {
    message: jetstream::Message,
    id: String,
}

/// The [`Broker`] over a NATS JetStream durable pull consumer.
///
/// Give it a [`Client`] connected as the deployment needs (credentials, TLS); connect with
/// [`ConnectOptions::retry_on_initial_connect`](async_nats::ConnectOptions::retry_on_initial_connect)
/// so that a server down at start-up is waited for. The client reconnects by itself; this
/// reports the connection's state and creates the consumer again after a loss.
#[derive(Debug)]
pub struct NatsBroker {
    client: Client,
    jetstream: jetstream::Context,
    config: NatsConfig,
    consumer: Option<PullConsumer>,
}

impl NatsBroker {
    /// A broker reading as `config` says through `client`.
    #[must_use]
    pub fn new(client: Client, config: NatsConfig) -> Self {
        Self {
            jetstream: jetstream::new(client.clone()),
            client,
            config,
            consumer: None,
        }
    }

    async fn consumer(&mut self) -> Result<&PullConsumer, BrokerError> {
        if self.consumer.is_none() {
            let lost = |e: &dyn std::fmt::Display| {
                BrokerError::Lost(format!(
                    "stream `{}`, consumer `{}`: {e}",
                    self.config.stream, self.config.durable
                ))
            };
            let stream = self
                .jetstream
                .get_stream(&self.config.stream)
                .await
                .map_err(|e| lost(&e))?;
            let config = pull::Config {
                durable_name: Some(self.config.durable.clone()),
                filter_subject: self.config.filter_subject.clone().unwrap_or_default(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: self.config.ack_wait,
                ..pull::Config::default()
            };
            let consumer = stream
                .get_or_create_consumer(&self.config.durable, config)
                .await
                .map_err(|e| lost(&e))?;
            self.consumer = Some(consumer);
        }
        Ok(self.consumer.as_ref().expect("set above"))
    }

    fn connected(&self) -> Result<(), BrokerError> {
        match self.client.connection_state() {
            State::Connected => Ok(()),
            State::Pending => Err(BrokerError::Connecting(
                "waiting for the NATS server".to_owned(),
            )),
            State::Disconnected => Err(BrokerError::Lost(
                "disconnected from the NATS server".to_owned(),
            )),
        }
    }

    async fn fetch(&mut self, max: usize) -> Result<Vec<NatsDelivery>, BrokerError> {
        let wait = self.config.fetch_wait;
        let consumer = self.consumer().await?;
        let mut batch = consumer
            .fetch()
            .max_messages(max)
            .expires(wait)
            .messages()
            .await
            .map_err(|e| BrokerError::Lost(format!("pull: {e}")))?;
        let mut deliveries = Vec::new();
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| BrokerError::Lost(format!("pull: {e}")))?;
            let id = message_id(&message)?;
            deliveries.push(NatsDelivery { message, id });
        }
        Ok(deliveries)
    }
}

/// The message's id: its `Nats-Msg-Id`, else `STREAM:SEQUENCE` (see the module's docs).
fn message_id(message: &jetstream::Message) -> Result<String, BrokerError> {
    if let Some(id) = message
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
        .map(|v| v.as_str().to_owned())
        .filter(|id| !id.is_empty())
    {
        return Ok(id);
    }
    let info = message
        .info()
        .map_err(|e| BrokerError::Lost(format!("a message without JetStream metadata: {e}")))?;
    Ok(format!("{}:{}", info.stream, info.stream_sequence))
}

/// A header value: one line, as NATS headers must be.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

impl Broker for NatsBroker {
    type Delivery = NatsDelivery;

    async fn receive(&mut self, max: usize) -> Result<Vec<NatsDelivery>, BrokerError> {
        self.connected()?;
        // A pull sent while the connection drops waits for the reconnection; bound it so
        // that the state shows the loss.
        let bound = self.config.fetch_wait + Duration::from_secs(5);
        match tokio::time::timeout(bound, self.fetch(max)).await {
            Ok(Ok(deliveries)) => Ok(deliveries),
            Ok(Err(e)) => {
                // Looked up again next time: the server may have lost it (a restart
                // without its store) or the stream may have moved.
                self.consumer = None;
                Err(e)
            }
            Err(_) => {
                self.consumer = None;
                self.connected()?;
                Err(BrokerError::Lost(format!(
                    "a pull got no answer within {bound:?}"
                )))
            }
        }
    }

    fn message<'a>(&self, delivery: &'a NatsDelivery) -> Message<'a> {
        Message {
            id: Some(&delivery.id),
            origin: delivery.message.subject.as_str(),
            body: &delivery.message.payload,
        }
    }

    async fn ack(&mut self, delivery: &NatsDelivery) -> Result<(), BrokerError> {
        delivery
            .message
            .double_ack()
            .await
            .map_err(|e| BrokerError::Lost(format!("ack of `{}`: {e}", delivery.id)))
    }

    async fn dead_letter(
        &mut self,
        trigger: &str,
        delivery: &NatsDelivery,
        rejection: &Rejection,
    ) -> Result<(), BrokerError> {
        let mut headers = HeaderMap::new();
        headers.insert("Trigger", trigger);
        headers.insert(
            "Trigger-Rejection",
            one_line(&rejection.to_string()).as_str(),
        );
        headers.insert("Trigger-Subject", delivery.message.subject.as_str());
        headers.insert("Trigger-Message-Id", one_line(&delivery.id).as_str());
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{trigger}:{}", one_line(&delivery.id)).as_str(),
        );
        let failed = |e: &dyn std::fmt::Display| {
            BrokerError::Lost(format!(
                "dead letter to `{}`: {e}",
                self.config.dead_letter_subject
            ))
        };
        self.jetstream
            .publish_with_headers(
                self.config.dead_letter_subject.clone(),
                headers,
                delivery.message.payload.clone(),
            )
            .await
            .map_err(|e| failed(&e))?
            .await
            .map_err(|e| failed(&e))?;
        Ok(())
    }
}
