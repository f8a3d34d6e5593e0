//! A worker: claims runnable runs from the store and drives them, many at once.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::retention::Retention;
use super::{Runner, RunnerError};
use crate::agent::{Agent, Handle};
use crate::schedule::tick_due;
use crate::store::{Claimed, Store, now_ms};

/// A run whose claims found this many lost claims in a row without a commit
/// ([`RunRecord::claims_without_progress`](crate::store::RunRecord)) is a *suspect*: its
/// step may be what crashes its workers, so a [`Worker`] runs it alone. One lost claim (a
/// killed worker, an expired lease) is common and does not make a run a suspect; two in a
/// row do.
pub const SUSPECT_CLAIMS: u32 = 2;

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Runs driven at once.
    pub concurrency: usize,
    /// Longest wait for work between claims when the store sends no notification.
    pub poll_interval: Duration,
    /// At its first start, expire the leases still held under this worker's id
    /// ([`RunnerConfig::worker_id`](super::RunnerConfig)) so that the runs its previous
    /// process was driving are claimed at once instead of when their leases run out
    /// ([`RunStore::expire_leases_of`](crate::store::RunStore::expire_leases_of)).
    ///
    /// Only for an id that is **stable across restarts and held by one process at a time**
    /// (a supervisor's slot, a StatefulSet pod name): with an id another live process
    /// also uses, that process loses its runs to a takeover. Its stale commits are fenced
    /// out and its in-flight writes deduplicated by key, as after any takeover, but its
    /// work is wasted. Off by default, and useless with the default id, which is new in
    /// every process.
    pub expire_own_leases_at_start: bool,
    /// Retention the worker applies to its store while it works (see [`Retention`]):
    /// final runs deleted after an age, versions older than a window compacted. `None`
    /// (the default): nothing is removed unless an operator prunes
    /// ([`OperatorStore::prune`](crate::store::OperatorStore::prune), `agentctl prune`).
    pub retention: Option<Retention>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            poll_interval: Duration::from_millis(500),
            expire_own_leases_at_start: false,
            retention: None,
        }
    }
}

/// What a worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Runs driven to a final or waiting status.
    pub runs_driven: u64,
    /// Runs given up because another worker held or took them.
    pub leases_lost: u64,
    /// Runs stopped by an error (store, injected crash); they resume elsewhere.
    pub errors: u64,
}

/// What a worker found at start-up about the versions of its agent's runs in the store
/// ([`Worker::version_report`]). Reported (a `tracing::warn`), never quarantined: another
/// worker may run them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionReport {
    /// Runs that are not final, by agent version, of versions this worker cannot run (newer,
    /// or older without a migration): it never claims them.
    pub unrunnable: std::collections::BTreeMap<u32, u64>,
    /// How many runs that are not final are on this worker's own version but recorded
    /// another graph fingerprint: the graph changed without a new version.
    pub changed_graph: u64,
    /// Up to [`CHANGED_GRAPH_LISTED`] of them, newest first for each graph they recorded.
    pub changed_graph_runs: Vec<String>,
}

/// How many run ids [`VersionReport::changed_graph_runs`] lists.
pub const CHANGED_GRAPH_LISTED: usize = 20;

