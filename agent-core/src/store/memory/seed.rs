//! A run put into the store as it stood at one version of another store's history, for
//! [`replay`](crate::replay): the step of that version is then executed by the real runner.

use std::collections::BTreeMap;

use super::{MemoryStore, RunData, StoredVersion};
use crate::store::events::TransitionFacts;
use crate::store::history;
use crate::store::{JournalEntry, RunRecord, TransitionKind, TransitionRecord, now_ms};

impl MemoryStore {
    /// Put `record` in the store as the run's only stored version, with `journal` as its
    /// journal, replacing whatever the store held under its id. The version is stored as a
    /// snapshot with a `start` transition and the run holds no lease: a claim takes it next.
    pub(crate) fn seed_run(&self, mut record: RunRecord, journal: Vec<JournalEntry>) {
        record.lease_owner = None;
        record.lease_expires_at = None;
        record.cancel_requested = None;
        record.claims_without_progress = 0;
        let now = now_ms();
        let (payload, since) = history::encode(None, &record.state, 0);
        let mut g = self.lock();
        let position = g.next_position();
        let transition = TransitionRecord {
            run_id: record.id.clone(),
            version: record.version,
            from_state: record.state_name.clone(),
            to_state: record.state_name.clone(),
            kind: TransitionKind::Start,
            status: record.status,
            epoch: record.epoch,
            created_at: now,
            hash: String::new(),
            note: None,
        };
        let versions = BTreeMap::from([(
            record.version,
            StoredVersion {
                payload,
                state_name: record.state_name.clone(),
                transition,
                position,
                facts: TransitionFacts {
                    waiting_for: record.waiting_for.clone(),
                    wake_at: record.wake_at,
                    error: record.error.clone(),
                    consumed_signal: None,
                },
            },
        )]);
        g.run_seq += 1;
        let data = RunData {
            record: record.clone(),
            created_seq: g.run_seq,
            creation_hash: String::new(),
            versions,
            patch_bytes_since_snapshot: since,
            last_hash: String::new(),
            journal: journal
                .into_iter()
                .map(|e| ((e.version, e.seq), e))
                .collect(),
            call_positions: BTreeMap::new(),
            status_changes: Vec::new(),
        };
        g.runs.insert(record.id.clone(), data);
    }
}
