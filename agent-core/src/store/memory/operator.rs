//! The operator's actions ([`OperatorStore`]): cancel (reaching the children), terminate,
//! drop a signal, set a status, repair, prune, tool switches.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{Inner, MemoryStore, RunData, StoredVersion, lease_alive};
use crate::store::events::TransitionFacts;
use crate::store::history::VersionPayload;
use crate::store::operator::{self, OperatorPlan};
use crate::store::{
    Budget, CallStatus, JournalEntry, Millis, OperatorNote, OperatorStore, PruneReport,
    RepairCommit, RetentionPolicy, RunFailure, RunRecord, RunStatus, StoreError, ToolSwitch,
    TransitionRecord, now_ms,
};
use crate::tool::ToolKind;

impl Inner {
    /// [`RetentionPolicy::delete_final_before`]: delete up to `limit` final runs last
    /// updated before `before` (oldest first), with everything stored of them; a final
    /// child whose parent is not final, and a final run with a child not final, stay.
    fn delete_final_runs(&mut self, before: Millis, limit: usize) -> Vec<String> {
        let not_final = |runs: &HashMap<String, RunData>, id: &str| {
            runs.get(id).is_some_and(|d| !d.record.status.is_final())
        };
        let mut expired: Vec<(Millis, String)> = self
            .runs
            .values()
            .filter(|d| d.record.status.is_final() && d.record.updated_at < before)
            .filter(|d| {
                d.record
                    .spawned_by
                    .as_ref()
                    .is_none_or(|p| !not_final(&self.runs, &p.run_id))
            })
            .filter(|d| {
                self.children
                    .get(&d.record.id)
                    .is_none_or(|c| c.iter().all(|c| !not_final(&self.runs, c)))
            })
            .map(|d| (d.record.updated_at, d.record.id.clone()))
            .collect();
        expired.sort();
        expired.truncate(limit);
        let ids: Vec<String> = expired.into_iter().map(|(_, id)| id).collect();
        for id in &ids {
            self.runs.remove(id);
            self.children.remove(id);
            self.signals.retain(|_, s| &s.run_id != id);
        }
        for children in self.children.values_mut() {
            children.retain(|c| !ids.contains(c));
        }
        self.signal_positions
            .retain(|sid, _| self.signals.contains_key(sid));
        self.signal_keys
            .retain(|_, sid| self.signals.contains_key(sid));
        ids
    }
}

impl Inner {
    /// What [`OperatorStore::cancel_run`] does to one run, as [`operator::plan_cancel`] says.
    fn cancel_one(
        &mut self,
        run_id: &str,
        note: &OperatorNote,
        now: i64,
    ) -> Result<RunRecord, StoreError> {
        self.run(run_id)?;
        let position = self.next_position();
        let data = self.run_mut(run_id)?;
        Ok(match operator::plan_cancel(&data.record, note, now)? {
            OperatorPlan::Unchanged => data.record.clone(),
            OperatorPlan::RequestCancel => {
                data.record.cancel_requested = Some(note.clone());
                data.record.updated_at = now;
                data.record.clone()
            }
            OperatorPlan::Transition(t) => data.apply_operator(&t, now, position),
        })
    }

    /// The children of `parent` that are not final and that a cancel of it reaches
    /// ([`operator::cancel_reaches_child`]), by id.
    fn children_reached_by_cancel(&self, parent: &str) -> Vec<String> {
        let Some(p) = self.runs.get(parent) else {
            return Vec::new();
        };
        let graph = self
            .graphs
            .get(&(p.record.agent.clone(), p.record.fingerprint.clone()))
            .map(|(graph, _)| graph);
        let mut ids: Vec<String> = self
            .runs
            .values()
            .filter(|c| !c.record.status.is_final())
            .filter_map(|c| {
                let by = c
                    .record
                    .spawned_by
                    .as_ref()
                    .filter(|s| s.run_id == parent)?;
                let state = p.versions.get(&by.version).map(|v| v.state_name.as_str());
                operator::cancel_reaches_child(graph, state).then(|| c.record.id.clone())
            })
            .collect();
        ids.sort();
        ids
    }
}

