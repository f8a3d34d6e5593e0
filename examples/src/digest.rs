//! The digest agent: started by the clock, it gathers the day's items on a topic, waits a
//! moment on a durable timer for late ones, and sends the digest once.
//!
//! A schedule starts it (`cargo run --example digest`): each tick starts exactly one run,
//! named after the schedule and the tick, and labelled with both. Offline: the items are
//! counted from the tick's time, a stand-in for a real feed, named so.

use std::sync::Arc;

use durable_agents::runner::Runner;
use durable_agents::store::{HistoryStore, Store};
use durable_agents::triggers::nats::{NatsBroker, NatsConfig};
use durable_agents::triggers::{Consumer, InitialState, Trigger};
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

/// A digest of one topic.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Digest {
    /// Gather what there is on the topic.
    #[agent(initial, to(Settling))]
    Start {
        /// The topic.
        topic: String,
    },
    /// Wait for late items: the run is stored waiting for its timer and holds no worker.
    #[agent(timer_ms = 300, to(Sent))]
    Settling {
        /// The topic.
        topic: String,
        /// Items gathered.
        items: u32,
    },
    /// Sent, once.
    #[agent(terminal)]
    Sent {
        /// The topic.
        topic: String,
        /// Items in the digest.
        items: u32,
    },
}

/// The digest's handlers: a stand-in feed and an outbox that counts what it sent.
#[derive(Debug, Default, Clone)]
pub struct Handlers {
    /// Digests sent, by topic, in order (a stand-in for the mail service).
    pub outbox: std::sync::Arc<std::sync::Mutex<Vec<(String, u32)>>>,
}

impl DigestHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, digest::Start>,
        digest::Start { topic }: digest::Start,
    ) -> StepResult<digest::Start> {
        // The stand-in feed: as many items as letters in the topic.
        let items = u32::try_from(topic.len()).unwrap_or(u32::MAX);
        Ok(ctx.to(digest::Settling { topic, items }))
    }

    async fn settling(
        &self,
        ctx: Ctx<'_, digest::Settling>,
        digest::Settling { topic, items }: digest::Settling,
    ) -> StepResult<digest::Settling> {
        self.outbox
            .lock()
            .expect("the outbox")
            .push((topic.clone(), items));
        Ok(ctx.to(digest::Sent { topic, items }))
    }
}

/// The trigger consuming digest requests.
pub const TRIGGER: &str = "digest-requests";

/// Consume `digests.requested` on the NATS server at `url` (creating the stream if it is
/// missing), each message starting one digest run; then publish one request, twice with
/// one message id, which starts one run. The consumer runs in a task of its own.
///
/// # Errors
/// The server cannot be reached, the stream not created, or the request not published.
pub async fn start_from_nats(
    url: &str,
    runner: &Runner<Digest, Handlers>,
    store: &Arc<dyn Store>,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = async_nats::connect(url).await?;
    let jetstream = async_nats::jetstream::new(client.clone());
    jetstream
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "DIGESTS".to_owned(),
            subjects: vec!["digests.requested".to_owned(), "digests.dead".to_owned()],
            ..Default::default()
        })
        .await?;
    let trigger = Trigger::new(
        TRIGGER,
        Arc::new(runner.clone()),
        Arc::clone(store) as Arc<dyn HistoryStore>,
    )?
    // A request is the fields of `Start`: `{"topic": "..."}`.
    .with_initial_state(InitialState::Wrap("Start".to_owned()))?;
    let mut config = NatsConfig::new("DIGESTS", TRIGGER, "digests.dead");
    config.filter_subject = Some("digests.requested".to_owned());
    let consumer = Consumer::new(trigger);
    let broker = NatsBroker::new(client, config);
    tokio::spawn(async move { consumer.consume(broker).await });
    // A publisher that retries: the same message id twice, one run.
    for _ in 0..2 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "request-of-the-day");
        jetstream
            .publish_with_headers(
                "digests.requested",
                headers,
                br#"{"topic": "requested by message"}"#.as_slice().into(),
            )
            .await?
            .await?;
    }
    crate::outln!("a trigger consumes `digests.requested`; one request published twice");
    Ok(())
}
