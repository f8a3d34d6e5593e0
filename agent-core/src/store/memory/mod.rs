//! An in-memory [`Store`](super::Store): every guarantee of the contract, nothing durable across a restart.
//!
//! For tests, examples and single-process use where losing runs on exit is acceptable. All
//! data lives behind one mutex, so every operation is atomic; versions are kept through
//! [`history::encode`] like on the durable backends, so the storage figures compare.
//!
//! ```
//! use durable_agents::backend::{NewRun, RunStore};
//! use durable_agents::store::memory::MemoryStore;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let run = store
//!     .create_run(NewRun::new("run-1", "Checkout", "f", "Browsing", serde_json::json!({ "cart": [] })))
//!     .await
//!     .unwrap();
//! assert_eq!(run.version, 0);
//! # });
//! ```

mod events;
mod limits;
mod operator;
mod reads;
mod run_data;
mod runs;
mod schedules;
mod seed;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use super::events::{StatusChange, TransitionFacts, WakeHub};
#[cfg(doc)]
use super::history;
use super::history::VersionPayload;
use super::{JournalEntry, RunRecord, SignalRecord, StoreError, ToolSwitch, TransitionRecord};
use crate::graph::GraphDescription;

/// The in-memory store. Cheap to create; share it with `Arc`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    work: Notify,
    events: WakeHub,
}

#[derive(Debug, Default)]
struct Inner {
    /// `(agent, fingerprint)` → graph and registration order.
    graphs: BTreeMap<(String, String), (GraphDescription, u64)>,
    graph_seq: u64,
    runs: HashMap<String, RunData>,
    run_seq: u64,
    signals: BTreeMap<i64, SignalRecord>,
    next_signal: i64,
    tools: BTreeMap<String, ToolSwitch>,
    /// Parent run → its children's ids, in creation order (for the parents' waits).
    children: HashMap<String, Vec<String>>,
    /// The last event position drawn ([`events`](super::events)); every write draws under
    /// the lock, so positions follow the order of the writes.
    position: u64,
    /// Signal id → its position.
    signal_positions: HashMap<i64, u64>,
    /// `(run, dedup key)` → the id of the signal sent under it.
    signal_keys: HashMap<(String, String), i64>,
    /// Schedules by id.
    schedules: BTreeMap<String, crate::schedule::Schedule>,
    /// Rate limits by name.
    limits: BTreeMap<String, crate::store::Bucket>,
}

#[derive(Debug)]
struct RunData {
    record: RunRecord,
    created_seq: u64,
    creation_hash: String,
    versions: BTreeMap<u64, StoredVersion>,
    patch_bytes_since_snapshot: u64,
    last_hash: String,
    journal: BTreeMap<(u64, u32), JournalEntry>,
    /// `(version, seq)` → the positions of the call's start and end.
    call_positions: BTreeMap<(u64, u32), (u64, Option<u64>)>,
    /// Status changes without a version, with their positions.
    status_changes: Vec<(u64, StatusChange)>,
}

#[derive(Debug)]
struct StoredVersion {
    payload: VersionPayload,
    state_name: String,
    transition: TransitionRecord,
    position: u64,
    facts: TransitionFacts,
}

impl StoredVersion {
    fn bytes(&self) -> u64 {
        let t = &self.transition;
        self.payload.byte_len()
            + (self.state_name.len()
                + t.run_id.len()
                + t.from_state.len()
                + t.to_state.len()
                + t.hash.len()
                + 40) as u64
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied write: every operation
        // validates before it mutates, so the data stays consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(run_id.to_owned())
}

fn lease_alive(r: &RunRecord, now: i64) -> bool {
    r.lease_owner.is_some() && r.lease_expires_at.is_some_and(|t| t > now)
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

impl Inner {
    fn next_position(&mut self) -> u64 {
        self.position += 1;
        self.position
    }

    fn run(&self, run_id: &str) -> Result<&RunData, StoreError> {
        self.runs.get(run_id).ok_or_else(|| not_found(run_id))
    }

    fn run_mut(&mut self, run_id: &str) -> Result<&mut RunData, StoreError> {
        self.runs.get_mut(run_id).ok_or_else(|| not_found(run_id))
    }
}

impl MemoryStore {
    /// Damage a run's latest stored version (an unparsable patch), for the conformance
    /// suite's corrupt-data check ([`crate::__private::corrupt_memory_store`]).
    pub(crate) fn corrupt_latest_version(&self, run_id: &str) {
        let mut g = self.lock();
        if let Some(data) = g.runs.get_mut(run_id)
            && let Some((_, v)) = data.versions.iter_mut().next_back()
        {
            v.payload = VersionPayload::Patch(Value::String("garbage".into()));
        }
    }
}