/// Whether a journal entry belongs to the run's saga log (needed to compensate later); the
/// children it started count too (a cancel of the run reaches them through it).
pub(crate) fn is_saga_entry(e: &JournalEntry) -> bool {
    use crate::store::EntryKind;
    match e.kind {
        EntryKind::Compensation | EntryKind::Child => true,
        EntryKind::Tool => {
            e.tool_kind == Some(ToolKind::Hybrid) && e.status == CallStatus::Succeeded
        }
        EntryKind::Decision => false,
    }
}

#[async_trait]
impl OperatorStore for MemoryStore {
    async fn drop_signal(
        &self,
        run_id: &str,
        signal_id: i64,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let record = {
            let mut g = self.lock();
            g.run(run_id)?;
            let signal = g
                .signals
                .get(&signal_id)
                .filter(|s| s.run_id == run_id)
                .cloned()
                .ok_or_else(|| StoreError::NoPendingSignal {
                    run_id: run_id.to_owned(),
                    signal_id,
                })?;
            let position = g.next_position();
            let data = g.run_mut(run_id)?;
            let t = operator::plan_drop_signal(&data.record, &signal, note, now_ms())?;
            let record = data.apply_operator(&t, now_ms(), position);
            if let Some(s) = g.signals.get_mut(&signal_id) {
                s.consumed_at_version = Some(record.version);
            }
            record
        };
        self.events.wake(run_id);
        Ok(record)
    }

    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunFailure>,
    ) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let record = {
            let mut g = self.lock();
            g.run(run_id)?;
            let position = g.next_position();
            let data = g.run_mut(run_id)?;
            let r = &mut data.record;
            if lease_alive(r, now) {
                return Err(StoreError::LeaseLost {
                    run_id: run_id.to_owned(),
                    epoch: r.epoch,
                });
            }
            r.status = status;
            r.error = if status == RunStatus::Running {
                None
            } else {
                error
            };
            if status == RunStatus::Running {
                r.claims_without_progress = 0;
                r.wake_at = None;
            }
            r.updated_at = now;
            data.status_changed(position, now);
            data.record.clone()
        };
        self.work.notify_waiters();
        self.events.wake(run_id);
        Ok(record)
    }

    async fn repair_run(&self, commit: &RepairCommit) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let record = {
            let mut g = self.lock();
            let data = g.run_mut(&commit.run_id)?;
            let last = data.versions.keys().next_back().copied();
            let moved = data.record.status != commit.expected_status
                || data.record.epoch != commit.expected_epoch
                || last != Some(commit.last_version)
                || lease_alive(&data.record, now);
            if moved {
                return Err(StoreError::Conflict {
                    run_id: commit.run_id.clone(),
                    expected: commit.last_version,
                    found: last.unwrap_or(data.record.version),
                });
            }
            let version = commit.version();
            let position = g.next_position();
            let data = g.run_mut(&commit.run_id)?;
            data.versions.insert(
                version,
                StoredVersion {
                    payload: VersionPayload::Snapshot(commit.state.clone()),
                    state_name: commit.to_state.clone(),
                    transition: TransitionRecord {
                        run_id: commit.run_id.clone(),
                        version,
                        from_state: commit.from_state.clone(),
                        to_state: commit.to_state.clone(),
                        kind: commit.kind,
                        status: RunStatus::Running,
                        epoch: commit.epoch(),
                        created_at: now,
                        hash: commit.hash.clone(),
                        note: Some(commit.note.clone()),
                    },
                    position,
                    facts: TransitionFacts::default(),
                },
            );
            data.patch_bytes_since_snapshot = 0;
            data.last_hash.clone_from(&commit.hash);
            let r = &mut data.record;
            r.version = version;
            r.state_name.clone_from(&commit.to_state);
            r.state = commit.state.clone();
            r.status = RunStatus::Running;
            r.waiting_for = None;
            r.wake_at = None;
            r.error = None;
            r.epoch = commit.epoch();
            r.lease_owner = None;
            r.lease_expires_at = None;
            r.claims_without_progress = 0;
            r.updated_at = now;
            r.clone()
        };
        self.work.notify_waiters();
        self.events.wake(&commit.run_id);
        Ok(record)
    }

    async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError> {
        let mut g = self.lock();
        let mut report = PruneReport::default();
        let limit = policy.max_runs.unwrap_or(usize::MAX);
        if let Some(before) = policy.delete_final_before {
            let deleted = g.delete_final_runs(before, limit);
            report.runs_deleted = deleted.len() as u64;
            drop(g);
            for id in &deleted {
                self.events.wake(id);
            }
            g = self.lock();
        }
        let mut ids: Vec<&String> = g.runs.keys().collect();
        ids.sort();
        let ids: Vec<String> = ids.into_iter().cloned().collect();
        for id in ids {
            if usize::try_from(report.runs_pruned).is_ok_and(|n| n >= limit) {
                break;
            }
            let Some(data) = g.runs.get_mut(&id) else {
                continue;
            };
            if policy.only_final_runs && !data.record.status.is_final() {
                continue;
            }
            let keep = policy.keep_last_versions.max(1);
            let Some(mut cutoff) = (data.record.version + 1).checked_sub(keep) else {
                continue;
            };
            if let Some(since) = policy.keep_versions_since {
                let first_recent = data
                    .versions
                    .iter()
                    .find(|(_, v)| v.transition.created_at >= since)
                    .map_or(data.record.version, |(k, _)| *k);
                cutoff = cutoff.min(first_recent);
            }
            let Some(first) = data.versions.keys().next().copied() else {
                continue;
            };
            if first >= cutoff {
                continue;
            }
            // The first kept version becomes a snapshot, so every kept version replays.
            let at = data.state_at(cutoff)?.ok_or_else(|| StoreError::Corrupt {
                run_id: data.record.id.clone(),
                message: format!("version {cutoff} missing"),
            })?;
            if let Some(v) = data.versions.get_mut(&cutoff) {
                v.payload = VersionPayload::Snapshot(at.state);
            }
            let removed: Vec<u64> = data.versions.range(..cutoff).map(|(k, _)| *k).collect();
            for k in &removed {
                data.versions.remove(k);
            }
            report.versions_removed += removed.len() as u64;
            report.runs_pruned += 1;
            let final_run = data.record.status.is_final();
            let before = data.journal.len();
            data.journal
                .retain(|(v, _), e| *v >= cutoff || (!final_run && is_saga_entry(e)));
            report.entries_removed += (before - data.journal.len()) as u64;
        }
        Ok(report)
    }

    async fn set_budget(
        &self,
        run_id: &str,
        budget: Option<Budget>,
    ) -> Result<RunRecord, StoreError> {
        let mut g = self.lock();
        let data = g.run_mut(run_id)?;
        data.record.budget = budget;
        Ok(data.record.clone())
    }

    async fn set_tool_enabled(
        &self,
        tool: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.lock().tools.insert(
            tool.to_owned(),
            ToolSwitch {
                tool: tool.to_owned(),
                enabled,
                reason: reason.map(str::to_owned),
                updated_at: now_ms(),
            },
        );
        Ok(())
    }

    async fn cancel_run(&self, run_id: &str, note: &OperatorNote) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let (record, touched) = {
            let mut g = self.lock();
            let record = g.cancel_one(run_id, note, now)?;
            // Under the same lock: no child commits a step after its parent's cancel.
            let mut touched = vec![run_id.to_owned()];
            let mut parents = vec![run_id.to_owned()];
            while let Some(parent) = parents.pop() {
                for child in g.children_reached_by_cancel(&parent) {
                    let child_note = operator::child_cancel_note(&parent, note);
                    match g.cancel_one(&child, &child_note, now) {
                        Ok(_) | Err(StoreError::RunIsFinal { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    touched.push(child.clone());
                    parents.push(child);
                }
            }
            (record, touched)
        };
        self.work.notify_waiters();
        for id in &touched {
            self.events.wake(id);
        }
        Ok(record)
    }

    async fn terminate_run(
        &self,
        run_id: &str,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        let mut g = self.lock();
        g.run(run_id)?;
        let position = g.next_position();
        let data = g.run_mut(run_id)?;
        let record = match operator::plan_terminate(&data.record, note)? {
            OperatorPlan::Transition(t) => data.apply_operator(&t, now_ms(), position),
            OperatorPlan::Unchanged | OperatorPlan::RequestCancel => {
                return Ok(data.record.clone());
            }
        };
        drop(g);
        self.events.wake(run_id);
        Ok(record)
    }
}
