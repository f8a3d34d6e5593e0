//! Canonical JSON and the hashes computed over it.

use serde::Serialize;
use serde_json::Value;

use super::NewRun;

/// Canonical JSON: object keys sorted at every depth, no whitespace. Used for input hashes
/// and the transition hash, so a hash does not depend on how a map happened to be ordered.
/// Strings and numbers are written exactly as `serde_json` writes them; stored hashes depend
/// on these bytes, so they must never change.
///
/// # Panics
/// Never: writing JSON into memory cannot fail.
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    leaf(key, out);
                    out.push(b':');
                    write(item, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            other => leaf(other, out),
        }
    }
    // Written in place: this runs on every commit and every journaled call, and a
    // temporary string per key and per value was most of its cost.
    fn leaf<T: Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
        serde_json::to_writer(out, v).expect("writing JSON into memory cannot fail");
    }
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// SHA-256 of the canonical JSON of `value`, hex.
#[must_use]
pub fn input_hash(value: &Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// What makes two [`RunStore::create_run`](super::RunStore::create_run) calls with the same id "the same run": SHA-256 over
/// the agent's name, the initial state's name and the canonical JSON of the initial state
/// (and the labels, when there are any: runs created without labels keep their hash; and
/// the parent, for a child run), but not the label
/// [`TRACE_PARENT_LABEL`](crate::trace::TRACE_PARENT_LABEL),
/// hex. Backends store it with the run to answer idempotent creation without the initial
/// version (which retention may prune).
#[must_use]
pub fn creation_hash(run: &NewRun) -> String {
    if run.labels.contains_key(crate::trace::TRACE_PARENT_LABEL) {
        // The span a run was started in is where, not what: a retried start from another
        // span is the same start.
        let mut run = run.clone();
        run.labels.remove(crate::trace::TRACE_PARENT_LABEL);
        return creation_hash(&run);
    }
    if let Some(parent) = &run.spawned_by {
        input_hash(&serde_json::json!([
            run.agent,
            run.state_name,
            run.state,
            run.labels,
            [parent.run_id, parent.version]
        ]))
    } else if run.labels.is_empty() {
        input_hash(&serde_json::json!([run.agent, run.state_name, run.state]))
    } else {
        input_hash(&serde_json::json!([
            run.agent,
            run.state_name,
            run.state,
            run.labels
        ]))
    }
}
