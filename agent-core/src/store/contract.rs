//! The store contract (see the [module docs](super)), by role: [`RunStore`] drives runs,
//! [`HistoryStore`] reads what was stored and branches from it, [`OperatorStore`] acts on
//! runs for a person, [`EventLog`] follows what was committed, [`ScheduleStore`] keeps
//! the schedules that start runs, [`LimitStore`] the rate limits every worker shares.
//! [`Store`] is their sum, and every backend implements all six; code that needs one role asks for that one, so a
//! page that only reads takes a [`HistoryStore`] and cannot move a run.
//!
//! Every method documents what it guarantees; the conformance suite (the crate
//! `durable-agents-conformance`) checks each guarantee for every backend.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    Budget, Claimed, DAY_MS, DaySpend, EventCursor, EventScope, EventWakes, InspectedRun,
    JournalEntry, LabelValueCount, Lease, LimitStore, MigrationCommit, Millis, NewRun,
    OperatorNote, PruneReport, RepairCommit, RetentionPolicy, RunEvent, RunFailure, RunFilter,
    RunRecord, RunStatus, ScheduleStore, SignalReceipt, SignalRecord, Spend, StateAtVersion,
    StepCommit, StoreError, ToolStats, ToolSwitch, TransitionRecord, VersionCount, VersionSpan,
    compute_tool_stats,
};
use crate::graph::GraphDescription;

/// The durable storage of runs: all its roles. The runner, `agentctl` and the HTTP service
/// take an `Arc<dyn Store>`; it coerces to any one role (`Arc<dyn HistoryStore>`). A store
/// implements the roles, never this trait, which every type implementing them has.
///
/// Schedules are a role of every store, not an option: a schedule's ticks start runs in
/// the same store, and the operators' tools (`agentctl`, the API), which hold a `Store`,
/// manage them there. So are rate limits: they hold only if every worker draws from the
/// same ones.
pub trait Store: RunStore + OperatorStore + EventLog + ScheduleStore + LimitStore {}

impl<T: RunStore + OperatorStore + EventLog + ScheduleStore + LimitStore + ?Sized> Store for T {}

/// What was stored, read back: runs, their histories, journals, signals and the agents'
/// graphs, and time travel (the state at a version, a fork from it). Reads never change a
/// run; [`fork`](Self::fork) creates a new one and leaves its source as it was.
#[async_trait]
pub trait HistoryStore: Send + Sync + fmt::Debug {
    /// Names of the registered agents, sorted.
    async fn agents(&self) -> Result<Vec<String>, StoreError>;

    /// The most recently registered graph of an agent, or the one with this fingerprint.
    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError>;

    /// The run, or `None`.
    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// The run's row as far as it reads, to diagnose a run whose record does not (where
    /// [`load_run`](Self::load_run) says [`StoreError::Corrupt`]): every field that reads as
    /// stored, the state `Null`, and why the rest does not. `None`: no such run. `agentctl
    /// show` and `verify` use it; nothing may execute from it. The default is `load_run`,
    /// for stores whose records always read.
    async fn inspect_run(&self, run_id: &str) -> Result<Option<InspectedRun>, StoreError> {
        Ok(self.load_run(run_id).await?.map(|record| InspectedRun {
            record,
            unreadable: None,
        }))
    }

    /// Runs matching the filter, in [`RunFilter`]'s order (newest first, then by id
    /// descending): of its agent, in one of its statuses, spawned by
    /// [`RunFilter::spawned_by`], carrying every label of [`RunFilter::labels`] (SQL stores
    /// answer it from an index on `(key, value)`), and after [`RunFilter::after`] (SQL
    /// stores seek to it in an index on the order, so a page reads its own runs only). A
    /// row that cannot be read is listed as [`RunRecord::unreadable`], not as an error for
    /// the whole listing.
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;

