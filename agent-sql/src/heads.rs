//! The heads of runs a store has last read or written, for database stores: what the next
//! commit of a run diffs its state against and chains its hash to, so that a commit need
//! not read the run back first. A remembered head is only ever a starting point: the
//! commit's compare-and-set on version and epoch decides, and a head the run has moved
//! past makes the commit write nothing.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use agent_core::store::{Lease, RunRecord, StoreError};

/// How many runs a [`HeadCache`] remembers before it starts over.
pub const HEAD_CACHE_MAX: usize = 16 * 1024;

/// A run at one version, with what its next transition chains to.
#[derive(Debug, Clone)]
pub struct RunHead {
    /// The run as of its last commit (`record.version` is the version this head is at).
    pub record: RunRecord,
    /// The hash of the run's last transition.
    pub last_hash: String,
    /// Bytes of patches since the last snapshot (see [`history::encode`](agent_core::store::history::encode)).
    pub patch_bytes: u64,
}

/// The last head seen of each run, bounded by [`HEAD_CACHE_MAX`] runs (it is emptied when
/// full: a forgotten head costs one read at the next commit).
#[derive(Debug, Default)]
pub struct HeadCache {
    heads: Mutex<HashMap<String, RunHead>>,
}

impl HeadCache {
    /// Remember `head` as the latest of its run; a final run's head is forgotten instead.
    /// Runs end by the thousands in a busy worker and are rarely written again (an
    /// operator's repair or note reads the head back): keeping their heads would fill the
    /// cache with runs nobody steps, each holding its whole state (an in-flight run's head
    /// is what its next commit diffs against).
    pub fn remember(&self, head: RunHead) {
        let mut heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        if head.record.status.is_final() {
            heads.remove(&head.record.id);
            return;
        }
        if heads.len() >= HEAD_CACHE_MAX && !heads.contains_key(&head.record.id) {
            heads.clear();
        }
        heads.insert(head.record.id.clone(), head);
    }

    /// Forget `run_id`'s head (the run was deleted).
    pub fn forget(&self, run_id: &str) {
        self.heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(run_id);
    }

    /// The remembered head of `run_id`, if it is at `version`.
    #[must_use]
    pub fn at(&self, run_id: &str, version: u64) -> Option<RunHead> {
        let heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        heads
            .get(run_id)
            .filter(|h| h.record.version == version)
            .cloned()
    }
}

/// Why a commit under `lease` expecting version `expected` wrote nothing, from the run's
/// stored `(version, epoch)` (`None`: the run does not exist). `None` when neither the
/// version nor the epoch explains it (the caller knows what else its write checked).
#[must_use]
pub fn commit_refusal(
    lease: &Lease,
    expected: u64,
    stored: Option<(u64, u64)>,
) -> Option<StoreError> {
    match stored {
        None => Some(StoreError::NotFound(lease.run_id.clone())),
        Some((_, epoch)) if epoch != lease.epoch => Some(StoreError::LeaseLost {
            run_id: lease.run_id.clone(),
            epoch: lease.epoch,
        }),
        Some((found, _)) if found != expected => Some(StoreError::Conflict {
            run_id: lease.run_id.clone(),
            expected,
            found,
        }),
        Some(_) => None,
    }
}
