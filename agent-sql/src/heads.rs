//! The heads of runs a store has last read or written, for database stores: what the next
//! commit of a run diffs its state against and chains its hash to, so that a commit need
//! not read the run back first. A remembered head is only ever a starting point: the
//! commit's compare-and-set on version and epoch decides, and a head the run has moved
//! past makes the commit write nothing.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use agent_core::store::{Lease, RunRecord, StoreError};
use serde_json::Value;

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
///
/// A worker keeps one head per run in flight, so each is kept small: boxed (the map's
/// slots stay a pointer wide), and its state as compact JSON text rather than a
/// [`Value`] tree (every JSON object of a `Value` is a B-tree node of about 600 bytes,
/// however few its fields). A head is read back once per commit; parsing a state is
/// cheaper than the database read the cache saves.
#[derive(Debug, Default)]
pub struct HeadCache {
    heads: Mutex<HashMap<String, Box<Kept>>>,
}

/// A remembered head: the record without its state, and the state apart.
#[derive(Debug)]
struct Kept {
    /// The record, its `state` left `Null`.
    record: RunRecord,
    state: KeptState,
    last_hash: String,
    patch_bytes: u64,
}

#[derive(Debug)]
enum KeptState {
    /// Serialized: reads back as the same value (no floating-point number in it).
    Text(Box<str>),
    /// A state with a floating-point number, kept as it is: text would read it back
    /// exactly only with `serde_json`'s `float_roundtrip`, and the next commit's patch is a
    /// diff against it.
    Value(Value),
}

impl KeptState {
    fn keep(state: Value) -> Self {
        Self::text_of(&state).unwrap_or(Self::Value(state))
    }

    fn keep_ref(state: &Value) -> Self {
        Self::text_of(state).unwrap_or_else(|| Self::Value(state.clone()))
    }

    fn text_of(state: &Value) -> Option<Self> {
        if has_float(state) {
            return None;
        }
        let text = serde_json::to_string(state).ok()?;
        Some(Self::Text(text.into_boxed_str()))
    }

    fn value(&self) -> Option<Value> {
        match self {
            Self::Text(text) => serde_json::from_str(text).ok(),
            Self::Value(v) => Some(v.clone()),
        }
    }
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
}

impl HeadCache {
    /// Remember `head` as the latest of its run; a final run's head is forgotten instead.
    /// Runs end by the thousands in a busy worker and are rarely written again (an
    /// operator's repair or note reads the head back): keeping their heads would fill the
    /// cache with runs nobody steps, each holding its whole state (an in-flight run's head
    /// is what its next commit diffs against).
    pub fn remember(&self, head: RunHead) {
        let RunHead {
            mut record,
            last_hash,
            patch_bytes,
        } = head;
        if record.status.is_final() {
            self.forget(&record.id);
            return;
        }
        let state = KeptState::keep(std::mem::take(&mut record.state));
        self.keep(Kept {
            record,
            state,
            last_hash,
            patch_bytes,
        });
    }

    /// [`remember`](Self::remember) the head at `record` (whose last transition's hash is
    /// `last_hash`) without copying its state as a value.
    pub fn remember_record(&self, record: &mut RunRecord, last_hash: String, patch_bytes: u64) {
        if record.status.is_final() {
            self.forget(&record.id);
            return;
        }
        let state = KeptState::keep_ref(&record.state);
        let value = std::mem::take(&mut record.state);
        let kept = record.clone();
        record.state = value;
        self.keep(Kept {
            record: kept,
            state,
            last_hash,
            patch_bytes,
        });
    }

    /// The run at `head`, its head remembered: the run's next commit then reads nothing
    /// back (a run just created or claimed is about to be stepped).
    pub fn remembered(&self, head: RunHead) -> RunRecord {
        let RunHead {
            mut record,
            last_hash,
            patch_bytes,
        } = head;
        self.remember_record(&mut record, last_hash, patch_bytes);
        record
    }

    fn keep(&self, kept: Kept) {
        let mut heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        if heads.len() >= HEAD_CACHE_MAX && !heads.contains_key(&kept.record.id) {
            heads.clear();
        }
        heads.insert(kept.record.id.clone(), Box::new(kept));
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
        let (mut record, state, last_hash, patch_bytes) = {
            let heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = heads.get(run_id).filter(|h| h.record.version == version)?;
            let state = match &kept.state {
                KeptState::Text(text) => KeptState::Text(text.clone()),
                KeptState::Value(v) => KeptState::Value(v.clone()),
            };
            (
                kept.record.clone(),
                state,
                kept.last_hash.clone(),
                kept.patch_bytes,
            )
        };
        // Parsed outside the lock: every commit of the process reads its head here.
        record.state = state.value()?;
        Some(RunHead {
            record,
            last_hash,
            patch_bytes,
        })
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

#[cfg(test)]
mod tests {
    use agent_core::store::{RunRecord, RunStatus};
    use serde_json::json;

    use super::{HeadCache, RunHead};

    fn record(id: &str, version: u64, state: &serde_json::Value) -> RunRecord {
        serde_json::from_value(json!({
            "id": id, "agent": "A", "fingerprint": "f", "state_name": "S", "state": state,
            "version": version, "status": "running", "waiting_for": null, "wake_at": null,
            "error": null, "epoch": 1, "lease_owner": "w", "lease_expires_at": 5,
            "claims_without_progress": 0, "parent": null, "spawned_by": null,
            "created_at": 1, "updated_at": 2, "labels": {}, "cancel_requested": null
        }))
        .expect("a run record")
    }

    #[test]
    fn a_head_reads_back_as_remembered() {
        let heads = HeadCache::default();
        // Integers, strings with escapes, nesting: kept as text. A float: kept as a value,
        // so that it reads back bit for bit.
        let states = [
            json!({"S": {"n": u64::MAX, "i": -3, "s": "a\"b\\c\u{e9}\n", "l": [1, {"x": null}]}}),
            json!({"S": {"f": 0.1, "g": 1e300, "h": [2.5e-8]}}),
        ];
        for (i, state) in states.into_iter().enumerate() {
            let id = format!("r{i}");
            let mut rec = record(&id, 3, &state);
            heads.remember_record(&mut rec, "h3".into(), 7);
            assert_eq!(rec.state, state, "the caller keeps its record whole");
            let head = heads.at(&id, 3).expect("remembered");
            assert_eq!(head.record, rec);
            assert_eq!((head.last_hash.as_str(), head.patch_bytes), ("h3", 7));
            assert!(heads.at(&id, 2).is_none(), "only at its version");
            heads.remember(RunHead {
                record: record(&id, 4, &state),
                last_hash: "h4".into(),
                patch_bytes: 8,
            });
            assert_eq!(heads.at(&id, 4).expect("remembered").record.state, state);
        }
    }

    #[test]
    fn a_final_run_is_forgotten() {
        let heads = HeadCache::default();
        let mut rec = record("r", 1, &json!({"S": {}}));
        heads.remember_record(&mut rec, "h".into(), 0);
        assert!(heads.at("r", 1).is_some());
        rec.version = 2;
        rec.status = RunStatus::Completed;
        heads.remember_record(&mut rec, "h".into(), 0);
        assert!(heads.at("r", 1).is_none() && heads.at("r", 2).is_none());
    }
}