    /// How many runs match the filter, per status (statuses with no run left out, in
    /// [`RunStatus::ALL`]'s order). [`RunFilter::limit`] and [`RunFilter::after`] are
    /// ignored: this counts them all. The default lists the runs; SQL stores count in the
    /// database.
    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let all = RunFilter {
            limit: None,
            after: None,
            ..filter.clone()
        };
        let runs = self.list_runs(&all).await?;
        Ok(RunStatus::ALL
            .into_iter()
            .map(|s| (s, runs.iter().filter(|r| r.status == s).count() as u64))
            .filter(|(_, n)| *n > 0)
            .collect())
    }

    /// How many runs match the filter, per agent version and recorded graph fingerprint,
    /// ordered by both. [`RunFilter::limit`] and [`RunFilter::after`] are ignored: this
    /// counts them all. The default lists the runs; SQL stores count in the database, so that a worker's start-up
    /// report ([`Worker::version_report`](crate::runner::Worker::version_report)) reads no
    /// run however many wait.
    async fn count_versions(&self, filter: &RunFilter) -> Result<Vec<VersionCount>, StoreError> {
        let all = RunFilter {
            limit: None,
            after: None,
            ..filter.clone()
        };
        let mut counts = std::collections::BTreeMap::<(u32, String), u64>::new();
        for run in self.list_runs(&all).await? {
            *counts
                .entry((run.agent_version, run.fingerprint))
                .or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((agent_version, fingerprint), runs)| VersionCount {
                agent_version,
                fingerprint,
                runs,
            })
            .collect())
    }

    /// What the runs matching the filter spent, per agent and UTC day of their creation,
    /// ordered by both: each run's total so far counts on the day it was created.
    /// [`RunFilter::limit`] and [`RunFilter::after`] are ignored. The default lists the
    /// runs; SQL stores sum in the database.
    async fn spend_by_day(&self, filter: &RunFilter) -> Result<Vec<DaySpend>, StoreError> {
        let all = RunFilter {
            limit: None,
            after: None,
            ..filter.clone()
        };
        let mut days = std::collections::BTreeMap::<(String, Millis), (u64, Spend)>::new();
        for run in self.list_runs(&all).await? {
            let day = run.created_at.div_euclid(DAY_MS) * DAY_MS;
            let (runs, spend) = days.entry((run.agent, day)).or_default();
            *runs += 1;
            *spend = spend.plus(run.spend);
        }
        Ok(days
            .into_iter()
            .map(|((agent, day), (runs, spend))| DaySpend {
                agent,
                day,
                runs,
                spend,
            })
            .collect())
    }

    /// The values of label `key` on the runs matching the filter, by value, each with how
    /// many runs carry it and when the newest was created: which triggers started runs
    /// (`key` = `trigger`), which schedules, which tenants. [`RunFilter::limit`] and
    /// [`RunFilter::after`] are ignored: this counts them all. The default lists the runs;
    /// SQL stores count in the database, from the index on the labels' `(key, value)`.
    async fn count_label_values(
        &self,
        key: &str,
        filter: &RunFilter,
    ) -> Result<Vec<LabelValueCount>, StoreError> {
        let all = RunFilter {
            limit: None,
            after: None,
            ..filter.clone()
        };
        let mut counts = std::collections::BTreeMap::<String, (u64, Millis)>::new();
        for run in self.list_runs(&all).await? {
            if let Some(value) = run.labels.get(key) {
                let (runs, last) = counts.entry(value.clone()).or_insert((0, run.created_at));
                *runs += 1;
                *last = (*last).max(run.created_at);
            }
        }
        Ok(counts
            .into_iter()
            .map(|(value, (runs, last_created_at))| LabelValueCount {
                value,
                runs,
                last_created_at,
            })
            .collect())
    }

    /// Every committed transition of a run, by version.
    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError>;

    /// At most `limit` of a run's transitions from `version` on, by version: a page of
    /// [`history`](Self::history), whose cost is its own transitions. The default reads
    /// the whole history; SQL stores read the page only.
    async fn history_from(
        &self,
        run_id: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let mut history = self.history(run_id).await?;
        history.retain(|t| t.version >= version);
        history.truncate(limit);
        Ok(history)
    }

    /// The first and last stored versions of a run and how many there are, or `None` when
    /// it has none. A consistent run has `last == run.version` and
    /// `count == last - first + 1` (`first > 0` only after pruning). The runner checks it
    /// when it claims a run, so a regressed or gapped history (a restored backup, a manual
    /// edit) is quarantined before any tool call. The default reads the whole history.
    async fn version_span(&self, run_id: &str) -> Result<Option<VersionSpan>, StoreError> {
        let history = self.history(run_id).await?;
        Ok(match (history.first(), history.last()) {
            (Some(first), Some(last)) => Some(VersionSpan {
                first: first.version,
                last: last.version,
                count: history.len() as u64,
            }),
            _ => None,
        })
    }

    /// The state at `version` (time travel); `None` if never committed or pruned.
    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError>;

    /// A new run `new_id` starting at version 0 from `run_id`'s state at `version`.
    async fn fork(&self, run_id: &str, version: u64, new_id: &str)
    -> Result<RunRecord, StoreError>;

    /// The journal of a run, ordered by `(version, seq)`; only `version` when given.
    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError>;

    /// At most `limit` entries of a run's journal from `(version, seq)` on, ordered by
    /// `(version, seq)`: a page of [`journal`](Self::journal), whose cost is its own
    /// entries (the next page starts after the last entry's `(version, seq)`). The
    /// default reads the whole journal; SQL stores read the page only.
    async fn journal_from(
        &self,
        run_id: &str,
        from: (u64, u32),
        limit: usize,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let mut entries = self.journal(run_id, None).await?;
        entries.retain(|e| (e.version, e.seq) >= from);
        entries.truncate(limit);
        Ok(entries)
    }

    /// Signals of a run not yet consumed, oldest first.
    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError>;

    /// The id of the signal stored for `run_id` under dedup `key`
    /// ([`RunStore::send_signal_once`]), consumed or not; `None` when there is none. A
    /// sender asks it before checking a keyed signal against the run, so that a message
    /// redelivered after its signal was consumed is a duplicate, not a signal the run no
    /// longer waits for.
    async fn signal_by_key(&self, run_id: &str, key: &str) -> Result<Option<i64>, StoreError>;

    /// The tool registry.
    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError>;

    /// Whether a tool may be called (tools never switched are enabled).
    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError>;

    /// Per-tool call statistics over the calls started at or after `since`: count,
    /// failures by error code, average, p50 and p99 duration. SQL backends compute it in
    /// SQL; the default reads every run's journal.
    async fn tool_stats(&self, since: Millis) -> Result<Vec<ToolStats>, StoreError> {
        let runs = self.list_runs(&RunFilter::default()).await?;
        let mut entries = Vec::new();
        for run in runs {
            entries.extend(self.journal(&run.id, None).await?);
        }
        Ok(compute_tool_stats(&entries, since))
    }

    /// Bytes used by this run's rows (state versions, journal, outputs), for the
    /// storage-growth check; `None` when the backend cannot tell.
    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let _ = run_id;
        Ok(None)
    }
}

