//! The worker's side ([`RunStore`]): creating and claiming runs, journaling and committing steps.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{Inner, MemoryStore, RunData, StoredVersion, lease_alive, ttl_ms};
use crate::graph::GraphDescription;
use crate::store::events::TransitionFacts;
use crate::store::history;
use crate::store::operator;
use crate::store::{
    CallStatus, Claimed, JournalEntry, Lease, MigrationCommit, Millis, NewRun, RunFailure,
    RunRecord, RunStatus, RunStore, SignalReceipt, SignalRecord, Spend, StepCommit, StoreError,
    TransitionKind, TransitionRecord, WaitingFor, check_signal_key, creation_hash, now_ms,
    transition_hash, validate_labels,
};

impl Inner {
    fn has_signal_for(&self, r: &RunRecord) -> bool {
        self.signals.values().any(|s| {
            s.run_id == r.id
                && s.consumed_at_version.is_none()
                && r.waiting_for.as_ref().is_none_or(|w| w.as_str() == s.name)
        })
    }

    /// Whether a parent waiting for its children may go on: see [`RunStore::claim_next`].
    fn children_done(&self, r: &RunRecord) -> bool {
        let first = match r.waiting_for {
            Some(WaitingFor::AllChildren) => false,
            Some(WaitingFor::FirstChild) => true,
            _ => return false,
        };
        let Some(version) = r.version.checked_sub(1) else {
            return false;
        };
        let mut statuses = (self.children.get(&r.id).into_iter().flatten())
            .filter_map(|id| self.runs.get(id))
            .map(|d| &d.record)
            .filter(|c| c.spawned_by.as_ref().is_some_and(|p| p.version == version))
            .map(|c| c.status);
        if first {
            let mut all_final = true;
            for status in statuses {
                if status == RunStatus::Completed {
                    return true;
                }
                all_final &= status.is_final();
            }
            all_final
        } else {
            statuses.all(RunStatus::is_final)
        }
    }

    pub(super) fn insert_run(&mut self, new: &NewRun, parent: Option<(String, u64)>) -> RunRecord {
        let now = now_ms();
        let hash = transition_hash("", &new.link());
        let transition = TransitionRecord {
            run_id: new.id.clone(),
            version: 0,
            from_state: new.state_name.clone(),
            to_state: new.state_name.clone(),
            kind: TransitionKind::Start,
            status: RunStatus::Running,
            epoch: 0,
            created_at: now,
            hash: hash.clone(),
            note: None,
        };
        let record = RunRecord {
            id: new.id.clone(),
            agent: new.agent.clone(),
            fingerprint: new.fingerprint.clone(),
            state_name: new.state_name.clone(),
            state: new.state.clone(),
            version: 0,
            status: RunStatus::Running,
            waiting_for: None,
            wake_at: None,
            error: None,
            epoch: 0,
            lease_owner: None,
            lease_expires_at: None,
            claims_without_progress: 0,
            parent,
            spawned_by: new.spawned_by.clone(),
            created_at: now,
            updated_at: now,
            labels: new.labels.clone(),
            cancel_requested: None,
            agent_version: new.agent_version,
            migrated_at_version: None,
            resume_base: None,
            spend: Spend::default(),
            budget: new.budget,
        };
        if let Some(by) = &new.spawned_by {
            (self.children.entry(by.run_id.clone()).or_default()).push(new.id.clone());
        }
        let (payload, since) = history::encode(None, &new.state, 0);
        let mut versions = BTreeMap::new();
        versions.insert(
            0,
            StoredVersion {
                payload,
                state_name: new.state_name.clone(),
                transition,
                position: self.next_position(),
                facts: TransitionFacts::default(),
            },
        );
        self.run_seq += 1;
        self.runs.insert(
            new.id.clone(),
            RunData {
                record: record.clone(),
                created_seq: self.run_seq,
                creation_hash: creation_hash(new),
                versions,
                patch_bytes_since_snapshot: since,
                last_hash: hash,
                journal: BTreeMap::new(),
                call_positions: BTreeMap::new(),
                status_changes: Vec::new(),
            },
        );
        record
    }

