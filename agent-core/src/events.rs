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
//! use durable_agents::backend::{NewRun, RunStore};
//! use durable_agents::store::{memory::MemoryStore, EventCursor, EventKind, EventScope};
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
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast;

mod config;
mod ephemeral;
mod hub;
pub use config::FollowConfig;
pub use ephemeral::{Ephemeral, EphemeralBus, EphemeralKind, TokenSink};
pub use hub::EventHub;

use crate::store::{EventCursor, EventScope, EventWake, EventWakes, RunEvent, Store, StoreError};

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

impl EventHub {
    /// A follower of `scope` from after `after`, woken by this hub and sharing its reads.
    /// Must be called within a Tokio runtime (the first call starts the hub's watcher).
    #[must_use]
    pub fn follower(&self, scope: EventScope, after: EventCursor) -> Follower {
        let (hub, rx, needed, config) = self.subscribe();
        Follower::of_hub(hub, rx, needed, scope, after, config)
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
