//! Deliberately broken stores, to prove that each check catches the flaw it is about.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::store_checks as checks;
use agent_core::graph::GraphDescription;
use agent_core::store::memory::MemoryStore;
use agent_core::store::{
    Claimed, EventLog, HistoryStore, JournalEntry, Lease, NewRun, OperatorNote, OperatorStore,
    PruneReport, RepairCommit, RetentionPolicy, RunFailure, RunFilter, RunRecord, RunStatus,
    RunStore, SignalReceipt, SignalRecord, StateAtVersion, StepCommit, StoreError, ToolSwitch,
    TransitionRecord,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    /// `commit_step` commits onto whatever version is current (no compare-and-set).
    NoVersionCheck,
    /// Fenced writes use the current epoch instead of the caller's.
    IgnoresEpoch,
    /// `claim_run` and `claim_next` take runs under a live lease.
    StealsLiveLeases,
    /// Reports storage as a full copy of the state per version.
    FullCopies,
    /// Drops signals sent while the run is not waiting for them.
    DropsEarlySignals,
    /// Panics on a history payload that does not replay.
    PanicsOnCorrupt,
    /// Prunes by deleting every version but the current, without rewriting a snapshot.
    PrunesEverything,
    /// Replacing a journal entry appends instead.
    AppendsJournal,
    /// Claims do not count and do not bump the epoch.
    StaticEpoch,
    /// `hand_back` is `release_lease`: the claim still counts.
    HandBackCounts,
    /// `expire_leases_of` expires every worker's leases.
    ExpiresEveryone,
    /// A commit to a final status leaves the lease held.
    FinalCommitKeepsLease,
    /// A cancel of a run under a live lease is written at once, under the holder's epoch,
    /// instead of waiting for the holder: the holder's next commits still apply.
    CancelsUnderTheHoldersEpoch,
    /// `list_runs` ignores the label filter.
    IgnoresLabels,
    /// `list_runs` orders the runs of one millisecond by creation, not by id.
    ListsTiesByCreation,
    /// `list_runs` lists the run at the key again after it.
    ListsTheKeyAgain,
    /// `events` reads from its cursor inclusive: the event at the cursor comes again.
    EventsRepeatTheCursor,
    /// `events` leaves out the starts of tool calls.
    EventsLoseCallStarts,
    /// `send_signal_once` ignores its key: every send stores a signal.
    SignalsEveryKeyedSend,
}

#[derive(Debug)]
struct Broken {
    inner: MemoryStore,
    flaw: Flaw,
    dropped: std::sync::Mutex<Vec<i64>>,
}

impl Broken {
    fn new(flaw: Flaw) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(),
            flaw,
            dropped: std::sync::Mutex::default(),
        })
    }

    async fn current_epoch(&self, lease: &Lease) -> Lease {
        match self.inner.load_run(&lease.run_id).await {
            Ok(Some(r)) => Lease {
                epoch: r.epoch,
                ..lease.clone()
            },
            _ => lease.clone(),
        }
    }
}

#[async_trait]
impl HistoryStore for Broken {
    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError> {
        self.inner.agent_graph(agent, fingerprint).await
    }

    async fn agents(&self) -> Result<Vec<String>, StoreError> {
        self.inner.agents().await
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.inner.load_run(run_id).await
    }

    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        self.inner.journal(run_id, version).await
    }

    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        self.inner.history(run_id).await
    }

    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError> {
        let got = self.inner.state_at(run_id, version).await;
        if self.flaw == Flaw::PanicsOnCorrupt {
            return Ok(Some(got.expect("history replays")).flatten());
        }
        got
    }

    async fn fork(
        &self,
        run_id: &str,
        version: u64,
        new_id: &str,
    ) -> Result<RunRecord, StoreError> {
        self.inner.fork(run_id, version, new_id).await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        if self.flaw == Flaw::IgnoresLabels {
            let unlabelled = RunFilter {
                labels: agent_core::store::Labels::new(),
                ..filter.clone()
            };
            return self.inner.list_runs(&unlabelled).await;
        }
        if self.flaw == Flaw::ListsTiesByCreation {
            // Created in the reverse order of their ids: within a millisecond, creation
            // order is the ids' ascending order.
            let mut runs = self.inner.list_runs(filter).await?;
            runs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
            return Ok(runs);
        }
        if self.flaw == Flaw::ListsTheKeyAgain
            && let Some(key) = &filter.after
        {
            let mut runs = self.inner.list_runs(filter).await?;
            if let Some(at_key) = self.inner.load_run(&key.id).await? {
                runs.insert(0, at_key);
                runs.truncate(filter.limit.unwrap_or(usize::MAX));
            }
            return Ok(runs);
        }
        self.inner.list_runs(filter).await
    }

    async fn signal_by_key(&self, run_id: &str, key: &str) -> Result<Option<i64>, StoreError> {
        self.inner.signal_by_key(run_id, key).await
    }

    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let dropped = self
            .dropped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut pending = self.inner.pending_signals(run_id).await?;
        pending.retain(|s| !dropped.contains(&s.id));
        Ok(pending)
    }

    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError> {
        self.inner.tool_switches().await
    }

    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError> {
        self.inner.tool_enabled(tool).await
    }

    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        if self.flaw != Flaw::FullCopies {
            return self.inner.storage_bytes(run_id).await;
        }
        let mut total = 0;
        for t in self.inner.history(run_id).await? {
            if let Some(s) = self.inner.state_at(run_id, t.version).await? {
                total += serde_json::to_vec(&s.state).map_or(0, |b| b.len() as u64);
            }
        }
        Ok(Some(total))
    }
}