/// Claims runnable runs of one agent (leases, fencing) and drives them.
///
/// # Versions
///
/// A worker claims only the runs it can run: those on its agent's version, and those on
/// an older version it declares a migration from ([`claim_entries`](super::claim_entries)),
/// which the runner migrates before their next step. At its first start it reports
/// ([`version_report`](Self::version_report)) the runs it leaves to other workers and the
/// runs of its own version whose graph changed without a new version.
///
/// # Runs that crash their worker
///
/// A claim that finds the run's previous claim lost (neither released nor committed through)
/// counts against the run until it commits or its lease is released; a run with
/// [`RunnerConfig::max_claims_without_progress`](super::RunnerConfig) lost claims in a row is
/// dead-lettered (`crash_loop`) before anything of it runs again. A claim itself costs
/// nothing, so a crash costs a run one, even a claim that was in flight when its worker died
/// and landed after. So that the count lands on the run that causes the crashes:
/// - a step that **panics** is attributable: the worker catches the panic in the run's task
///   and claims that run again at once;
/// - a step that **kills the process** is not: every run in flight is charged. A run claimed
///   [`SUSPECT_CLAIMS`] lost claims without a commit is a suspect and runs alone: the
///   worker hands the rest of its batch back with
///   [`RunStore::hand_back`](crate::store::RunStore::hand_back) (not counted), lets the runs in
///   flight finish, then drives the suspect with nothing else in the process.
///
/// # Restarts
///
/// A worker process that dies leaves its runs under leases nobody renews; other workers
/// take them when the leases run out. A supervisor that restarts the process under the same
/// [`worker_id`](super::RunnerConfig::worker_id) (a slot number, a StatefulSet pod name) can
/// set [`WorkerConfig::expire_own_leases_at_start`]: the new process then takes those runs
/// back at once, which matters most when the only worker is the one that crashed.
pub struct Worker<A, H> {
    runner: Runner<A, H>,
    config: WorkerConfig,
    /// Whether `expire_own_leases_at_start` has been done (once per worker, not per call
    /// of `run_until*`: later calls would expire this worker's own live leases).
    own_leases_expired: tokio::sync::OnceCell<()>,
    /// Whether the versions of the store's runs were reported (once per worker).
    versions_reported: tokio::sync::OnceCell<()>,
}