    fn claim(data: &mut RunData, worker: &str, ttl: Duration, now: i64) -> Claimed {
        let r = &mut data.record;
        r.epoch += 1;
        // Charged only when the previous claim was neither released nor committed through.
        if r.lease_owner.is_some() {
            r.claims_without_progress += 1;
        }
        r.lease_owner = Some(worker.to_owned());
        r.lease_expires_at = Some(now.saturating_add(ttl_ms(ttl)));
        r.updated_at = now;
        let lease = Lease {
            run_id: r.id.clone(),
            worker: worker.to_owned(),
            epoch: r.epoch,
            expires_at: now.saturating_add(ttl_ms(ttl)),
        };
        Claimed {
            lease,
            record: r.clone(),
            reads: None,
        }
    }
}

impl Inner {
    /// Store signal `name` for `run_id`: its id.
    fn store_signal(
        &mut self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        self.run(run_id)?;
        self.next_signal += 1;
        let id = self.next_signal;
        let position = self.next_position();
        self.signal_positions.insert(id, position);
        self.signals.insert(
            id,
            SignalRecord {
                id,
                run_id: run_id.to_owned(),
                name: name.to_owned(),
                payload: payload.clone(),
                created_at: now_ms(),
                consumed_at_version: None,
            },
        );
        Ok(id)
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
        let mut g = self.lock();
        let key = (graph.agent.clone(), graph.fingerprint());
        g.graph_seq += 1;
        let seq = g.graph_seq;
        g.graphs
            .entry(key)
            .and_modify(|e| e.1 = seq)
            .or_insert_with(|| (graph.clone(), seq));
        Ok(())
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        validate_labels(&run.labels)?;
        let record = {
            let mut g = self.lock();
            if let Some(existing) = g.runs.get(&run.id) {
                return if existing.creation_hash == creation_hash(&run) {
                    Ok(existing.record.clone())
                } else {
                    Err(StoreError::AlreadyExists(run.id))
                };
            }
            g.insert_run(&run, None)
        };
        self.work.notify_waiters();
        self.events.wake(&record.id);
        Ok(record)
    }