#[async_trait]
impl RunStore for Broken {
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError> {
        self.inner.register_agent(graph).await
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.inner.create_run(run).await
    }

    async fn claim_run(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, StoreError> {
        match self.flaw {
            Flaw::StealsLiveLeases => {
                // Forget the current holder, then claim.
                if let Some(r) = self.inner.load_run(run_id).await? {
                    let l = Lease {
                        run_id: run_id.into(),
                        worker: r.lease_owner.unwrap_or_default(),
                        epoch: r.epoch,
                        expires_at: 0,
                    };
                    self.inner.release_lease(&l).await?;
                }
                self.inner.claim_run(run_id, worker, ttl).await
            }
            Flaw::StaticEpoch => {
                let before = self.inner.load_run(run_id).await?;
                let got = self.inner.claim_run(run_id, worker, ttl).await?;
                Ok(got.map(|mut c| {
                    let e = before.map_or(0, |b| b.epoch);
                    c.lease.epoch = e;
                    c.record.epoch = e;
                    c
                }))
            }
            _ => self.inner.claim_run(run_id, worker, ttl).await,
        }
    }

    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        if self.flaw == Flaw::StealsLiveLeases {
            let mut out = Vec::new();
            for r in self.inner.list_runs(&RunFilter::default()).await? {
                if out.len() < limit
                    && r.status.is_runnable()
                    && (agents.is_empty() || agents.contains(&r.agent))
                    && let Some(c) = self.claim_run(&r.id, worker, ttl).await?
                {
                    out.push(c);
                }
            }
            return Ok(out);
        }
        self.inner.claim_next(agents, worker, ttl, limit).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        if self.flaw == Flaw::IgnoresEpoch {
            return self
                .inner
                .renew_lease(&self.current_epoch(lease).await, ttl)
                .await;
        }
        self.inner.renew_lease(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release_lease(lease).await
    }

    async fn defer_run(
        &self,
        lease: &Lease,
        until: agent_core::store::Millis,
        why: &agent_core::store::WaitingFor,
    ) -> Result<bool, StoreError> {
        self.inner.defer_run(lease, until, why).await
    }

    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError> {
        if self.flaw == Flaw::HandBackCounts {
            return self.inner.release_lease(lease).await;
        }
        self.inner.hand_back(lease).await
    }

    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
        if self.flaw != Flaw::ExpiresEveryone {
            return self.inner.expire_leases_of(worker).await;
        }
        let mut expired = 0;
        for run in self.inner.list_runs(&RunFilter::default()).await? {
            if let Some(owner) = &run.lease_owner {
                expired += self.inner.expire_leases_of(owner).await?;
            }
        }
        Ok(expired)
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        match self.flaw {
            Flaw::IgnoresEpoch => {
                self.inner
                    .record_entry(&self.current_epoch(lease).await, entry)
                    .await
            }
            Flaw::AppendsJournal => {
                let existing = self
                    .inner
                    .journal(&entry.run_id, Some(entry.version))
                    .await?;
                let mut e = entry.clone();
                if existing.iter().any(|x| x.seq == e.seq) {
                    e.seq = existing.iter().map(|x| x.seq).max().unwrap_or(0) + 1;
                }
                self.inner.record_entry(lease, &e).await
            }
            _ => self.inner.record_entry(lease, entry).await,
        }
    }

