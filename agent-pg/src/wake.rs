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

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::postgres::PgPool;

/// The coalescing sender of one store's work notifications.
#[derive(Debug, Default)]
pub(crate) struct WorkWaker {
    state: Arc<Mutex<Sending>>,
}

#[derive(Debug, Default)]
struct Sending {
    /// A task is sending (or about to send) a notification.
    busy: bool,
    /// A write asked for a wake-up after the one being sent started.
    again: bool,
}

impl WorkWaker {
    /// Wake the idle workers of `channel` after a committed write: at once when no
    /// notification is being sent, else once more after it.
    pub(crate) fn wake(&self, pool: &PgPool, channel: &str) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.busy {
                state.again = true;
                return;
            }
            state.busy = true;
        }
        let (state, pool, channel) = (Arc::clone(&self.state), pool.clone(), channel.to_owned());
        tokio::spawn(async move {
            loop {
                // Best effort, like every wake-up: workers poll too.
                let _ = sqlx::query("SELECT pg_notify($1, '')")
                    .bind(&channel)
                    .execute(&pool)
                    .await;
                let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                if !std::mem::take(&mut state.again) {
                    state.busy = false;
                    return;
                }
            }
        });
    }
}
