//! Versions stored as deltas, with snapshots spaced by size, so storage grows linearly.
//!
//! Storing the full state at every version costs `O(n²)` for a state that grows by one
//! item per step. Instead each version stores a JSON Patch (RFC 6902) from the previous
//! version, and a full snapshot is written only when the patches written since the last
//! snapshot outweigh the state itself. Snapshot bytes are thus bounded by patch bytes, and
//! total storage is linear in the bytes that actually changed. Reading a version applies the
//! patches after the nearest snapshot at or before it. Backends call [`encode`] when they
//! commit and [`replay`] when they read history.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How one version is stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum VersionPayload {
    /// The whole state.
    Snapshot(Value),
    /// A JSON Patch from the previous version's state.
    Patch(Value),
}

impl VersionPayload {
    /// Whether this is a snapshot.
    #[must_use]
    pub fn is_snapshot(&self) -> bool {
        matches!(self, Self::Snapshot(_))
    }

    /// Serialized size in bytes.
    #[must_use]
    pub fn byte_len(&self) -> u64 {
        let body = match self {
            Self::Snapshot(v) | Self::Patch(v) => v,
        };
        serde_json::to_vec(body).map_or(0, |b| b.len() as u64)
    }
}

/// Encode `next` against `prev`. `patch_bytes_since_snapshot` is the sum of the patch sizes
/// stored since the last snapshot; returns the payload and the new sum.
#[must_use]
pub fn encode(
    prev: Option<&Value>,
    next: &Value,
    patch_bytes_since_snapshot: u64,
) -> (VersionPayload, u64) {
    let Some(prev) = prev else {
        return (VersionPayload::Snapshot(next.clone()), 0);
    };
    let patch = serde_json::to_value(json_patch::diff(prev, next)).unwrap_or(Value::Null);
    let patch_len = serde_json::to_vec(&patch).map_or(0, |b| b.len() as u64);
    let state_len = serde_json::to_vec(next).map_or(0, |b| b.len() as u64);
    let total = patch_bytes_since_snapshot + patch_len;
    if total >= state_len {
        (VersionPayload::Snapshot(next.clone()), 0)
    } else {
        (VersionPayload::Patch(patch), total)
    }
}

/// Error replaying stored versions.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The first payload is a patch with no snapshot to apply it to.
    #[error("version history starts with a patch, not a snapshot")]
    NoSnapshot,
    /// A stored patch does not parse or does not apply.
    #[error("stored patch does not apply: {0}")]
    BadPatch(String),
}

/// The state after applying `payloads` in order (the first must be a snapshot).
///
/// # Errors
/// [`ReplayError`] when the stored history is not a valid chain.
pub fn replay<'a>(
    payloads: impl IntoIterator<Item = &'a VersionPayload>,
) -> Result<Value, ReplayError> {
    let mut state: Option<Value> = None;
    for p in payloads {
        match p {
            VersionPayload::Snapshot(v) => state = Some(v.clone()),
            VersionPayload::Patch(ops) => {
                let cur = state.as_mut().ok_or(ReplayError::NoSnapshot)?;
                let patch: json_patch::Patch = serde_json::from_value(ops.clone())
                    .map_err(|e| ReplayError::BadPatch(e.to_string()))?;
                json_patch::patch(cur, &patch).map_err(|e| ReplayError::BadPatch(e.to_string()))?;
            }
        }
    }
    state.ok_or(ReplayError::NoSnapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Encode `steps` versions of a state that gains one item per step; total bytes stored.
    fn grow(steps: usize) -> (u64, Vec<VersionPayload>, Value) {
        let mut prev: Option<Value> = None;
        let mut since = 0;
        let mut payloads = Vec::new();
        let mut total = 0u64;
        let mut state = json!({ "items": [] });
        for i in 0..steps {
            state["items"]
                .as_array_mut()
                .unwrap()
                .push(json!(format!("item-{i}")));
            let (p, s) = encode(prev.as_ref(), &state, since);
            since = s;
            total += p.byte_len();
            payloads.push(p);
            prev = Some(state.clone());
        }
        (total, payloads, state)
    }

    #[test]
    fn growing_state_is_stored_linearly_and_replays() {
        let (half, _, _) = grow(500);
        let (total, payloads, state) = grow(1000);
        // Linear: doubling the steps about doubles the bytes (full snapshots would quadruple).
        #[allow(clippy::cast_precision_loss)] // byte counts of a test, far below 2^52
        let ratio = total as f64 / half as f64;
        assert!(ratio < 2.5, "1000 steps cost {ratio:.2}x of 500 steps");
        assert_eq!(replay(&payloads).unwrap(), state);
        let snapshots = payloads.iter().filter(|p| p.is_snapshot()).count();
        // Snapshots are spaced geometrically: logarithmically many.
        assert!(snapshots < 50, "{snapshots} snapshots");
    }

    #[test]
    fn replay_needs_a_snapshot_first() {
        let p = VersionPayload::Patch(json!([]));
        assert!(matches!(replay([&p]), Err(ReplayError::NoSnapshot)));
    }
}