    async fn migrate_run(
        &self,
        lease: &Lease,
        commit: &agent_core::store::MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        self.inner.migrate_run(lease, commit).await
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        match self.flaw {
            Flaw::NoVersionCheck => {
                let mut c = commit.clone();
                if let Some(r) = self.inner.load_run(&lease.run_id).await? {
                    c.expected_version = r.version;
                }
                self.inner.commit_step(lease, &c, entries).await
            }
            Flaw::IgnoresEpoch => {
                self.inner
                    .commit_step(&self.current_epoch(lease).await, commit, entries)
                    .await
            }
            Flaw::FinalCommitKeepsLease => {
                let mut record = self.inner.commit_step(lease, commit, entries).await?;
                record.lease_owner = Some(lease.worker.clone());
                record.lease_expires_at = Some(lease.expires_at);
                Ok(record)
            }
            _ => self.inner.commit_step(lease, commit, entries).await,
        }
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        let id = self.inner.send_signal(run_id, name, payload).await?;
        if self.flaw == Flaw::DropsEarlySignals {
            let r = self.inner.load_run(run_id).await?;
            if r.is_some_and(|r| {
                r.waiting_for
                    .as_ref()
                    .and_then(agent_core::store::WaitingFor::signal_name)
                    != Some(name)
            }) {
                self.dropped
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(id);
            }
        }
        Ok(id)
    }

    async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
        if self.flaw == Flaw::IgnoresEpoch {
            return self
                .inner
                .quarantine(&self.current_epoch(lease).await, error)
                .await;
        }
        self.inner.quarantine(lease, error).await
    }

    async fn send_signal_once(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
        key: &str,
    ) -> Result<SignalReceipt, StoreError> {
        if self.flaw == Flaw::SignalsEveryKeyedSend {
            let id = self.inner.send_signal(run_id, name, payload).await?;
            return Ok(SignalReceipt {
                id,
                duplicate: false,
            });
        }
        self.inner
            .send_signal_once(run_id, name, payload, key)
            .await
    }

    async fn accept_cancel(&self, lease: &Lease) -> Result<RunRecord, StoreError> {
        self.inner.accept_cancel(lease).await
    }
}

#[async_trait]
impl OperatorStore for Broken {
    async fn repair_run(&self, commit: &RepairCommit) -> Result<RunRecord, StoreError> {
        self.inner.repair_run(commit).await
    }

    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunFailure>,
    ) -> Result<RunRecord, StoreError> {
        self.inner.set_status(run_id, status, error).await
    }

    async fn cancel_run(&self, run_id: &str, note: &OperatorNote) -> Result<RunRecord, StoreError> {
        let record = self.inner.cancel_run(run_id, note).await?;
        if self.flaw == Flaw::CancelsUnderTheHoldersEpoch
            && let (Some(_), Some(owner)) = (&record.cancel_requested, &record.lease_owner)
        {
            let lease = Lease {
                run_id: run_id.to_owned(),
                worker: owner.clone(),
                epoch: record.epoch,
                expires_at: record.lease_expires_at.unwrap_or_default(),
            };
            return self.inner.accept_cancel(&lease).await;
        }
        Ok(record)
    }

    async fn terminate_run(
        &self,
        run_id: &str,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        self.inner.terminate_run(run_id, note).await
    }

    async fn drop_signal(
        &self,
        run_id: &str,
        signal_id: i64,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError> {
        self.inner.drop_signal(run_id, signal_id, note).await
    }

    async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError> {
        if self.flaw == Flaw::PrunesEverything {
            let mut everything = policy.clone();
            everything.keep_last_versions = 1;
            return self.inner.prune(&everything).await;
        }
        self.inner.prune(policy).await
    }

    async fn set_tool_enabled(
        &self,
        tool: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner.set_tool_enabled(tool, enabled, reason).await
    }

    async fn set_budget(
        &self,
        run_id: &str,
        budget: Option<agent_core::store::Budget>,
    ) -> Result<RunRecord, StoreError> {
        self.inner.set_budget(run_id, budget).await
    }
}

#[async_trait]
impl EventLog for Broken {
    async fn events(
        &self,
        scope: &agent_core::store::EventScope,
        after: agent_core::store::EventCursor,
        limit: usize,
    ) -> Result<Vec<agent_core::store::RunEvent>, StoreError> {
        match self.flaw {
            Flaw::EventsRepeatTheCursor => {
                let all = self
                    .inner
                    .events(scope, agent_core::store::EventCursor::START, usize::MAX)
                    .await?;
                Ok(all
                    .into_iter()
                    .filter(|e| e.cursor >= after)
                    .take(limit)
                    .collect())
            }
            Flaw::EventsLoseCallStarts => {
                let mut events = self.inner.events(scope, after, limit).await?;
                events.retain(|e| {
                    !matches!(e.kind, agent_core::store::EventKind::ToolStarted { .. })
                });
                Ok(events)
            }
            _ => self.inner.events(scope, after, limit).await,
        }
    }