/// What the runner needs to drive runs: create them, claim them under a lease, journal
/// their tool calls, commit their steps, and the few writes a step may end in instead
/// (quarantine, migration, an accepted cancel). Driving a run reads it, so a `RunStore` is
/// a [`HistoryStore`].
#[async_trait]
pub trait RunStore: HistoryStore {
    /// Store an agent's graph under `(agent, fingerprint)`; idempotent. Lets tools without
    /// the agent's code (`agentctl`) draw it.
    async fn register_agent(&self, graph: &GraphDescription) -> Result<(), StoreError>;

    /// Create a run at version 0 (status running), recording the `start` transition, with
    /// its labels ([`NewRun::with_label`]), which are checked first
    /// ([`validate_labels`](super::validate_labels)).
    /// Idempotent on `id`: creating an existing run with the same agent, initial state,
    /// labels and parent ([`NewRun::spawned_by`]) returns it unchanged; with other content,
    /// [`StoreError::AlreadyExists`]. A child run keeps its parent in
    /// [`RunRecord::spawned_by`].
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError>;

    /// Take the run's lease for `worker` if it is free, expired, or already `worker`'s, and
    /// read what its resumption reads first ([`Claimed::reads`]: its version span, whether
    /// its journal has entries at its version, its pending signals) in the same call, so
    /// that resuming a run costs no statement of its own. `reads` may be `None` for a store
    /// that cannot read them with the claim; the runner then reads them itself.
    ///
    /// Every successful claim increments the epoch (fencing any earlier holder); one that
    /// takes the lease over from a holder that neither released nor committed through it
    /// (expired, or `worker`'s own) increments `claims_without_progress`, so each lost
    /// claim is charged once, and a claim that lands after its worker died costs nothing
    /// until another claim finds it lost. Returns `None` while another worker holds a live
    /// lease, or when the run is final. A run whose row does not read is quarantined in the same
    /// call (code [`ROW_UNREADABLE`](super::ROW_UNREADABLE), lease ended) and
    /// [`StoreError::Corrupt`] returned: nobody can execute it, and listings then say so.
    async fn claim_run(
        &self,
        run_id: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, StoreError>;

    /// Claim up to `limit` runnable runs of these agents (running or compensating; waiting
    /// runs whose signal has arrived or whose `wake_at` passed; parents waiting for their
    /// children once the wait holds, see below) whose lease is free or expired, oldest
    /// first, skipping runs locked by other claimers, each with what its resumption reads
    /// first, as [`claim_run`](Self::claim_run) reads it: a batch of runs resumes on one
    /// statement instead of one or more per run.
    ///
    /// A run waiting for [`WAIT_ALL_CHILDREN`](super::WAIT_ALL_CHILDREN) is claimable when no run spawned by it at
    /// `version - 1` is in a status that is not final; for
    /// [`WAIT_FIRST_CHILD`](super::WAIT_FIRST_CHILD), also as
    /// soon as one of them is completed. Nothing is written when a child commits: the
    /// parent is found by this query, so it is woken once. Each claim counts as in
    /// [`claim_run`](Self::claim_run). A run whose row does not read is quarantined as
    /// there and left out: one bad run never keeps the others from being claimed.
    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError>;

    /// [`create_run`](Self::create_run), the new run claimed by `worker` as
    /// [`claim_run`](Self::claim_run) would claim it: for a caller that
    /// creates a run to drive it at once ([`Runner::start_and_run`]), so that no other
    /// worker takes it in between and the claim costs no statement of its own. Nobody is
    /// woken for the new run: it is held.
    ///
    /// A run of this id created from the same request is claimed as `claim_run`
    /// claims (`None` while another worker holds it); from another request it is
    /// [`StoreError::AlreadyExists`], as for `create_run`. The default does exactly those
    /// two calls; stores override it with one write.
    ///
    /// [`Runner::start_and_run`]: crate::runner::Runner::start_and_run
    async fn create_run_claimed(
        &self,
        run: NewRun,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, StoreError> {
        let id = run.id.clone();
        self.create_run(run).await?;
        self.claim_run(&id, worker, ttl).await
    }

    /// Extend a held lease. [`StoreError::LeaseLost`] if the epoch is no longer current.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError>;

    /// Give the lease up (after a commit that leaves the run waiting or final, or on shutdown).
    /// Resets `claims_without_progress`: a worker that releases its lease did not crash.
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Give a claimed run back without having executed anything for it: the lease is
    /// released, and the next claim is not charged for it (`claims_without_progress` is
    /// left as the claim found it). A [`Worker`](crate::runner::Worker) hands back the
    /// runs it claimed together with a suspect it must run alone, so that waiting for their turn never pushes them
    /// towards dead-lettering. Like `release_lease`, nothing happens when the epoch is no
    /// longer current; unlike it, other workers are not woken (the run is no more runnable
    /// than before it was claimed).
    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Hand a running run back until `until`, waiting for `why` (room under a rate limit,
    /// [`WaitingFor::Capacity`](super::WaitingFor::Capacity)): the lease is released as by
    /// [`hand_back`](Self::hand_back) (the next claim is not charged, no worker is woken),
    /// the run stays running at its version, and it is claimable again once `until` has
    /// passed (its `wake_at`, which its next commit clears with `waiting_for`). `true` when
    /// it was handed back; `false`, and nothing changed, when the epoch is no longer
    /// current or the run is not running (a step woken from a wait keeps its lease: its
    /// `wake_at` and `waiting_for` say what it waits for).
    async fn defer_run(
        &self,
        lease: &Lease,
        until: Millis,
        why: &super::WaitingFor,
    ) -> Result<bool, StoreError>;

    /// Expire every live lease that `worker` holds on a run that is not final, and wake the
    /// workers; returns how many. The runs become claimable at once, by any worker, instead
    /// of when their leases run out. Epochs and claim counts are kept: the next claim fences
    /// the old holder out and counts against the run as any takeover does.
    ///
    /// For a worker that restarts under the same, stable id
    /// ([`WorkerConfig::expire_own_leases_at_start`](crate::runner::WorkerConfig)): what its
    /// previous process held, nobody is running any more.
    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError>;

    /// Durably record (insert or replace) a journal entry, fenced by the lease epoch.
    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError>;

    /// Commit one step atomically: check `expected_version` and the lease epoch, write the
    /// new version (+1), its transition record (hash-chained), the run row, and mark the
    /// consumed signal. A stale writer gets [`StoreError::LeaseLost`] or
    /// [`StoreError::Conflict`] and nothing is written. Resets `claims_without_progress`.
    /// While an operator's cancel is requested ([`cancel_run`](OperatorStore::cancel_run)), every
    /// commit is refused with [`StoreError::CancelRequested`] in the same compare-and-set.
    ///
    /// `entries` are journal entries of the step not recorded yet: the runner defers the
    /// entry of a read whose policy allows it
    /// ([`ToolPolicy::journal_with_commit`](crate::tool::ToolPolicy)) to its step's commit, so
    /// that a step calling one such read writes once, not twice. When this returns `Ok`,
    /// they are durable with the commit. On an error they may or may not have been
    /// written, as with [`record_entry`](Self::record_entry) followed by a commit; a store
    /// may write them in the commit's transaction, and then writes them only if the commit
    /// applies.
    ///
    /// A commit to a final status also ends the lease (owner and expiry cleared in the same
    /// write), which saves every finished run a release; nobody needs waking for a final
    /// run. The returned record shows it, and the runner releases only a lease that is
    /// still held.
    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError>;

    /// Send a signal; kept until a waiting step consumes it (also when sent early).
    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError>;

    /// Send a signal at most once per `key` and run: as [`send_signal`](Self::send_signal)
    /// when the run has no signal stored under `key`; otherwise nothing is stored and the
    /// receipt names the signal stored first (whatever its name and payload: the key names
    /// the delivery, as a message id or an `Idempotency-Key` does). A sender that retries
    /// with the same key after an error or a crash therefore signals once. Concurrent
    /// senders of one key store one signal. The key is kept as long as the signal.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown run; [`StoreError::Backend`] for a key that
    /// is empty or longer than [`MAX_SIGNAL_KEY_BYTES`](super::MAX_SIGNAL_KEY_BYTES).
    async fn send_signal_once(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
        key: &str,
    ) -> Result<SignalReceipt, StoreError>;

    /// Quarantine the run this lease holds, without writing a version (for a run whose
    /// stored history does not allow one), and end the lease, in one write fenced by the
    /// epoch: no other worker can claim the run in between. [`StoreError::LeaseLost`] when
    /// the epoch moved.
    async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError>;

    /// Move the run this lease holds to a newer version of its agent
    /// ([migration](mod@super::migrate)) in one write: the transition `commit.version()` of
    /// kind `migrated` (the mapped state as a snapshot, status and `waiting_for` as the
    /// commit says, the note of [`MigrationNote::to_note`](super::MigrationNote::to_note),
    /// hash-chained like a commit under the lease's epoch), and the run row moved to it
    /// with its `agent_version`, `fingerprint`, `migrated_at_version` (the new version) and
    /// `resume_base` from the commit. The lease stays held: the holder goes on to run the
    /// step. Pending signals are kept (they belong to the run).
    ///
    /// Refused, nothing written, as [`MigrationCommit::refusal`] says, checked in the same
    /// write: [`StoreError::LeaseLost`] when the epoch moved, [`StoreError::Conflict`] when
    /// the run's version or agent version is not the expected one (another worker migrated
    /// it first), [`StoreError::CancelRequested`] while an operator's cancel waits, and
    /// [`StoreError::Backend`] for a run that is not running or waiting (a compensating
    /// run is never migrated).
    async fn migrate_run(
        &self,
        lease: &Lease,
        commit: &MigrationCommit,
    ) -> Result<RunRecord, StoreError>;

    /// For the holder of `lease` on a run whose cancel was requested: write the `cancel`
    /// transition (to `compensating`, error `cancelled`, with the requester's note) in
    /// place of the step it was refused, fenced by the epoch; the lease stays held so the
    /// holder goes on to compensate.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] when the epoch moved; [`StoreError::Backend`] when no
    /// cancel is requested.
    async fn accept_cancel(&self, lease: &Lease) -> Result<RunRecord, StoreError>;

    /// Wait until there may be work (a notification), or `timeout`. Backends without
    /// notifications sleep.
    async fn wait_for_work(&self, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }

    /// How long until a run that cannot be claimed now may become claimable by time alone:
    /// the earliest live lease on a run that is not final to run out, or the earliest
    /// timer (`wake_at`) still to come. `None` when there is none, or when the backend
    /// cannot tell (the default). A [`Worker`](crate::runner::Worker) with nothing to claim
    /// waits for work at most this long, so that a run whose holder died is taken over
    /// when its lease expires, not at the next poll. Any run counts, whatever its agent: a
    /// worker woken for another agent's run finds nothing and waits again.
    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        Ok(None)
    }
}

/// What a person does to runs through `agentctl` or the HTTP API: cancel, terminate,
/// retry, repair, drop a signal, prune, switch tools. Each action is one write, refused
/// while a live lease holds a run it would change behind its holder's back, and recorded
/// (with who and why) where it changes a run's history.
#[async_trait]
pub trait OperatorStore: HistoryStore {
    /// Cancel a run: its saga's compensations run and it ends `cancelled`.
    ///
    /// A run that is not held by a live lease (running, waiting for a signal or a timer,
    /// or held by an expired lease) moves to `compensating` with error `cancelled` in one
    /// `cancel` transition, hash-chained like a commit and carrying `note`; the write takes
    /// a new epoch, so an expired holder's late commit is refused. A worker then claims it
    /// and runs the compensations. A run held by a live lease gets the request recorded
    /// ([`RunRecord::cancel_requested`]) and is returned unchanged otherwise: from then on
    /// [`commit_step`](RunStore::commit_step) refuses its holder's commits with
    /// [`StoreError::CancelRequested`], checked in the commit's own compare-and-set, and the
    /// holder writes the cancel with [`accept_cancel`](RunStore::accept_cancel). So a cancel
    /// racing a commit leaves one history: the step, then the cancel; or the cancel alone.
    ///
    /// Idempotent: a cancelled or compensating run, or one whose cancel is already
    /// requested, is returned as it is, without a new version.
    ///
    /// The cancel reaches the run's children in the same write, and theirs: each child
    /// that is not final, except those started in a state whose children outlive the run
    /// ([`cancel_reaches_child`](super::operator::cancel_reaches_child)), is cancelled as
    /// above with a note naming its parent
    /// ([`child_cancel_note`](super::operator::child_cancel_note)). So no child commits a
    /// step after its parent's cancel: one a worker holds gets the request, and its
    /// holder's next commit is refused.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::RunIsFinal`] for a run in another final
    /// status.
    async fn cancel_run(&self, run_id: &str, note: &OperatorNote) -> Result<RunRecord, StoreError>;

    /// Terminate a run: it stops at once, nothing compensated, in a `terminate` transition
    /// to `terminated` carrying `note` (who and why), hash-chained like a commit. The write
    /// takes a new epoch and ends the lease, so a worker running the run is fenced out: its
    /// next write gets [`StoreError::LeaseLost`] and it stops. Idempotent: a terminated run
    /// is returned as it is, without a new version.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::RunIsFinal`] for a run in another final
    /// status.
    async fn terminate_run(
        &self,
        run_id: &str,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError>;

    /// Put a run that is not held by a live lease into `status` with `error` (quarantine,
    /// dead-letter), or back to running for an operator's retry (clearing the error).
    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunFailure>,
    ) -> Result<RunRecord, StoreError>;

    /// Write a planned [repair](mod@super::repair) of a quarantined run, or an
    /// [edit](mod@super::edit) of a stopped run's state, in one write: the transition
    /// `commit.version()` (kind `commit.kind`, status running, the state as a snapshot,
    /// `commit.hash`, the note), and the run row rewritten from it (that state and version,
    /// running, error and wait cleared, no lease, epoch `commit.epoch()`). Refused with
    /// [`StoreError::Conflict`] and nothing written when the run's status is no longer
    /// `commit.expected_status`, its epoch or last stored version moved, or a live lease
    /// holds it.
    async fn repair_run(&self, commit: &RepairCommit) -> Result<RunRecord, StoreError>;

    /// Drop the pending signal `signal_id` of run `run_id` for an operator: in one write,
    /// the signal is marked consumed by a new `signal_dropped` version (so no step reads
    /// it), and that version keeps the run's state, status, error and wait, carries `note`
    /// (who, and why, after the dropped signal's id and name) and is hash-chained like any
    /// operator's transition, under a new epoch ([`plan_drop_signal`]).
    ///
    /// For a signal no handler accepts: the run that failed on it can then be retried
    /// without it, and a signal sent after it is the next one read.
    ///
    /// [`plan_drop_signal`]: super::operator::plan_drop_signal
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::NoPendingSignal`] when the run has no
    /// pending signal of that id; [`StoreError::RunIsHeld`] while a live lease holds the
    /// run; [`StoreError::RunIsFinal`] for a run that ended.
    async fn drop_signal(
        &self,
        run_id: &str,
        signal_id: i64,
        note: &OperatorNote,
    ) -> Result<RunRecord, StoreError>;

    /// Remove old versions and their journal by policy; resume keeps working.
    async fn prune(&self, policy: &RetentionPolicy) -> Result<PruneReport, StoreError>;

    /// Set run `run_id`'s budget for the whole run (`None`: none), whatever its status:
    /// an operator raising the budget of a run that ran out of it. The spend so far is
    /// kept; the next step the run takes after its next claim checks against the new
    /// budget. The budget is a setting of the run, not a version of its history. The
    /// caller validates it ([`Budget::validate`]).
    ///
    /// # Errors
    /// [`StoreError::NotFound`].
    async fn set_budget(
        &self,
        run_id: &str,
        budget: Option<Budget>,
    ) -> Result<RunRecord, StoreError>;

    /// Switch a tool on or off for every run.
    async fn set_tool_enabled(
        &self,
        tool: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;
}

/// The events every commit gives ([events](mod@super::events)), read from a cursor, and the
/// wake-ups that tell a follower when to read again.
#[async_trait]
pub trait EventLog: Send + Sync + fmt::Debug {
    /// The events in `scope` after `after`, in cursor order, at most `limit`
    /// ([events](mod@super::events)). Derived from the records as committed: a read from
    /// any cursor returns exactly the events a read from the start returns after it,
    /// whatever crashed in between. Within a run, cursors grow in commit order. Events of
    /// pruned versions are gone with them.
    async fn events(
        &self,
        scope: &EventScope,
        after: EventCursor,
        limit: usize,
    ) -> Result<Vec<RunEvent>, StoreError>;

    /// A cursor at the end of every run's events now: following from it gives what is
    /// committed from now on (`agentctl runs --watch`). On PostgreSQL, a record that drew
    /// its position just before and commits just after may fall behind it. The default
    /// reads every event.
    async fn event_head(&self) -> Result<EventCursor, StoreError> {
        let mut head = EventCursor::START;
        loop {
            let page = self.events(&EventScope::All, head, 1000).await?;
            match page.last() {
                Some(last) => head = last.cursor,
                None => return Ok(head),
            }
        }
    }

    /// Wake-ups for a follower ([`Follower`](crate::events::Follower)): after every write
    /// that gives events, the id of its run, while anyone listens, across processes where
    /// the backend can (PostgreSQL's `LISTEN/NOTIFY`). `None`: this store sends none, and
    /// followers poll. A write with nobody listening does no extra work.
    async fn event_wakes(&self) -> Result<Option<EventWakes>, StoreError> {
        Ok(None)
    }
}