    async fn claim_run(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, StoreError> {
        let now = now_ms();
        let mut g = self.lock();
        let data = g.run_mut(run_id)?;
        let r = &data.record;
        if r.status.is_final() || (lease_alive(r, now) && r.lease_owner.as_deref() != Some(worker))
        {
            return Ok(None);
        }
        Ok(Some(Inner::claim(data, worker, ttl, now)))
    }

    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let now = now_ms();
        let mut g = self.lock();
        // Every run is looked at (there is no index), but only the `limit` oldest are
        // sorted and only their ids copied: a worker claims after every run it finishes.
        let mut ready: Vec<(i64, u64, &str)> = g
            .runs
            .values()
            .filter(|d| {
                let r = &d.record;
                let due = r.wake_at.is_none_or(|t| t <= now);
                // A run whose cancel is requested is claimed whatever it waits for: its
                // claimer writes the cancel.
                let runnable = r.cancel_requested.is_some()
                    || match r.status {
                        RunStatus::Running | RunStatus::Compensating => due,
                        RunStatus::Waiting => {
                            r.wake_at.is_some_and(|t| t <= now)
                                || g.has_signal_for(r)
                                || g.children_done(r)
                        }
                        _ => false,
                    };
                runnable
                    && !lease_alive(r, now)
                    && crate::store::claimable_by(agents, &r.agent, r.agent_version)
            })
            .map(|d| (d.record.created_at, d.created_seq, d.record.id.as_str()))
            .collect();
        if ready.len() > limit && limit > 0 {
            ready.select_nth_unstable(limit - 1);
        }
        ready.truncate(limit);
        ready.sort_unstable();
        let oldest: Vec<String> = ready.into_iter().map(|(_, _, id)| id.to_owned()).collect();
        let mut out = Vec::with_capacity(oldest.len());
        for id in oldest {
            let data = g.run_mut(&id)?;
            out.push(Inner::claim(data, worker, ttl, now));
        }
        Ok(out)
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let now = now_ms();
        let mut g = self.lock();
        let data = g.run_mut(&lease.run_id)?;
        data.fenced(lease)?;
        if data.record.lease_owner.as_deref() != Some(lease.worker.as_str()) {
            return Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            });
        }
        let expires_at = now.saturating_add(ttl_ms(ttl));
        data.record.lease_expires_at = Some(expires_at);
        Ok(Lease {
            expires_at,
            ..lease.clone()
        })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let released = {
            let mut g = self.lock();
            let data = g.run_mut(&lease.run_id)?;
            if data.record.epoch == lease.epoch && data.record.lease_owner.is_some() {
                data.record.lease_owner = None;
                data.record.lease_expires_at = None;
                // A worker that releases its lease did not crash in the step.
                data.record.claims_without_progress = 0;
                true
            } else {
                false
            }
        };
        if released {
            self.work.notify_waiters();
        }
        Ok(())
    }

    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut g = self.lock();
        let data = g.run_mut(&lease.run_id)?;
        let r = &mut data.record;
        if r.epoch == lease.epoch && r.lease_owner.is_some() {
            r.lease_owner = None;
            r.lease_expires_at = None;
        }
        Ok(())
    }

    async fn defer_run(
        &self,
        lease: &Lease,
        until: Millis,
        why: &WaitingFor,
    ) -> Result<bool, StoreError> {
        let mut g = self.lock();
        let data = g.run_mut(&lease.run_id)?;
        let r = &mut data.record;
        let deferred =
            r.epoch == lease.epoch && r.lease_owner.is_some() && r.status == RunStatus::Running;
        if deferred {
            r.lease_owner = None;
            r.lease_expires_at = None;
            r.wake_at = Some(until);
            r.waiting_for = Some(why.clone());
        }
        Ok(deferred)
    }

    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        let expired = {
            let mut g = self.lock();
            let mut n = 0;
            for data in g.runs.values_mut() {
                let r = &mut data.record;
                if !r.status.is_final()
                    && r.lease_owner.as_deref() == Some(worker)
                    && lease_alive(r, now)
                {
                    r.lease_expires_at = Some(now);
                    n += 1;
                }
            }
            n
        };
        if expired > 0 {
            self.work.notify_waiters();
        }
        Ok(expired)
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        let mut g = self.lock();
        let data = g.run_mut(&lease.run_id)?;
        data.fenced(lease)?;
        if entry.run_id != lease.run_id {
            return Err(StoreError::backend(format!(
                "journal entry of run `{}` recorded under the lease of run `{}`",
                entry.run_id, lease.run_id
            )));
        }
        let position = g.next_position();
        let data = g.run_mut(&lease.run_id)?;
        let key = (entry.version, entry.seq);
        let mut entry = entry.clone();
        if let Some(first) = data.journal.get(&key) {
            entry.started_at = first.started_at;
        }
        let status = entry.status;
        let previous = data.journal.insert(key, entry);
        // A call keeps the position of its first record; its end gets one when recorded
        // ended, and keeps it when recorded ended the same way again.
        let (_, finished) = data.call_positions.entry(key).or_insert((position, None));
        *finished = match previous {
            _ if status == CallStatus::Started => None,
            Some(p) if p.status == status && finished.is_some() => *finished,
            _ => Some(position),
        };
        drop(g);
        self.events.wake(&lease.run_id);
        Ok(())
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        // The memory store has no transaction to share: the entries are recorded first,
        // fenced by the lease, as the contract allows.
        for entry in entries {
            self.record_entry(lease, entry).await?;
        }
        let now = now_ms();
        let record = {
            let mut g = self.lock();
            if let Some(id) = commit.consumed_signal {
                let ok = g
                    .signals
                    .get(&id)
                    .is_some_and(|s| s.run_id == lease.run_id && s.consumed_at_version.is_none());
                // Checked after the CAS below would be nicer for the error, but nothing may be
                // written when the signal is not pending, so check first and report after.
                if !ok {
                    let data = g.run(&lease.run_id)?;
                    data.fenced(lease)?;
                    if data.record.version != commit.expected_version {
                        return Err(StoreError::Conflict {
                            run_id: lease.run_id.clone(),
                            expected: commit.expected_version,
                            found: data.record.version,
                        });
                    }
                    return Err(StoreError::backend(format!(
                        "signal {id} is not pending for run `{}`",
                        lease.run_id
                    )));
                }
            }
            let signals_of_commit = commit
                .consumed_signal
                .and_then(|id| g.signals.get(&id))
                .map(|s| s.name.clone());
            let position = g.next_position();
            let data = g.run_mut(&lease.run_id)?;
            data.fenced(lease)?;
            if data.record.version != commit.expected_version {
                return Err(StoreError::Conflict {
                    run_id: lease.run_id.clone(),
                    expected: commit.expected_version,
                    found: data.record.version,
                });
            }
            if data.record.cancel_requested.is_some() {
                return Err(StoreError::CancelRequested(lease.run_id.clone()));
            }
            let version = commit.expected_version + 1;
            let consumed = commit
                .consumed_signal
                .and_then(|id| signals_of_commit.as_ref().map(|name| (id, name.clone())));
            data.append_version(commit, lease.epoch, None, now, position, consumed);
            let r = &mut data.record;
            if commit.status.is_final() {
                // Nothing is left to do under the lease: it ends with the commit.
                r.lease_owner = None;
                r.lease_expires_at = None;
            }
            let record = r.clone();
            if let Some(id) = commit.consumed_signal
                && let Some(s) = g.signals.get_mut(&id)
            {
                s.consumed_at_version = Some(version);
            }
            record
        };
        self.work.notify_waiters();
        self.events.wake(&lease.run_id);
        Ok(record)
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        let id = self.lock().store_signal(run_id, name, payload)?;
        self.work.notify_waiters();
        self.events.wake(run_id);
        Ok(id)
    }

    async fn send_signal_once(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
        key: &str,
    ) -> Result<SignalReceipt, StoreError> {
        check_signal_key(key)?;
        let receipt = {
            let mut g = self.lock();
            g.run(run_id)?;
            let stored = (run_id.to_owned(), key.to_owned());
            if let Some(&id) = g.signal_keys.get(&stored) {
                return Ok(SignalReceipt {
                    id,
                    duplicate: true,
                });
            }
            let id = g.store_signal(run_id, name, payload)?;
            g.signal_keys.insert(stored, id);
            SignalReceipt {
                id,
                duplicate: false,
            }
        };
        self.work.notify_waiters();
        self.events.wake(run_id);
        Ok(receipt)
    }

    async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let mut g = self.lock();
        g.run(&lease.run_id)?.fenced(lease)?;
        let position = g.next_position();
        let data = g.run_mut(&lease.run_id)?;
        let r = &mut data.record;
        r.status = RunStatus::Quarantined;
        r.error = Some(error);
        r.lease_owner = None;
        r.lease_expires_at = None;
        r.updated_at = now;
        data.status_changed(position, now);
        let record = data.record.clone();
        drop(g);
        self.events.wake(&lease.run_id);
        Ok(record)
    }

    async fn migrate_run(
        &self,
        lease: &Lease,
        commit: &MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        let now = now_ms();
        let record = {
            let mut g = self.lock();
            let data = g.run(&lease.run_id)?;
            if let Some(refused) = commit.refusal(&data.record, lease.epoch) {
                return Err(refused);
            }
            let position = g.next_position();
            let data = g.run_mut(&lease.run_id)?;
            let t = commit.transition(lease.epoch);
            data.append_version(&t.commit, t.epoch, Some(&t.note), now, position, None);
            let r = &mut data.record;
            r.agent_version = commit.to_agent_version;
            r.fingerprint.clone_from(&commit.fingerprint);
            r.migrated_at_version = Some(commit.version());
            r.resume_base = commit.resume_base;
            r.clone()
        };
        self.work.notify_waiters();
        self.events.wake(&lease.run_id);
        Ok(record)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.work.notified()).await;
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let now = now_ms();
        let g = self.lock();
        let due = g
            .runs
            .values()
            .map(|d| &d.record)
            .filter(|r| !r.status.is_final())
            .flat_map(|r| {
                let lease = r.lease_owner.as_ref().and(r.lease_expires_at);
                [lease, r.wake_at]
            })
            .flatten()
            .filter(|&at| at > now)
            .min();
        Ok(due.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0))))
    }

    async fn accept_cancel(&self, lease: &Lease) -> Result<RunRecord, StoreError> {
        let mut g = self.lock();
        g.run(&lease.run_id)?;
        let position = g.next_position();
        let data = g.run_mut(&lease.run_id)?;
        let t = operator::plan_accept_cancel(&data.record, lease)?;
        let record = data.apply_operator(&t, now_ms(), position);
        drop(g);
        self.events.wake(&lease.run_id);
        Ok(record)
    }
}
