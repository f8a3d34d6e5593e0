//! Following runs live: a [`Follower`] reads a run's (or an agent's, or every run's) events
//! from the store after a cursor, and waits for more.
//!
//! Events come from the store only ([`EventLog::events`](crate::store::EventLog::events)), never from a wake-up: a wake-up
//! ([`EventLog::event_wakes`](crate::store::EventLog::event_wakes)) only says when to read again, and the follower also reads every
//! [`FollowConfig::poll`] without one. So a follower that disconnects and comes back with its
//! last cursor misses nothing, a wake-up lost to a crash between a commit and its
//! notification delays the follower by a poll at most, and a follower that falls behind
//! (its wake-ups overflow, [`Follower::missed_wakeups`]) reads the rest from the store.
//! The runner never waits for a follower: wake-ups go through a bounded channel that drops
//! for the slow.
//!
//! What is only in memory, a model's tokens as they come, travels apart: an
//! [`EphemeralBus`] carries [`Ephemeral`] events from the runner (a [`TokenSink`] per ask of
//! the model and per generation) to whoever shows them, in the same process. They have no
//! cursor and are never read back: a client that reconnects gets the committed answer.
//!
//! ```
//! use std::sync::Arc;
//! use durable_agents::events::Follower;
//! use durable_agents::store::{memory::MemoryStore, EventCursor, EventKind, EventScope, NewRun, RunStore};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! store.create_run(NewRun::new("run-1", "Checkout", "f", "Browsing", serde_json::json!({}))).await.unwrap();
//! let mut follower = Follower::new(store, EventScope::Run("run-1".into()), EventCursor::START).await.unwrap();
//! let event = follower.next().await.unwrap();
//! assert!(matches!(event.kind, EventKind::RunCreated { .. }));
//! // Resume later from `follower.cursor()`: the next event, and nothing before it.
//! # });
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::secrets::{Redactor, StreamRedactor};

mod hub;
pub use hub::EventHub;

use crate::store::{
    EventCursor, EventScope, EventWake, EventWakes, Millis, RunEvent, Store, StoreError,
};

/// How a [`Follower`] reads.
#[derive(Clone, Debug)]
pub struct FollowConfig {
    /// Events read from the store at a time.
    pub batch: usize,
    /// How long to wait for a wake-up before reading anyway.
    pub poll: Duration,
    /// For an agent's or every run's events: how far behind its cursor the follower reads
    /// again, for events of other runs that committed after events it already delivered
    /// (on PostgreSQL, runs committing at the same moment may commit in another order than
    /// their positions). Events are delivered once; within a run, always in order.
    pub settle: Duration,
}

impl Default for FollowConfig {
    fn default() -> Self {
        Self {
            batch: 256,
            poll: Duration::from_secs(1),
            settle: Duration::from_secs(2),
        }
    }
}

/// Follows the events of a scope from a cursor: [`next`](Self::next) returns each event
/// once, in order, waiting for it when there is none yet.
pub struct Follower {
    source: Source,
    scope: EventScope,
    config: FollowConfig,
    /// Read, not yet returned.
    pending: VecDeque<RunEvent>,
    /// The cursor of the last event returned.
    cursor: EventCursor,
    /// For scopes of several runs: events returned within the settle window, by cursor,
    /// with when; reads start after the newest older than the window.
    recent: BTreeMap<EventCursor, Instant>,
    floor: EventCursor,
    missed_wakeups: u64,
}

/// Where a follower reads, and what wakes it.
enum Source {
    /// Its own reads of the store, its own wake-ups, its own poll.
    Alone {
        store: Arc<dyn Store>,
        wakes: Option<EventWakes>,
    },
    /// A hub's: woken by it, reading through it.
    Hub {
        hub: Arc<hub::HubShared>,
        rx: broadcast::Receiver<hub::HubWake>,
        /// Reads must begin at this generation or later (the last wake-up taken).
        needed: u64,
    },
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("scope", &self.scope)
            .field("cursor", &self.cursor)
            .field("pending", &self.pending.len())
            .field("missed_wakeups", &self.missed_wakeups)
            .finish_non_exhaustive()
    }
}

impl Follower {
    /// Follow `scope` from after `after` ([`EventCursor::START`] for everything), with the
    /// default [`FollowConfig`].
    ///
    /// # Errors
    /// The store's, when it cannot set up wake-ups.
    pub async fn new(
        store: Arc<dyn Store>,
        scope: EventScope,
        after: EventCursor,
    ) -> Result<Self, StoreError> {
        Self::with_config(store, scope, after, FollowConfig::default()).await
    }

    /// As [`new`](Self::new), configured.
    ///
    /// # Errors
    /// The store's, when it cannot set up wake-ups.
    pub async fn with_config(
        store: Arc<dyn Store>,
        scope: EventScope,
        after: EventCursor,
        config: FollowConfig,
    ) -> Result<Self, StoreError> {
        // Listen before the first read, so that nothing committed in between goes unwoken.
        let wakes = store.event_wakes().await?;
        Ok(Self::with_source(
            Source::Alone { store, wakes },
            scope,
            after,
            config,
        ))
    }

    fn of_hub(
        hub: Arc<hub::HubShared>,
        rx: broadcast::Receiver<hub::HubWake>,
        needed: u64,
        scope: EventScope,
        after: EventCursor,
        config: FollowConfig,
    ) -> Self {
        Self::with_source(Source::Hub { hub, rx, needed }, scope, after, config)
    }

