//! What one run's data does by itself: replay a version, append one, fence a lease.

use super::{RunData, StoredVersion};
use crate::store::events::{StatusChange, TransitionFacts};
use crate::store::history;
use crate::store::operator::OperatorTransition;
use crate::store::{
    Lease, OperatorNote, RunRecord, StateAtVersion, StepCommit, StoreError, TransitionRecord,
    transition_hash,
};

impl RunData {
    /// The state at `version`, replayed from the nearest snapshot at or before it.
    pub(super) fn state_at(&self, version: u64) -> Result<Option<StateAtVersion>, StoreError> {
        let Some(target) = self.versions.get(&version) else {
            return Ok(None);
        };
        let start = self
            .versions
            .range(..=version)
            .rev()
            .find(|(_, v)| v.payload.is_snapshot())
            .map(|(k, _)| *k)
            .ok_or_else(|| StoreError::Corrupt {
                run_id: self.record.id.clone(),
                message: format!("no snapshot at or before version {version}"),
            })?;
        let state = history::replay(
            self.versions
                .range(start..=version)
                .map(|(_, v)| &v.payload),
        )
        .map_err(|e| StoreError::Corrupt {
            run_id: self.record.id.clone(),
            message: e.to_string(),
        })?;
        Ok(Some(StateAtVersion {
            version,
            state_name: target.state_name.clone(),
            state,
        }))
    }

    /// Write version `commit.expected_version + 1` (the caller checked the compare-and-set)
    /// and move the run row to it; the lease is the caller's to handle.
    pub(super) fn append_version(
        &mut self,
        commit: &StepCommit,
        epoch: u64,
        note: Option<&OperatorNote>,
        now: i64,
        position: u64,
        consumed_signal: Option<(i64, String)>,
    ) {
        let version = commit.expected_version + 1;
        let (payload, since) = history::encode(
            Some(&self.record.state),
            &commit.state,
            self.patch_bytes_since_snapshot,
        );
        let lease = Lease {
            run_id: self.record.id.clone(),
            worker: String::new(),
            epoch,
            expires_at: 0,
        };
        let mut link = commit.link(&lease);
        link.note = note;
        let hash = transition_hash(&self.last_hash, &link);
        self.versions.insert(
            version,
            StoredVersion {
                payload,
                state_name: commit.to_state.clone(),
                transition: TransitionRecord {
                    run_id: self.record.id.clone(),
                    version,
                    from_state: commit.from_state.clone(),
                    to_state: commit.to_state.clone(),
                    kind: commit.kind,
                    status: commit.status,
                    epoch,
                    created_at: now,
                    hash: hash.clone(),
                    note: note.cloned(),
                },
                position,
                facts: TransitionFacts {
                    waiting_for: commit.waiting_for.clone(),
                    wake_at: commit.wake_at,
                    error: commit.error.clone(),
                    consumed_signal,
                },
            },
        );
        self.patch_bytes_since_snapshot = since;
        self.last_hash = hash;
        let r = &mut self.record;
        r.version = version;
        r.state_name.clone_from(&commit.to_state);
        r.state.clone_from(&commit.state);
        r.status = commit.status;
        r.waiting_for.clone_from(&commit.waiting_for);
        r.wake_at = commit.wake_at;
        r.error.clone_from(&commit.error);
        if let Some(spend) = commit.spend {
            r.spend = spend;
        }
        r.claims_without_progress = 0;
        r.updated_at = now;
    }

    /// Write an operator's transition.
    pub(super) fn apply_operator(
        &mut self,
        t: &OperatorTransition,
        now: i64,
        position: u64,
    ) -> RunRecord {
        self.append_version(&t.commit, t.epoch, Some(&t.note), now, position, None);
        let r = &mut self.record;
        r.epoch = t.epoch;
        r.cancel_requested = None;
        if !t.keep_lease {
            r.lease_owner = None;
            r.lease_expires_at = None;
        }
        r.clone()
    }

    pub(super) fn status_changed(&mut self, position: u64, now: i64) {
        let r = &self.record;
        let change = StatusChange {
            run_id: r.id.clone(),
            version: r.version,
            status: r.status,
            error: r.error.clone(),
            at: now,
        };
        self.status_changes.push((position, change));
    }

    pub(super) fn fenced(&self, lease: &Lease) -> Result<(), StoreError> {
        if self.record.epoch == lease.epoch {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            })
        }
    }
}
