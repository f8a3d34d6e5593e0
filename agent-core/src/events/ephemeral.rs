//! What is only in memory, never stored: the model's tokens as they come, from the runner to
//! whoever shows them. Below the durable events (nothing here reads the store), so the tools
//! and the router that stream tokens need nothing above them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::secrets::{Redactor, StreamRedactor};
use crate::store::Millis;

/// What is only in memory, never stored: a model's tokens as they come, published while a
/// decision is asked or a text is generated. A client shows them and drops them; the
/// durable answer is the journaled decision or tool result, read as an ordinary
/// [`RunEvent`](crate::store::RunEvent) once committed. A subscriber that falls behind loses deltas, never the
/// runner's time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ephemeral {
    /// The run.
    pub run_id: String,
    /// The version its step started from.
    pub version: u64,
    /// The call's index in the step (the decision's or the generating tool's).
    pub call: u32,
    /// The delta's place among the call's deltas, from 0; a gap says deltas were dropped.
    pub seq: u64,
    /// When it was published.
    pub at: Millis,
    /// What came.
    #[serde(flatten)]
    pub kind: EphemeralKind,
}

/// What an [`Ephemeral`] event carries. Tagged by `type` in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EphemeralKind {
    /// Text the model wrote (for a decision: its reasoning or the tool call's arguments
    /// as they come).
    TokenDelta {
        /// The text of this delta.
        text: String,
    },
}

/// Where ephemeral events go: one per process, shared by the runner (which hands a
/// [`TokenSink`] to each ask of the model and each generation) and whoever shows them (the
/// HTTP server's event streams). Publishing checks a counter and returns when nobody
/// listens; the channel is bounded and drops for subscribers that fall behind.
#[derive(Clone, Debug)]
pub struct EphemeralBus {
    tx: broadcast::Sender<Arc<Ephemeral>>,
}

impl Default for EphemeralBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EphemeralBus {
    /// How many events a subscriber may be behind before it loses the oldest.
    pub const CAPACITY: usize = 4096;

    /// A bus nobody listens to yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            tx: broadcast::channel(Self::CAPACITY).0,
        }
    }

    /// A new subscriber, for every run's ephemeral events (filter by
    /// [`Ephemeral::run_id`]).
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Ephemeral>> {
        self.tx.subscribe()
    }

    /// A sink for the deltas of one call, publishing them as they are.
    #[must_use]
    pub fn sink(&self, run_id: &str, version: u64, call: u32) -> TokenSink {
        self.redacted_sink(run_id, version, call, &Redactor::default())
    }

    /// A sink for the deltas of one call, passing them through `redactor` before anything
    /// is published (the runner's sinks): a secret split across deltas is hidden too.
    #[must_use]
    pub fn redacted_sink(
        &self,
        run_id: &str,
        version: u64,
        call: u32,
        redactor: &Redactor,
    ) -> TokenSink {
        TokenSink(Some(Arc::new(SinkTarget {
            bus: self.clone(),
            run_id: run_id.into(),
            version,
            call,
            seq: Arc::new(AtomicU64::new(0)),
            redactor: redactor.clone(),
            stream: Mutex::new(redactor.stream()),
        })))
    }

    fn publish(&self, event: Ephemeral) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Arc::new(event));
        }
    }
}

/// Where a router or a generating tool sends the model's tokens as they come
/// ([`RouteRequest::tokens`](crate::router::RouteRequest::tokens),
/// [`ToolContext::tokens`](crate::tool::ToolContext::tokens)). The default sends nowhere.
/// Sending never blocks and never fails.
#[derive(Clone, Default)]
pub struct TokenSink(Option<Arc<SinkTarget>>);

struct SinkTarget {
    bus: EphemeralBus,
    run_id: Arc<str>,
    version: u64,
    call: u32,
    seq: Arc<AtomicU64>,
    redactor: Redactor,
    /// Held-back text: what could still turn out to begin a secret.
    stream: Mutex<StreamRedactor>,
}

impl SinkTarget {
    fn publish(&self, text: String) {
        if text.is_empty() {
            return;
        }
        self.bus.publish(Ephemeral {
            run_id: self.run_id.to_string(),
            version: self.version,
            call: self.call,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            at: crate::store::now_ms(),
            kind: EphemeralKind::TokenDelta { text },
        });
    }
}

impl TokenSink {
    /// Whether deltas sent here reach anyone now: a provider may skip asking for a stream
    /// when not.
    #[must_use]
    pub fn is_listened(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|t| t.bus.tx.receiver_count() > 0)
    }

    /// The same sink, hiding `secret` too (a provider's own API key, which the runner does
    /// not know), in every encoding the redactor knows, across deltas.
    #[must_use]
    pub fn hiding(&self, secret: &str) -> Self {
        let Some(t) = &self.0 else {
            return Self(None);
        };
        let redactor = t.redactor.with_secret(secret);
        Self(Some(Arc::new(SinkTarget {
            bus: t.bus.clone(),
            run_id: Arc::clone(&t.run_id),
            version: t.version,
            call: t.call,
            seq: Arc::clone(&t.seq),
            stream: Mutex::new(redactor.stream()),
            redactor,
        })))
    }

    /// Publish what the sink still holds back (the tail that could have begun a secret):
    /// call once the answer is complete.
    pub fn finish(&self) {
        let Some(t) = &self.0 else { return };
        let rest = t
            .stream
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .finish();
        if t.bus.tx.receiver_count() > 0 {
            t.publish(rest);
        }
    }

    /// Publish a delta of the model's text, redacted: with secrets configured, the end of
    /// the text that could still begin one waits for what follows it (or for
    /// [`finish`](Self::finish)); see [`StreamRedactor`].
    pub fn token(&self, text: &str) {
        let Some(t) = &self.0 else { return };
        if text.is_empty() || t.bus.tx.receiver_count() == 0 {
            return;
        }
        let out = t
            .stream
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(text);
        t.publish(out);
    }
}

impl fmt::Debug for TokenSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("TokenSink(none)"),
            Some(t) => write!(f, "TokenSink({}/v{}/{})", t.run_id, t.version, t.call),
        }
    }
}

/// Sinks are not part of what they are attached to: two requests that differ only by
/// their sinks are the same request.
impl PartialEq for TokenSink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TokenSink {}
