//! A worker: claims runnable runs from the store and drives them, many at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::{debug, warn};

use super::{Runner, RunnerError};
use crate::agent::{Agent, Handle};

/// A run claimed more often than this without a commit is a suspect: it may be the one that
/// crashes its worker. One lost claim (an expired lease, a partition) is common and does not
/// make a run suspect; two in a row do.
const SUSPECT_AFTER: u32 = 2;

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Runs driven at once.
    pub concurrency: usize,
    /// Longest wait for work between claims when the store sends no notification.
    pub poll_interval: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            poll_interval: Duration::from_millis(500),
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

/// Claims runnable runs of one agent (leases, fencing) and drives them.
pub struct Worker<A, H> {
    runner: Runner<A, H>,
    config: WorkerConfig,
}

impl<A, H> std::fmt::Debug for Worker<A, H>
where
    A: Agent,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("runner", &self.runner)
            .field("config", &self.config)
            .finish()
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
        Self { runner, config }
    }

    /// Work until `shutdown` completes, then finish the runs in flight.
    ///
    /// # Errors
    /// Never fails as a whole: errors of single runs are logged and counted (the runs
    /// resume on another claim); store outages are waited out.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> WorkerStats {
        tokio::pin!(shutdown);
        self.work(Some(shutdown.as_mut()), false).await
    }

    /// Work until nothing is claimable and nothing is in flight (tests, batch jobs).
    pub async fn run_until_idle(&self) -> WorkerStats {
        self.work(None::<std::pin::Pin<&mut std::future::Pending<()>>>, true)
            .await
    }

    async fn work<F: Future<Output = ()> + ?Sized>(
        &self,
        mut shutdown: Option<std::pin::Pin<&mut F>>,
        stop_when_idle: bool,
    ) -> WorkerStats {
        let store = Arc::clone(self.runner.store());
        let cfg = self.runner.config().clone();
        let agents = vec![A::NAME.to_owned()];
        let mut stats = WorkerStats::default();
        let mut tasks: JoinSet<Result<(), RunnerError>> = JoinSet::new();
        let mut store_backoff = Duration::from_millis(50);
        loop {
            while let Some(done) = tasks.try_join_next() {
                tally(&mut stats, done);
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
                            batch.into_iter().partition(|(_, record)| {
                                record.claims_without_progress > SUSPECT_AFTER
                            });
                        if suspects.is_empty() {
                            for (lease, record) in healthy {
                                let runner = self.runner.clone();
                                tasks.spawn(
                                    async move { runner.drive(lease, record).await.map(drop) },
                                );
                            }
                        } else {
                            // A run claimed twice before without progress may crash its worker.
                            // It runs alone, so that a crash is counted against it and not
                            // against runs that happened to share the process.
                            for (lease, _) in &healthy {
                                if let Err(e) = store.release_lease(lease).await {
                                    warn!(error = %e, "could not release a lease; it will expire");
                                }
                            }
                            while let Some(done) = tasks.join_next().await {
                                tally(&mut stats, done);
                            }
                            for (lease, record) in suspects {
                                // Still a task of its own: a panic stays inside it.
                                let runner = self.runner.clone();
                                tasks.spawn(
                                    async move { runner.drive(lease, record).await.map(drop) },
                                );
                                while let Some(done) = tasks.join_next().await {
                                    tally(&mut stats, done);
                                }
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
            if claimed > 0 {
                continue;
            }
            if stop_when_idle && tasks.is_empty() {
                return stats;
            }
            let wait = async {
                if tasks.is_empty() {
                    store.wait_for_work(self.config.poll_interval).await;
                    None
                } else {
                    tokio::select! {
                        done = tasks.join_next() => done,
                        () = store.wait_for_work(self.config.poll_interval) => None,
                    }
                }
            };
            let done = match shutdown.as_mut() {
                Some(s) => tokio::select! {
                    d = wait => d,
                    () = s.as_mut() => {
                        while let Some(done) = tasks.join_next().await {
                            tally(&mut stats, done);
                        }
                        return stats;
                    }
                },
                None => wait.await,
            };
            if let Some(done) = done {
                tally(&mut stats, done);
            }
        }
    }
}

fn tally(stats: &mut WorkerStats, done: Result<Result<(), RunnerError>, tokio::task::JoinError>) {
    match done {
        Ok(Ok(())) => stats.runs_driven += 1,
        Ok(Err(RunnerError::LeaseLost(run))) => {
            debug!(run_id = %run, "lease lost; another worker has the run");
            stats.leases_lost += 1;
        }
        Ok(Err(e)) => {
            warn!(error = %e, "run stopped; it resumes on a later claim");
            stats.errors += 1;
        }
        Err(e) => {
            warn!(error = %e, "run task panicked; it resumes on a later claim");
            stats.errors += 1;
        }
    }
}