impl<A, H> std::fmt::Debug for Worker<A, H>
where
    A: Agent,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("runner", &self.runner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<A, H> Worker<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// A worker driving runs with `runner`.
    #[must_use]
    pub fn new(runner: Runner<A, H>, config: WorkerConfig) -> Self {
        Self {
            runner,
            config,
            own_leases_expired: tokio::sync::OnceCell::new(),
            versions_reported: tokio::sync::OnceCell::new(),
        }
    }

    /// The runs of this agent that are not final and that this worker leaves alone or
    /// that disagree with its graph: counts of runs on versions it cannot run, and the runs
    /// of its own version whose recorded fingerprint is not its graph's. Counted by the
    /// store ([`HistoryStore::count_versions`](crate::store::HistoryStore::count_versions)): no run is
    /// read, however many wait.
    ///
    /// # Errors
    /// The store's, counting or listing the runs.
    pub async fn version_report(&self) -> Result<VersionReport, crate::store::StoreError> {
        version_report::<A>(self.runner.store().as_ref()).await
    }

    /// The runner this worker drives runs with (to start runs or send signals).
    #[must_use]
    pub fn runner(&self) -> &Runner<A, H> {
        &self.runner
    }

    /// Work until `shutdown` completes, then finish the runs in flight.
    ///
    /// # Errors
    /// Never fails as a whole: errors of single runs are logged and counted (the runs
    /// resume on another claim); store outages are waited out.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> WorkerStats {
        // `shutdown` is polled whenever it is woken, not only while the loop waits: one
        // that reads the store (a test waiting for runs, a drain flag in a table) must not
        // be left holding a connection while the loop needs it (SQLite's writer pool has
        // one). It stops the loop through a permit the loop waits for.
        let stop = tokio::sync::Notify::new();
        let stopped = stop.notified();
        tokio::pin!(stopped);
        let work = self.work(Some(stopped.as_mut()), false);
        tokio::pin!(work);
        tokio::select! {
            stats = &mut work => return stats,
            () = shutdown => stop.notify_one(),
        }
        work.await
    }

    /// Work until nothing is claimable and nothing is in flight (tests, batch jobs).
    pub async fn run_until_idle(&self) -> WorkerStats {
        self.work(None::<std::pin::Pin<&mut std::future::Pending<()>>>, true)
            .await
    }

    /// Drive a claimed run in a task of its own, where a panic stays.
    fn spawn(&self, tasks: &mut JoinSet<Driven>, claimed: Claimed) {
        let runner = self.runner.clone();
        // The claim is boxed before it is moved into the task: each layer of futures keeps
        // what it was given (hundreds of bytes of record) for as long as it lives.
        let claimed = Box::new(claimed);
        tasks.spawn(async move {
            let run_id = claimed.record.id.clone();
            match AssertUnwindSafe(runner.drive(claimed)).catch_unwind().await {
                Ok(result) => Driven::Returned(result.map(drop)),
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)")
                        .to_owned();
                    Driven::Panicked { run_id, message }
                }
            }
        });
    }

    /// Expire what this worker's id held in a previous process, once. If the store cannot
    /// be reached, those runs wait for their leases to run out, as without the setting.
    async fn expire_own_leases(&self, store: &Arc<dyn Store>, worker_id: &str) {
        self.own_leases_expired
            .get_or_init(|| async {
                match store.expire_leases_of(worker_id).await {
                    Ok(0) => {}
                    Ok(n) => info!(worker = %worker_id, runs = n,
                        "expired the leases of this worker's previous process"),
                    Err(e) => warn!(error = %e,
                        "could not expire this worker's old leases; they run out instead"),
                }
            })
            .await;
    }

    async fn work<F: Future<Output = ()> + ?Sized>(
        &self,
        mut shutdown: Option<std::pin::Pin<&mut F>>,
        stop_when_idle: bool,
    ) -> WorkerStats {
        let store = Arc::clone(self.runner.store());
        let cfg = self.runner.config().clone();
        // Only the runs this worker can run: its version and those it migrates from.
        let agents = super::claim_entries::<A>();
        let mut stats = WorkerStats::default();
        // A routed agent without a router would claim runs only to fail each at its routed
        // state: say so once and claim nothing.
        if let Err(e) = self.runner.check_router() {
            tracing::error!(error = %e, "the worker cannot run this agent; it claims nothing");
            stats.errors += 1;
            return stats;
        }
        let mut tasks: JoinSet<Driven> = JoinSet::new();
        // Runs whose step panicked in this process: the panic is theirs, so they are tried
        // again at once (each try counted) and not suspected of crashing the process.
        let mut panicked: Vec<String> = Vec::new();
        let mut store_backoff = Duration::from_millis(50);
        let mut due = Due::default();
        let mut schedules = SchedulesDue::default();
        if self.config.expire_own_leases_at_start {
            self.expire_own_leases(&store, &cfg.worker_id).await;
        }
        let _retention = AbortOnDrop(
            self.config
                .retention
                .clone()
                .map(|r| r.spawn(Arc::clone(&store))),
        );
        // The versions report counts the runs that are not final (a scan of them): after
        // the first claim and in a task of its own, so that no claim waits for it.
        let mut versions_pending = true;
        loop {
            while let Some(done) = tasks.try_join_next() {
                tally(&mut stats, done, &mut panicked);
            }
            for run_id in std::mem::take(&mut panicked) {
                match store
                    .claim_run(&run_id, &cfg.worker_id, cfg.lease_ttl)
                    .await
                {
                    Ok(Some(claimed)) => self.spawn(&mut tasks, claimed),
                    Ok(None) => {}
                    Err(e) => warn!(error = %e, run_id = %run_id, "could not claim a run again"),
                }
            }
            // The agent's schedules tick before the claim, which then takes their new runs.
            if schedules.due(self.config.poll_interval) {
                schedules.tick(store.as_ref(), &self.runner).await;
            }
            let free = self.config.concurrency.saturating_sub(tasks.len());
            let mut claimed = 0;
            if free > 0 {
                match store
                    .claim_next(&agents, &cfg.worker_id, cfg.lease_ttl, free)
                    .await
                {
                    Ok(batch) => {
                        store_backoff = Duration::from_millis(50);
                        claimed = batch.len();
                        let (suspects, healthy): (Vec<_>, Vec<_>) =
                            batch.into_iter().partition(|claimed| {
                                claimed.record.claims_without_progress >= SUSPECT_CLAIMS
                            });
                        let mut suspects = suspects.into_iter();
                        if let Some(suspect) = suspects.next() {
                            // A suspect may be what crashes its workers: it runs alone, so that
                            // a crash counts against it and not against runs sharing the process.
                            // The rest of the batch goes back uncounted (it is claimed again
                            // next, oldest first); the runs in flight finish first.
                            for other in healthy.iter().chain(suspects.as_slice()) {
                                let other = &other.lease;
                                if let Err(e) = store.hand_back(other).await {
                                    warn!(error = %e, run_id = %other.run_id,
                                    "could not hand a run back; its lease will expire");
                                }
                            }
                            while let Some(done) = tasks.join_next().await {
                                tally(&mut stats, done, &mut panicked);
                            }
                            self.spawn(&mut tasks, suspect);
                            while let Some(done) = tasks.join_next().await {
                                tally(&mut stats, done, &mut panicked);
                            }
                        } else {
                            for claimed in healthy {
                                self.spawn(&mut tasks, claimed);
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "claiming runs failed; backing off");
                        tokio::time::sleep(store_backoff).await;
                        store_backoff = (store_backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                }
            }
            if versions_pending {
                versions_pending = false;
                // Once per worker. Not aborted with the loop: a worker run until idle
                // (a batch job) may end before its report, which is one count.
                if self.versions_reported.set(()).is_ok() {
                    tokio::spawn(report_versions::<A>(Arc::clone(&store)));
                }
            }
            if claimed > 0 {
                continue;
            }
            if stop_when_idle && tasks.is_empty() {
                return stats;
            }
            let limit = schedules.limit(
                due.wait_limit(store.as_ref(), self.config.poll_interval)
                    .await,
            );
            let wait = async {
                if tasks.is_empty() {
                    store.wait_for_work(limit).await;
                    None
                } else {
                    tokio::select! {
                        done = tasks.join_next() => done,
                        () = store.wait_for_work(limit) => None,
                    }
                }
            };
            let done = match shutdown.as_mut() {
                Some(s) => tokio::select! {
                    d = wait => d,
                    () = s.as_mut() => {
                        while let Some(done) = tasks.join_next().await {
                            tally(&mut stats, done, &mut panicked);
                        }
                        return stats;
                    }
                },
                None => wait.await,
            };
            if let Some(done) = done {
                tally(&mut stats, done, &mut panicked);
            }
        }
    }
}

/// When the next lease or timer comes due ([`RunStore::next_due`]), as last asked of the
/// store: a worker with nothing to claim waits for a notification at most until then, so
/// that a run whose holder died is taken over when its lease expires, not at the next
/// poll. Asked at most once per poll interval, and again once the time it gave has come.
#[derive(Debug, Default)]
struct Due {
    asked: Option<Instant>,
    at: Option<Instant>,
}

impl Due {
    async fn wait_limit(&mut self, store: &dyn Store, poll: Duration) -> Duration {
        let now = Instant::now();
        let stale = self.asked.is_none_or(|asked| now - asked >= poll)
            || self.at.is_some_and(|at| at <= now);
        if stale {
            self.asked = Some(now);
            self.at = match store.next_due().await {
                // A millisecond past it: the store's clock decides, in whole milliseconds.
                Ok(due) => due.map(|d| now + d + Duration::from_millis(1)),
                Err(e) => {
                    debug!(error = %e, "could not ask when the next lease expires; polling");
                    None
                }
            };
        }
        self.at
            .map_or(poll, |at| at.saturating_duration_since(now).min(poll))
    }
}

/// When the worker's agent's next schedule comes due ([`ScheduleStore::next_schedule_due`]),
/// as last asked after a tick: the worker ticks then (or once per poll interval, to see
/// schedules created or triggered since), and sleeps no longer.
///
/// [`ScheduleStore::next_schedule_due`]: crate::store::ScheduleStore::next_schedule_due
#[derive(Debug, Default)]
struct SchedulesDue {
    asked: Option<Instant>,
    at: Option<Instant>,
}

/// How many due schedules one pass ticks; the rest tick at the next.
const SCHEDULES_PER_PASS: usize = 100;

impl SchedulesDue {
    fn due(&self, poll: Duration) -> bool {
        let now = Instant::now();
        self.asked.is_none_or(|asked| now - asked >= poll) || self.at.is_some_and(|at| at <= now)
    }

    /// Tick the due schedules of the runner's agent, then ask when the next comes due.
    async fn tick<A, H>(&mut self, store: &dyn Store, runner: &Runner<A, H>)
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        match tick_due(store, runner, now_ms(), SCHEDULES_PER_PASS).await {
            Ok(report) if !report.started.is_empty() => {
                debug!(runs = report.started.len(), "schedules started runs");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "ticking schedules failed; they tick at the next pass"),
        }
        self.asked = Some(Instant::now());
        self.at = match store.next_schedule_due(A::NAME).await {
            Ok(next) => next.map(|due| {
                let wait = u64::try_from(due - now_ms()).unwrap_or(0);
                Instant::now() + Duration::from_millis(wait)
            }),
            Err(e) => {
                debug!(error = %e, "could not ask when the next schedule ticks; polling");
                None
            }
        };
    }

    /// `limit`, cut to the next schedule's due time.
    fn limit(&self, limit: Duration) -> Duration {
        self.at.map_or(limit, |at| {
            at.saturating_duration_since(Instant::now()).min(limit)
        })
    }
}

/// How the task driving one run ended.
enum Driven {
    /// `Runner::drive` returned.
    Returned(Result<(), RunnerError>),
    /// The run's step panicked.
    Panicked { run_id: String, message: String },
}

fn tally(
    stats: &mut WorkerStats,
    done: Result<Driven, tokio::task::JoinError>,
    panicked: &mut Vec<String>,
) {
    match done {
        Ok(Driven::Returned(Ok(()))) => stats.runs_driven += 1,
        Ok(Driven::Returned(Err(RunnerError::LeaseLost(run)))) => {
            debug!(run_id = %run, "lease lost; another worker has the run");
            stats.leases_lost += 1;
        }
        Ok(Driven::Returned(Err(e))) => {
            warn!(error = %e, "run stopped; it resumes on a later claim");
            stats.errors += 1;
        }
        Ok(Driven::Panicked { run_id, message }) => {
            warn!(run_id = %run_id, panic = %message, "run step panicked; trying it again");
            stats.errors += 1;
            panicked.push(run_id);
        }
        Err(e) => {
            warn!(error = %e, "run task failed; it resumes on a later claim");
            stats.errors += 1;
        }
    }
}

/// Aborts a task of the worker (retention) when the worker's loop ends, however it ends.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// [`Worker::version_report`] of agent `A`'s runs in `store`.
async fn version_report<A: Agent>(
    store: &dyn Store,
) -> Result<VersionReport, crate::store::StoreError> {
    use crate::store::{RunFilter, RunStatus};
    let filter = RunFilter {
        agent: Some(A::NAME.to_owned()),
        statuses: RunStatus::ALL
            .into_iter()
            .filter(|s| !s.is_final())
            .collect(),
        ..RunFilter::default()
    };
    let fingerprint = A::graph().fingerprint();
    let runnable = super::claim_entries::<A>();
    let mut report = VersionReport::default();
    for count in store.count_versions(&filter).await? {
        if !crate::store::claimable_by(&runnable, A::NAME, count.agent_version) {
            *report.unrunnable.entry(count.agent_version).or_default() += count.runs;
        } else if count.agent_version == A::VERSION && count.fingerprint != fingerprint {
            report.changed_graph += count.runs;
            let room = CHANGED_GRAPH_LISTED - report.changed_graph_runs.len();
            if room > 0 {
                let listed = store
                    .list_runs(&RunFilter {
                        agent_version: Some(count.agent_version),
                        fingerprint: Some(count.fingerprint),
                        limit: Some(room),
                        ..filter.clone()
                    })
                    .await?;
                report
                    .changed_graph_runs
                    .extend(listed.into_iter().map(|r| r.id));
            }
        }
    }
    Ok(report)
}

/// Log [`version_report`] (a worker does it once, beside its work).
async fn report_versions<A: Agent>(store: Arc<dyn Store>) {
    match version_report::<A>(store.as_ref()).await {
        Ok(report) => {
            for (version, runs) in &report.unrunnable {
                warn!(
                    agent = A::NAME,
                    version,
                    runs,
                    worker_version = A::VERSION,
                    "runs of a version this worker cannot run are left to other workers"
                );
            }
            if report.changed_graph > 0 {
                warn!(agent = A::NAME, version = A::VERSION, runs = report.changed_graph,
                    listed = ?report.changed_graph_runs,
                    "runs of this version recorded another graph: the graph changed \
                     without a new version");
            }
        }
        Err(e) => warn!(error = %e, "could not report the versions of the stored runs"),
    }
}
