//! Many followers in one process, one watcher: an [`EventHub`] listens to the store's
//! wake-ups and checks its head for all of them, and followers of one scope at one cursor
//! share each read.
//!
//! A follower on its own ([`Follower::new`]) listens and polls by itself: 500 idle
//! followers are 500 reads a second. A server holding many event streams gives each a
//! follower of its hub ([`EventHub::follower`]) instead: an idle follower then costs a
//! parked task, whatever their number; the hub reads the store's head once a poll, and
//! wakes its followers only when it moved or a wake-up came.
//!
//! The guarantees are a lone follower's: a follower reads the store itself after every
//! wake-up, and only ever through a read that *began after* that wake-up was sent (a read
//! shared with another follower is one begun at the same or a later wake-up), so nothing
//! committed before a wake-up is missed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{OnceCell, broadcast};

use super::config::FollowConfig;
use crate::store::{EventCursor, EventScope, EventWake, EventWakes, RunEvent, Store, StoreError};

/// What a hub tells its followers: which run has new events (`None`: any may), as of which
/// generation.
#[derive(Clone, Debug)]
pub(super) struct HubWake {
    pub(super) generation: u64,
    pub(super) run: Option<Arc<str>>,
}

/// Wake-ups a follower may fall behind by before it loses some (it then reads anyway).
const WAKE_CAPACITY: usize = 1024;
/// Shared reads kept between two wake-ups before they are forgotten (followers catching up
/// from many different cursors).
const MAX_SHARED_READS: usize = 256;

type Page = Arc<[RunEvent]>;
type ReadKey = (EventScope, EventCursor, usize);
/// A read, with the generation it began at; its page once read.
type SharedRead = (u64, Arc<OnceCell<Page>>);

/// One watcher of the store for the followers of a process (see the module's docs).
/// Cheap to clone; the watching task ends when the last clone and follower are gone.
#[derive(Clone)]
pub struct EventHub {
    shared: Arc<HubShared>,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field(
                "generation",
                &self.shared.generation.load(Ordering::Acquire),
            )
            .field("followers", &self.shared.tx.receiver_count())
            .finish_non_exhaustive()
    }
}

pub(super) struct HubShared {
    store: Arc<dyn Store>,
    config: FollowConfig,
    tx: broadcast::Sender<HubWake>,
    /// Bumped before each wake-up is sent.
    generation: AtomicU64,
    /// The newest read of each scope and cursor, with the generation it began at.
    reads: Mutex<HashMap<ReadKey, SharedRead>>,
    /// Store reads made (shared ones once): what the hub saves is measured by it.
    store_reads: AtomicU64,
    started: std::sync::Once,
}

impl EventHub {
    /// A hub over `store`, its followers configured by `config` (its `poll` is how often
    /// the hub checks the store's head).
    #[must_use]
    pub fn new(store: Arc<dyn Store>, config: FollowConfig) -> Self {
        Self {
            shared: Arc::new(HubShared {
                store,
                config,
                tx: broadcast::channel(WAKE_CAPACITY).0,
                generation: AtomicU64::new(0),
                reads: Mutex::default(),
                store_reads: AtomicU64::new(0),
                started: std::sync::Once::new(),
            }),
        }
    }

    /// What a new follower of this hub needs: the hub's shared part, a subscription to
    /// its wake-ups, the generation the follower must see, and its configuration. Starts
    /// the hub's watcher on the first call (within a Tokio runtime).
    pub(super) fn subscribe(
        &self,
    ) -> (
        Arc<HubShared>,
        broadcast::Receiver<HubWake>,
        u64,
        FollowConfig,
    ) {
        self.shared.started.call_once(|| {
            tokio::spawn(watch(Arc::downgrade(&self.shared)));
        });
        // Subscribed before the generation is read: a wake-up sent in between is received.
        let rx = self.shared.tx.subscribe();
        let needed = self.shared.generation.load(Ordering::Acquire);
        (
            Arc::clone(&self.shared),
            rx,
            needed,
            self.shared.config.clone(),
        )
    }

    /// How many reads of events the hub's followers made of the store so far (a read
    /// shared by several followers counts once).
    #[must_use]
    pub fn store_reads(&self) -> u64 {
        self.shared.store_reads.load(Ordering::Relaxed)
    }
}

impl HubShared {
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Events of `scope` after `after`, from a read begun at generation `needed` or later:
    /// one already made by another follower, or a new one others may share.
    pub(super) async fn events(
        &self,
        scope: &EventScope,
        after: EventCursor,
        limit: usize,
        needed: u64,
    ) -> Result<Page, StoreError> {
        let cell = {
            let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (scope.clone(), after, limit);
            match reads.get(&key) {
                Some((at, cell)) if *at >= needed => Arc::clone(cell),
                _ => {
                    if reads.len() >= MAX_SHARED_READS {
                        reads.clear();
                    }
                    // The generation now is at least `needed`: followers woken since can
                    // share the read too.
                    let cell = Arc::new(OnceCell::new());
                    reads.insert(key, (self.generation().max(needed), Arc::clone(&cell)));
                    cell
                }
            }
        };
        // A failed read is not kept: the next follower to ask reads again.
        let page = cell
            .get_or_try_init(|| async {
                self.store_reads.fetch_add(1, Ordering::Relaxed);
                self.store.events(scope, after, limit).await.map(Page::from)
            })
            .await?;
        Ok(Arc::clone(page))
    }

    fn wake(&self, run: Option<Arc<str>>) {
        // The reads made so far began before this wake-up: none may serve a follower woken
        // by it.
        let generation = {
            let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
            reads.clear();
            self.generation.fetch_add(1, Ordering::AcqRel) + 1
        };
        // No receiver: nobody to wake.
        let _ = self.tx.send(HubWake { generation, run });
    }
}

/// The hub's watcher: forwards the store's wake-ups, and checks the store's head once a
/// poll while anyone follows (a write by another process that the store's wake-ups do
/// not reach, as with SQLite, moves the head). A store without wake-ups, or whose
/// wake-ups stopped, wakes every follower once a poll, as a lone follower polls.
async fn watch(shared: Weak<HubShared>) {
    let (store, poll) = match shared.upgrade() {
        Some(s) => (Arc::clone(&s.store), s.config.poll),
        None => return,
    };
    let mut wakes: Option<EventWakes> = store.event_wakes().await.ok().flatten();
    let mut head = store.event_head().await.ok();
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let woke = tokio::select! {
            wake = next_wake(&mut wakes) => match wake {
                EventWake::Run(run) => Some(Some(run)),
                EventWake::Lagged => Some(None),
                EventWake::Closed => {
                    wakes = None;
                    Some(None)
                }
            },
            _ = tick.tick() => {
                let Some(s) = shared.upgrade() else { return };
                if s.tx.receiver_count() == 0 {
                    None
                } else if wakes.is_none() {
                    Some(None)
                } else {
                    match store.event_head().await {
                        Ok(now) if Some(now) != head => {
                            head = Some(now);
                            Some(None)
                        }
                        Ok(_) => None,
                        // The store is away: the followers find out when they read.
                        Err(_) => Some(None),
                    }
                }
            }
        };
        let Some(s) = shared.upgrade() else { return };
        if let Some(run) = woke {
            s.wake(run);
        }
    }
}

async fn next_wake(wakes: &mut Option<EventWakes>) -> EventWake {
    match wakes {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// How long a follower of a hub whose watcher stopped waits before reading anyway.
pub(super) fn closed_wait(config: &FollowConfig) -> Duration {
    config.poll
}