    async fn event_wakes(&self) -> Result<Option<agent_core::store::EventWakes>, StoreError> {
        self.inner.event_wakes().await
    }
}

fn fails(flaw: Flaw, check: &str, result: checks::CheckResult) {
    match result {
        Err(e) => eprintln!("{flaw:?} caught by {check}: {e}"),
        Ok(()) => panic!("{check} did not catch a store with flaw {flaw:?}"),
    }
}

macro_rules! catches {
    ($name:ident, $flaw:ident, $check:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let store = Broken::new(Flaw::$flaw);
            fails(Flaw::$flaw, stringify!($check), checks::$check(store).await);
        }
    };
}

catches!(
    version_check_is_needed,
    NoVersionCheck,
    check_version_chain_single_winner
);
catches!(
    epoch_fencing_is_needed,
    IgnoresEpoch,
    check_stale_epoch_is_fenced
);
catches!(
    reclaim_fencing_is_needed,
    IgnoresEpoch,
    check_commits_across_a_reclaim
);
catches!(
    quarantine_must_be_fenced,
    IgnoresEpoch,
    check_quarantine_is_fenced
);
catches!(
    live_leases_must_block,
    StealsLiveLeases,
    check_live_lease_blocks_and_expired_lease_is_reclaimed
);
catches!(
    live_leases_must_block_claim_next,
    StealsLiveLeases,
    check_claim_next_selects_runnable_runs
);
catches!(
    storage_must_be_linear,
    FullCopies,
    check_storage_grows_linearly
);
catches!(
    early_signals_must_be_kept,
    DropsEarlySignals,
    check_signals_kept_and_consumed_once
);
catches!(
    prune_must_keep_last_versions,
    PrunesEverything,
    check_prune_keeps_resume_working
);
catches!(
    journal_replace_must_replace,
    AppendsJournal,
    check_journal_is_durable_and_ordered
);
catches!(
    claims_must_bump_the_epoch,
    StaticEpoch,
    check_live_lease_blocks_and_expired_lease_is_reclaimed
);
catches!(
    final_commit_must_end_the_lease,
    FinalCommitKeepsLease,
    check_final_commit_ends_the_lease
);
catches!(
    expiring_must_keep_to_one_worker,
    ExpiresEveryone,
    check_expire_leases_of_frees_one_workers_runs
);
catches!(
    cancel_must_wait_for_the_holder,
    CancelsUnderTheHoldersEpoch,
    check_cancel_of_a_leased_run_waits_for_its_holder
);
catches!(
    cancel_must_not_interleave_with_commits,
    CancelsUnderTheHoldersEpoch,
    check_cancel_racing_a_commit
);
catches!(labels_must_filter, IgnoresLabels, check_labels_filter_runs);
catches!(
    listing_must_break_ties_by_id,
    ListsTiesByCreation,
    check_list_runs_keyset
);
catches!(
    keyset_must_start_after_the_key,
    ListsTheKeyAgain,
    check_list_runs_keyset
);
catches!(
    hand_back_must_not_count,
    HandBackCounts,
    check_hand_back_does_not_count_the_claim
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_data_must_not_panic() {
    let store = Broken::new(Flaw::PanicsOnCorrupt);
    let corrupter = store.clone();
    let result = checks::check_corrupt_data_is_an_error(store, move |id: String| async move {
        agent_core::__private::corrupt_memory_store(&corrupter.inner, &id);
    })
    .await;
    fails(
        Flaw::PanicsOnCorrupt,
        "check_corrupt_data_is_an_error",
        result,
    );
}
catches!(
    events_must_resume_after_the_cursor,
    EventsRepeatTheCursor,
    check_events_resume_from_any_cursor
);
catches!(
    events_must_follow_every_record,
    EventsLoseCallStarts,
    check_events_follow_the_records
);
catches!(
    keyed_signals_must_be_stored_once,
    SignalsEveryKeyedSend,
    check_keyed_signals_stored_once
);

// Schedules are kept by the wrapped store, unchanged.
agent_core::forward_schedule_store!(Broken => inner);
agent_core::forward_limit_store!(Broken => inner);
