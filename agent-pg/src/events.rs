//! Waking event followers across processes, and only while someone follows.
//!
//! A follower's store ([`PgStore::event_wakes`](agent_core::store::EventLog::event_wakes))
//! registers in `event_listeners` (a row it refreshes while it listens and deletes when
//! its last follower is gone; one that is not refreshed expires), and `LISTEN`s on the
//! store's events channel, handing each notification (a run id) to its followers in
//! process through a [`WakeHub`].
//!
//! A writing store checks once a second, in a task of its own, whether anyone is
//! registered, and only then sends one `NOTIFY` per write, after it: one channel per
//! store, a payload of one run id. With nobody registered, a write does nothing more than
//! read a flag. A notification lost to a crash between commit and notify delays a
//! follower until its next poll; it loses nothing, since followers read from the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::store::{EventWakes, StoreError, WakeHub};
use sqlx::postgres::{PgListener, PgPool};

use crate::pooler::Db;

use crate::error::db_err;

/// How often a writer looks whether anyone follows.
const REFRESH: Duration = Duration::from_secs(1);
/// How often a follower's registration is renewed, and how long it lives unrenewed.
const HEARTBEAT: Duration = Duration::from_secs(3);
const REGISTRATION_TTL_MS: i64 = 15_000;
/// Payloads are run ids; a longer one is not sent (followers poll for it).
const MAX_PAYLOAD: usize = 1000;

/// A store's side of event wake-ups.
#[derive(Debug)]
pub(crate) struct EventNotices {
    channel: String,
    /// Someone, in any process, follows events of this store.
    listened: Arc<AtomicBool>,
    refresher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    hub: WakeHub,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl EventNotices {
    pub(crate) fn new(schema: &str) -> Self {
        Self {
            channel: format!("agent_events_{schema}"),
            listened: Arc::default(),
            refresher: Mutex::new(None),
            hub: WakeHub::new(),
            listener: Mutex::new(None),
        }
    }

    /// After a write to `run_id` committed: notify, if anyone follows.
    pub(crate) fn written(&self, pool: &Db, run_id: &str) {
        self.ensure_refresher(pool);
        if !self.listened.load(Ordering::Relaxed) || run_id.len() > MAX_PAYLOAD {
            return;
        }
        let (pool, channel, run_id) = (pool.clone(), self.channel.clone(), run_id.to_owned());
        // In a task: the writer does not wait for the notification's round trip.
        tokio::spawn(async move {
            let _ = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&channel)
                .bind(&run_id)
                .execute(&pool)
                .await;
        });
    }

    /// Polling instead of `LISTEN` (`wake=poll`): a write by this process wakes its own
    /// followers at once; one by another process is found by their poll of the store's
    /// head, as on SQLite.
    pub(crate) fn written_here(&self, run_id: &str) {
        self.hub.wake(run_id);
    }

    /// A new follower's wake-ups from this process's writes only ([`Self::written_here`]).
    pub(crate) fn subscribe_here(&self) -> EventWakes {
        self.hub.subscribe()
    }

    fn ensure_refresher(&self, pool: &Db) {
        let mut slot = self
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let (pool, listened) = (pool.clone(), Arc::clone(&self.listened));
        *slot = Some(tokio::spawn(async move {
            loop {
                let found: Result<bool, _> = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM event_listeners \
                     WHERE expires_at > clock_timestamp())",
                )
                .fetch_one(&pool)
                .await;
                // Unknown (the database is away): keep notifying, in case.
                listened.store(found.unwrap_or(true), Ordering::Relaxed);
                tokio::time::sleep(REFRESH).await;
            }
        }));
    }

    /// A new follower's wake-ups: registers (through `pool`) and listens (on a connection
    /// of `listen_on`), unless already.
    pub(crate) async fn subscribe(
        &self,
        pool: &Db,
        listen_on: &PgPool,
    ) -> Result<EventWakes, StoreError> {
        let wakes = self.hub.subscribe();
        let listening = self
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|t| !t.is_finished());
        if listening {
            return Ok(wakes);
        }
        let id = agent_core::store::new_run_id("follower");
        register(pool, &id).await?;
        let mut listener = PgListener::connect_with(listen_on).await.map_err(db_err)?;
        listener.listen(&self.channel).await.map_err(db_err)?;
        let (pool, listen_pool, hub, channel) = (
            pool.clone(),
            listen_on.clone(),
            self.hub.clone(),
            self.channel.clone(),
        );
        let task = tokio::spawn(async move {
            listen(listener, &pool, &listen_pool, &hub, &channel, &id).await;
            let _ = sqlx::query("DELETE FROM event_listeners WHERE id = $1")
                .bind(&id)
                .execute(&pool)
                .await;
        });
        let old = self
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
        Ok(wakes)
    }
}

impl Drop for EventNotices {
    fn drop(&mut self) {
        for slot in [&self.refresher, &self.listener] {
            if let Some(task) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                task.abort();
            }
        }
    }
}

async fn register(pool: &Db, id: &str) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO event_listeners (id, expires_at) \
         VALUES ($1, clock_timestamp() + $2::bigint * interval '1 millisecond') \
         ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
    )
    .bind(id)
    .bind(REGISTRATION_TTL_MS)
    .execute(pool)
    .await
    .map_err(db_err)
    .map(|_| ())
}

/// Hand notifications to the followers in process until none is left; renew the
/// registration meanwhile. After a lost connection every follower is woken (notifications
/// may have been missed) and listening starts again.
async fn listen(
    mut listener: PgListener,
    pool: &Db,
    listen_pool: &PgPool,
    hub: &WakeHub,
    channel: &str,
    id: &str,
) {
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            got = listener.recv() => match got {
                Ok(n) => hub.wake(n.payload()),
                Err(e) => {
                    tracing::warn!(error = %e, "events LISTEN connection lost");
                    hub.wake_all();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Ok(l) = PgListener::connect_with(listen_pool).await {
                        listener = l;
                        let _ = listener.listen(channel).await;
                    }
                }
            },
            _ = heartbeat.tick() => {
                if !hub.is_listened() {
                    return;
                }
                let _ = register(pool, id).await;
            }
        }
    }
}
