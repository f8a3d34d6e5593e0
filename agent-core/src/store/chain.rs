//! The hash chain: every transition record carries a hash over the previous one and its
//! own content, so a modified, deleted, duplicated or reordered row is detected.

use serde_json::Value;

use super::{
    Lease, NewRun, OperatorNote, RunStatus, StepCommit, TransitionKind, TransitionRecord,
    canonical_json,
};

/// What a transition's hash covers: every field of its record except the commit time (the
/// database sets it after the hash is computed) and the hash itself, plus the state the
/// transition entered, in full.
#[derive(Clone, Copy, Debug)]
pub struct ChainLink<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The version the transition created.
    pub version: u64,
    /// Left.
    pub from_state: &'a str,
    /// Entered.
    pub to_state: &'a str,
    /// Why.
    pub kind: TransitionKind,
    /// The status after it.
    pub status: RunStatus,
    /// The lease epoch of the writer.
    pub epoch: u64,
    /// The state at this version.
    pub state: &'a Value,
    /// For an operator's transition: who and why.
    pub note: Option<&'a OperatorNote>,
}

impl TransitionRecord {
    /// What this record's hash covers, given the state at its version.
    #[must_use]
    pub fn link<'a>(&'a self, state: &'a Value) -> ChainLink<'a> {
        ChainLink {
            run_id: &self.run_id,
            version: self.version,
            from_state: &self.from_state,
            to_state: &self.to_state,
            kind: self.kind,
            status: self.status,
            epoch: self.epoch,
            state,
            note: self.note.as_ref(),
        }
    }
}

impl StepCommit {
    /// What the hash of this commit's transition covers, written under `lease`.
    #[must_use]
    pub fn link<'a>(&'a self, lease: &'a Lease) -> ChainLink<'a> {
        ChainLink {
            run_id: &lease.run_id,
            version: self.expected_version + 1,
            from_state: &self.from_state,
            to_state: &self.to_state,
            kind: self.kind,
            status: self.status,
            epoch: lease.epoch,
            state: &self.state,
            note: None,
        }
    }
}

impl NewRun {
    /// What the hash of the run's first transition (version 0) covers.
    #[must_use]
    pub fn link(&self) -> ChainLink<'_> {
        ChainLink {
            run_id: &self.id,
            version: 0,
            from_state: &self.state_name,
            to_state: &self.state_name,
            kind: TransitionKind::Start,
            status: RunStatus::Running,
            epoch: 0,
            state: &self.state,
            note: None,
        }
    }
}

/// The hash chaining a transition to the previous one: SHA-256 over the previous hash and
/// everything in `link`, hex. Changing any of them, or the previous hash, changes it.
#[must_use]
pub fn transition_hash(prev_hash: &str, link: &ChainLink<'_>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    chain_head(&mut h, prev_hash, link);
    h.update(link.kind.as_str().as_bytes());
    h.update([0]);
    h.update(link.status.as_str().as_bytes());
    h.update([0]);
    h.update(link.epoch.to_be_bytes());
    h.update(canonical_json(link.state).as_bytes());
    // Only operators' transitions carry a note, appended after everything else: every
    // transition without one keeps the hash it was written with.
    if let Some(note) = link.note {
        h.update([0, b'n']);
        h.update(note.by.as_bytes());
        h.update([0]);
        h.update(note.reason.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The hash that builds before kind, status and epoch were chained wrote: the same without
/// those three. `agentctl verify` accepts it for rows written then, and says how many it
/// found; those rows are tamper-evident in everything but the three.
#[must_use]
pub fn legacy_transition_hash(prev_hash: &str, link: &ChainLink<'_>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    chain_head(&mut h, prev_hash, link);
    h.update(canonical_json(link.state).as_bytes());
    hex::encode(h.finalize())
}

/// The fields both hashes start with, each ended by a 0 byte or of fixed width.
fn chain_head(h: &mut sha2::Sha256, prev_hash: &str, link: &ChainLink<'_>) {
    use sha2::Digest;
    h.update(prev_hash.as_bytes());
    h.update([0]);
    h.update(link.run_id.as_bytes());
    h.update([0]);
    h.update(link.version.to_be_bytes());
    h.update(link.from_state.as_bytes());
    h.update([0]);
    h.update(link.to_state.as_bytes());
    h.update([0]);
}
