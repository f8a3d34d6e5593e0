//! Waking idle workers after a write that makes a run claimable, without serializing the
//! writers.
//!
//! A transaction that runs `NOTIFY` takes, at its commit, a lock that every notifying
//! transaction of the database shares, and keeps it until its commit record is flushed:
//! notifying writes commit one after the other, each with its own WAL flush. Two hundred
//! signals sent at once took about half a second that way on this project's test machine
//! (W3 in `BENCHMARKS.md`), while the same inserts without the notification share their
//! flushes. So a signal is written without a notification, and the wake-up follows its
//! commit as a statement of its own, coalesced: while one is being sent, the writes that
//! ask for another are answered by one more after it, however many they are. Workers
//! ignore the payload (they claim whatever is due), so nothing is lost by coalescing; a
//! wake-up lost to a crash between the commit and the notification delays the run until
//! the next poll, as any lost notification does.
//!
//! The notification goes out on a connection held outside the pool, one the commits left
//! idle when there is one: many signals sent at once fill the pool with their inserts, and
//! a wake-up queued behind them reached the workers only once most of the inserts were
//! done; a connection opened for it then, among the pool's, took as long (W3 in
//! `BENCHMARKS.md`).

use std::sync::{Arc, Mutex, PoisonError};

use crate::group_commit::HeldConnections;
use crate::pooler::Db;

/// The coalescing sender of one store's work notifications.
pub(crate) struct WorkWaker {
    state: Arc<Mutex<Sending>>,
    connection: Arc<HeldConnections>,
}

impl std::fmt::Debug for WorkWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkWaker")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Sending {
    /// A task is sending (or about to send) a notification.
    busy: bool,
    /// A write asked for a wake-up after the one being sent started.
    again: bool,
}

impl WorkWaker {
    /// A waker sending on `connections` (the store's, shared with its commits).
    pub(crate) fn new(connections: Arc<HeldConnections>) -> Self {
        Self {
            state: Arc::default(),
            connection: connections,
        }
    }

    /// Wake the idle workers of `channel` after a committed write: at once when no
    /// notification is being sent, else once more after it.
    pub(crate) fn wake(&self, pool: &Db, channel: &str) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.busy {
                state.again = true;
                return;
            }
            state.busy = true;
        }
        let (state, connection, pool, channel) = (
            Arc::clone(&self.state),
            Arc::clone(&self.connection),
            pool.clone(),
            channel.to_owned(),
        );
        tokio::spawn(async move {
            loop {
                // Best effort, like every wake-up: workers poll too.
                let notify = sqlx::query("SELECT pg_notify($1, '')").bind(&channel);
                if let Ok((mut conn, opened)) = connection.take(pool.raw()).await {
                    let sent = notify.execute(pool.on(&mut conn)).await;
                    connection.give_back(conn, opened, &sent);
                }
                let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                if !std::mem::take(&mut state.again) {
                    state.busy = false;
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use sqlx::postgres::{PgListener, PgPoolOptions};

    use super::WorkWaker;
    use crate::group_commit::HeldConnections;

    /// The wake-up reaches listeners while every connection of the pool is taken, as when
    /// many signals are being sent at once. Skipped without `DATABASE_URL` outside CI (the
    /// integration tests say so loudly).
    #[tokio::test]
    async fn the_wake_up_does_not_wait_for_the_pool() {
        let Some(options) = crate::test_database::options() else {
            return;
        };
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await
            .unwrap();
        let channel = format!("agent_wake_test_{}", std::process::id());
        let listening = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap();
        let mut listener = PgListener::connect_with(&listening).await.unwrap();
        listener.listen(&channel).await.unwrap();
        let busy = pool.acquire().await.unwrap();
        let held = HeldConnections::new(crate::pooler::Connector::new(options, None));
        WorkWaker::new(Arc::new(held)).wake(&crate::pooler::Db::new(pool.clone(), None), &channel);
        let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await;
        drop(busy);
        let notice = heard.expect("no wake-up within 10 s while the pool was busy");
        assert_eq!(notice.unwrap().channel(), channel);
    }
}