    fn with_source(
        source: Source,
        scope: EventScope,
        after: EventCursor,
        config: FollowConfig,
    ) -> Self {
        Self {
            source,
            scope,
            config,
            pending: VecDeque::new(),
            cursor: after,
            recent: BTreeMap::new(),
            floor: after,
            missed_wakeups: 0,
        }
    }

    /// The cursor of the last event returned: give it to a new follower to go on from here.
    #[must_use]
    pub fn cursor(&self) -> EventCursor {
        self.cursor
    }

    /// How many wake-ups this follower missed because it fell behind (it read the events
    /// from the store all the same).
    #[must_use]
    pub fn missed_wakeups(&self) -> u64 {
        self.missed_wakeups
    }

    /// The next event, waiting until there is one.
    ///
    /// # Errors
    /// The store's, when a read fails (the follower can be asked again; it goes on from
    /// where it was).
    pub async fn next(&mut self) -> Result<RunEvent, StoreError> {
        loop {
            if let Some(event) = self.try_next().await? {
                return Ok(event);
            }
            self.wait().await;
        }
    }

    /// The next event if there is one now, without waiting.
    ///
    /// # Errors
    /// The store's, when a read fails.
    pub async fn try_next(&mut self) -> Result<Option<RunEvent>, StoreError> {
        if self.pending.is_empty() {
            self.read().await?;
        }
        let Some(event) = self.pending.pop_front() else {
            return Ok(None);
        };
        if !matches!(self.scope, EventScope::Run(_)) {
            self.recent.insert(event.cursor, Instant::now());
        }
        self.cursor = self.cursor.max(event.cursor);
        Ok(Some(event))
    }

    /// The events as a stream (ends only with the stream; errors are items).
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<RunEvent, StoreError>> {
        futures::stream::unfold(self, |mut follower| async move {
            let item = follower.next().await;
            Some((item, follower))
        })
    }

    async fn read(&mut self) -> Result<(), StoreError> {
        let mut after = match self.scope {
            EventScope::Run(_) => self.cursor,
            EventScope::Agent(_) | EventScope::All => self.settle(),
        };
        // Pages that hold only events already returned (within the settle window) are
        // skipped, not taken for the end.
        loop {
            let batch = self.config.batch;
            let events: Vec<RunEvent> = match &self.source {
                Source::Alone { store, .. } => store.events(&self.scope, after, batch).await?,
                Source::Hub { hub, needed, .. } => hub
                    .events(&self.scope, after, batch, *needed)
                    .await?
                    .to_vec(),
            };
            let full = events.len() >= batch;
            let Some(last) = events.last().map(|e| e.cursor) else {
                return Ok(());
            };
            let recent = &self.recent;
            self.pending.extend(
                events
                    .into_iter()
                    .filter(|e| !recent.contains_key(&e.cursor)),
            );
            if !self.pending.is_empty() || !full {
                return Ok(());
            }
            after = last;
        }
    }

    /// Forget the events returned longer ago than the settle window; read after the
    /// newest of them.
    fn settle(&mut self) -> EventCursor {
        let Some(horizon) = Instant::now().checked_sub(self.config.settle) else {
            return self.floor;
        };
        let old: Vec<EventCursor> = self
            .recent
            .iter()
            .filter(|(_, at)| **at <= horizon)
            .map(|(c, _)| *c)
            .collect();
        for cursor in old {
            self.recent.remove(&cursor);
            self.floor = self.floor.max(cursor);
        }
        // Nothing newer than the floor is forgotten, so it is never read twice.
        self.floor
    }

    /// Until a wake-up that may concern this scope, or (alone) the poll interval.
    async fn wait(&mut self) {
        let poll = self.config.poll;
        let scope = &self.scope;
        let concerns = |run: &str| !matches!(scope, EventScope::Run(id) if id != run);
        match &mut self.source {
            Source::Alone { wakes: None, .. } => tokio::time::sleep(poll).await,
            Source::Alone {
                wakes: wakes @ Some(_),
                ..
            } => {
                let deadline = tokio::time::Instant::now() + poll;
                while let Some(w) = wakes.as_mut() {
                    match tokio::time::timeout_at(deadline, w.next()).await {
                        Ok(EventWake::Run(run)) if !concerns(&run) => {}
                        Err(_) | Ok(EventWake::Run(_)) => return,
                        Ok(EventWake::Lagged) => {
                            self.missed_wakeups += 1;
                            return;
                        }
                        Ok(EventWake::Closed) => {
                            *wakes = None;
                            tokio::time::sleep_until(deadline).await;
                            return;
                        }
                    }
                }
            }
            // No poll of its own: the hub's watcher checks the store for every follower.
            Source::Hub { hub, rx, needed } => loop {
                match rx.recv().await {
                    Ok(wake) => {
                        if wake.run.as_deref().is_none_or(concerns) {
                            *needed = wake.generation;
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.missed_wakeups += 1;
                        *needed = hub.generation();
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(hub::closed_wait(&self.config)).await;
                        *needed = hub.generation();
                        return;
                    }
                }
            },
        }
    }
}

/// What is only in memory, never stored: a model's tokens as they come, published while a
/// decision is asked or a text is generated. A client shows them and drops them; the
/// durable answer is the journaled decision or tool result, read as an ordinary
/// [`RunEvent`] once committed. A subscriber that falls behind loses deltas, never the
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
