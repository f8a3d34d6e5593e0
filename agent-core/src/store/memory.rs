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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;

use super::events::{
    EventBuilder, EventCursor, EventScope, EventWakes, RunEvent, StatusChange, TransitionFacts,
    WakeHub,
};
use super::history::{self, VersionPayload};
use super::operator::{self, OperatorPlan, OperatorTransition};
use super::{
    CallStatus, Claimed, EventLog, HistoryStore, JournalEntry, Lease, MigrationCommit, Millis,
    NewRun, OperatorNote, OperatorStore, PruneReport, RepairCommit, RetentionPolicy, RunFailure,
    RunFilter, RunRecord, RunStatus, RunStore, SignalRecord, StateAtVersion, StepCommit,
    StoreError, ToolSwitch, TransitionKind, TransitionRecord, creation_hash, now_ms,
    transition_hash, validate_labels,
};
use crate::graph::GraphDescription;
use crate::store::WaitingFor;
use crate::tool::ToolKind;

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
}

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
        ids
    }
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

    fn run_mut(&mut self, run_id: &str) -> Result<&mut RunData, StoreError> {
        self.runs.get_mut(run_id).ok_or_else(|| not_found(run_id))
    }

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

    fn insert_run(&mut self, new: &NewRun, parent: Option<(String, u64)>) -> RunRecord {
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

impl RunData {
    /// The state at `version`, replayed from the nearest snapshot at or before it.
    fn state_at(&self, version: u64) -> Result<Option<StateAtVersion>, StoreError> {
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
    fn append_version(
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
        r.claims_without_progress = 0;
        r.updated_at = now;
    }

    /// Write an operator's transition.
    fn apply_operator(&mut self, t: &OperatorTransition, now: i64, position: u64) -> RunRecord {
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

    fn status_changed(&mut self, position: u64, now: i64) {
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

    /// The events of this run's records positioned at or after `from`.
    fn events(&self, log: &mut EventBuilder, from: u64, signals: &[(&SignalRecord, u64)]) {
        let agent = &self.record.agent;
        for v in self.versions.values().filter(|v| v.position >= from) {
            log.transition(agent, v.position, &v.transition, &v.facts);
        }
        for (key, (started, finished)) in &self.call_positions {
            let Some(entry) = self.journal.get(key) else {
                continue;
            };
            if *started >= from {
                log.call_started(agent, *started, entry);
            }
            if let Some(finished) = finished.filter(|f| *f >= from) {
                log.call_finished(agent, finished, *started, entry);
            }
        }
        for (signal, position) in signals.iter().filter(|(_, p)| *p >= from) {
            log.signal(agent, *position, signal);
        }
        for (position, change) in self.status_changes.iter().filter(|(p, _)| *p >= from) {
            log.status_change(agent, *position, change);
        }
    }

    fn fenced(&self, lease: &Lease) -> Result<(), StoreError> {
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

/// Whether a journal entry belongs to the run's saga log (needed to compensate later); the
/// children it started count too (a cancel of the run reaches them through it).
pub(crate) fn is_saga_entry(e: &JournalEntry) -> bool {
    use super::EntryKind;
    match e.kind {
        EntryKind::Compensation | EntryKind::Child => true,
        EntryKind::Tool => {
            e.tool_kind == Some(ToolKind::Hybrid) && e.status == CallStatus::Succeeded
        }
        EntryKind::Decision => false,
    }
}

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError> {
        let g = self.lock();
        Ok(g.graphs
            .iter()
            .filter(|((a, f), _)| a == agent && fingerprint.is_none_or(|want| want == f))
            .max_by_key(|(_, (_, seq))| *seq)
            .map(|(_, (graph, _))| graph.clone()))
    }

    async fn agents(&self) -> Result<Vec<String>, StoreError> {
        let g = self.lock();
        let mut names: Vec<String> = g.graphs.keys().map(|(a, _)| a.clone()).collect();
        names.dedup();
        Ok(names)
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock().runs.get(run_id).map(|d| d.record.clone()))
    }

    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let g = self.lock();
        let data = g.run(run_id)?;
        Ok(data
            .journal
            .values()
            .filter(|e| version.is_none_or(|v| e.version == v))
            .cloned()
            .collect())
    }

    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .versions
            .values()
            .map(|v| v.transition.clone())
            .collect())
    }

    async fn history_from(
        &self,
        run_id: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .versions
            .range(version..)
            .take(limit)
            .map(|(_, v)| v.transition.clone())
            .collect())
    }

    async fn journal_from(
        &self,
        run_id: &str,
        from: (u64, u32),
        limit: usize,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .journal
            .range(from..)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError> {
        let g = self.lock();
        g.run(run_id)?.state_at(version)
    }

    async fn fork(
        &self,
        run_id: &str,
        version: u64,
        new_id: &str,
    ) -> Result<RunRecord, StoreError> {
        let record = {
            let mut g = self.lock();
            let data = g.run(run_id)?;
            let at = data
                .state_at(version)?
                .ok_or_else(|| StoreError::NotFound(format!("{run_id}@{version}")))?;
            // The state at `version` is of the agent version the run was on then.
            let history: Vec<TransitionRecord> = data
                .versions
                .values()
                .map(|v| v.transition.clone())
                .collect();
            let (agent_version, fingerprint) =
                super::agent_version_at(&data.record, &history, version);
            let new = NewRun::new(
                new_id,
                data.record.agent.clone(),
                fingerprint,
                at.state_name,
                at.state,
            )
            .with_labels(data.record.labels.clone())
            .with_agent_version(agent_version);
            if let Some(existing) = g.runs.get(new_id) {
                return if existing.creation_hash == creation_hash(&new)
                    && existing.record.parent == Some((run_id.to_owned(), version))
                {
                    Ok(existing.record.clone())
                } else {
                    Err(StoreError::AlreadyExists(new_id.to_owned()))
                };
            }
            g.insert_run(&new, Some((run_id.to_owned(), version)))
        };
        self.work.notify_waiters();
        self.events.wake(&record.id);
        Ok(record)
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let g = self.lock();
        let mut runs: Vec<&RunData> = g
            .runs
            .values()
            .filter(|d| {
                filter.agent.as_ref().is_none_or(|a| *a == d.record.agent)
                    && (filter.spawned_by.as_ref()).is_none_or(|p| {
                        d.record.spawned_by.as_ref().is_some_and(|s| s.run_id == *p)
                    })
                    && (filter.statuses.is_empty() || filter.statuses.contains(&d.record.status))
                    && filter
                        .labels
                        .iter()
                        .all(|(k, v)| d.record.labels.get(k) == Some(v))
                    && filter
                        .created_after
                        .is_none_or(|t| d.record.created_at >= t)
                    && filter
                        .created_before
                        .is_none_or(|t| d.record.created_at < t)
                    && (filter.agent_version).is_none_or(|v| d.record.agent_version == v)
                    && (filter.fingerprint.as_ref()).is_none_or(|f| d.record.fingerprint == *f)
                    && (filter.after.as_ref()).is_none_or(|k| {
                        (d.record.created_at, d.record.id.as_str()) < (k.created_at, &k.id)
                    })
            })
            .collect();
        runs.sort_by(|a, b| {
            (b.record.created_at, &b.record.id).cmp(&(a.record.created_at, &a.record.id))
        });
        Ok(runs
            .into_iter()
            .take(filter.limit.unwrap_or(usize::MAX))
            .map(|d| d.record.clone())
            .collect())
    }

    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let g = self.lock();
        g.run(run_id)?;
        Ok(g.signals
            .values()
            .filter(|s| s.run_id == run_id && s.consumed_at_version.is_none())
            .cloned()
            .collect())
    }

    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError> {
        Ok(self.lock().tools.values().cloned().collect())
    }

    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError> {
        Ok(self.lock().tools.get(tool).is_none_or(|s| s.enabled))
    }

    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let g = self.lock();
        let data = g.run(run_id)?;
        let versions: u64 = data.versions.values().map(StoredVersion::bytes).sum();
        let journal: u64 = data
            .journal
            .values()
            .map(|e| serde_json::to_vec(e).map_or(0, |b| b.len() as u64))
            .sum();
        Ok(Some(versions + journal))
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
                    && super::claimable_by(agents, &r.agent, r.agent_version)
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
        let id = {
            let mut g = self.lock();
            g.run(run_id)?;
            g.next_signal += 1;
            let id = g.next_signal;
            let position = g.next_position();
            g.signal_positions.insert(id, position);
            g.signals.insert(
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
            id
        };
        self.work.notify_waiters();
        self.events.wake(run_id);
        Ok(id)
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
            let moved = data.record.status != RunStatus::Quarantined
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
                        kind: TransitionKind::Repair,
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

#[async_trait]
impl EventLog for MemoryStore {
    async fn events(
        &self,
        scope: &EventScope,
        after: EventCursor,
        limit: usize,
    ) -> Result<Vec<RunEvent>, StoreError> {
        let g = self.lock();
        let from = after.position();
        let mut log = EventBuilder::new();
        let mut of_run = |data: &RunData| {
            let signals: Vec<_> = g
                .signals
                .values()
                .filter(|s| s.run_id == data.record.id)
                .filter_map(|s| g.signal_positions.get(&s.id).map(|p| (s, *p)))
                .collect();
            data.events(&mut log, from, &signals);
        };
        match scope {
            EventScope::Run(id) => of_run(g.run(id)?),
            EventScope::Agent(_) | EventScope::All => g
                .runs
                .values()
                .filter(|d| scope.contains(&d.record.id, &d.record.agent))
                .for_each(of_run),
        }
        Ok(log.finish(after, limit))
    }

    async fn event_wakes(&self) -> Result<Option<EventWakes>, StoreError> {
        Ok(Some(self.events.subscribe()))
    }

    async fn event_head(&self) -> Result<EventCursor, StoreError> {
        Ok(EventCursor::after_position(self.lock().position))
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
