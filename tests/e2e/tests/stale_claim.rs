//! A claim whose result reaches the worker late (a slow network, a paused process): by then
//! the lease has expired and another worker has taken the run over and completed it. The
//! late worker must notice it lost the run and leave it alone.
//!
//! Found by the network-fault test at full size (a completed run ended `quarantined` in state
//! `Done`); this test reproduces it deterministically with a store wrapper that delays the
//! result of one claim (fixed by 18667f2; see RELIABILITY.md, 4.).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::runner::{RunnerConfig, Worker, WorkerConfig};
use agent_core::store::{
    Claimed, EventCursor, EventLog, EventScope, HistoryStore, JournalEntry, Lease, NewRun,
    OperatorNote, OperatorStore, PruneReport, RetentionPolicy, RunEvent, RunFailure, RunRecord,
    RunStatus, RunStore, SignalReceipt, StepCommit, Store, StoreError,
};
use agent_pg::PgStore;
use async_trait::async_trait;
use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::create_runs;
use e2e::service::{Latency, Service};
use e2e::shop;
use serde_json::Value;

/// The store, except that the first non-empty `claim_next` answer arrives `delay` late.
#[derive(Debug)]
struct LateClaim {
    inner: Arc<PgStore>,
    delay: Duration,
    delayed: AtomicBool,
}

agent_core::forward_history_store!(LateClaim => inner);

#[async_trait]
impl RunStore for LateClaim {
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
        self.inner.claim_run(run_id, worker, ttl).await
    }

    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let claimed = self.inner.claim_next(agents, worker, ttl, limit).await?;
        if !claimed.is_empty() && !self.delayed.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(self.delay).await;
        }
        Ok(claimed)
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
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
        self.inner.hand_back(lease).await
    }

    async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
        self.inner.quarantine(lease, error).await
    }

    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
        self.inner.expire_leases_of(worker).await
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        self.inner.record_entry(lease, entry).await
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        self.inner.commit_step(lease, commit, entries).await
    }

    async fn migrate_run(
        &self,
        lease: &Lease,
        commit: &agent_core::store::MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        self.inner.migrate_run(lease, commit).await
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        self.inner.send_signal(run_id, name, payload).await
    }

    async fn send_signal_once(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
        key: &str,
    ) -> Result<SignalReceipt, StoreError> {
        self.inner
            .send_signal_once(run_id, name, payload, key)
            .await
    }

    async fn accept_cancel(&self, lease: &Lease) -> Result<RunRecord, StoreError> {
        self.inner.accept_cancel(lease).await
    }

    async fn wait_for_work(&self, timeout: Duration) {
        self.inner.wait_for_work(timeout).await;
    }
}

#[async_trait]
impl OperatorStore for LateClaim {
    async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        error: Option<RunFailure>,
    ) -> Result<RunRecord, StoreError> {
        self.inner.set_status(run_id, status, error).await
    }

    async fn repair_run(
        &self,
        commit: &agent_core::store::RepairCommit,
    ) -> Result<RunRecord, StoreError> {
        self.inner.repair_run(commit).await
    }

    async fn cancel_run(&self, run_id: &str, note: &OperatorNote) -> Result<RunRecord, StoreError> {
        self.inner.cancel_run(run_id, note).await
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
impl EventLog for LateClaim {
    async fn events(
        &self,
        scope: &EventScope,
        after: EventCursor,
        limit: usize,
    ) -> Result<Vec<RunEvent>, StoreError> {
        self.inner.events(scope, after, limit).await
    }
}

fn worker(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    id: &str,
) -> Worker<shop::Shop, shop::Behaviour> {
    let runner = shop::runner(
        store,
        svc,
        RunnerConfig {
            worker_id: id.to_owned(),
            lease_ttl: Duration::from_millis(500),
            ..RunnerConfig::default()
        },
    );
    Worker::new(
        runner,
        WorkerConfig {
            concurrency: 1,
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_leaves_a_completed_run_alone() {
    let Some(url) = database_url("stale_claim").await else {
        return;
    };
    let db = TestDb::create(&url, "stale").await;
    create_runs(&db, 0, 1).await;
    let svc = |id: &str| {
        Arc::new(Service::new(
            db.pool.clone(),
            id,
            Latency::ms(0, 0),
            Latency::ms(0, 0),
        ))
    };
    let late: Arc<dyn Store> = Arc::new(LateClaim {
        inner: Arc::clone(&db.store),
        delay: Duration::from_secs(2),
        delayed: AtomicBool::new(false),
    });
    let late_worker = worker(late, &svc("late"), "late");
    let late_task = tokio::spawn(async move { late_worker.run_until_idle().await });
    // The late worker's lease (500 ms) expires while its claim's answer is on its way.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let fresh: Arc<dyn Store> = db.store.clone();
    let fresh_stats = worker(fresh, &svc("fresh"), "fresh").run_until_idle().await;
    let done = db
        .store
        .load_run(&shop::run_id(0))
        .await
        .expect("load")
        .expect("run");
    println!("after the fresh worker: {} v{}", done.status, done.version);
    let late_stats = late_task.await.expect("late worker");
    let after = db
        .store
        .load_run(&shop::run_id(0))
        .await
        .expect("load")
        .expect("run");
    println!(
        "after the late worker: {} v{} error {:?}; fresh {fresh_stats:?}, late {late_stats:?}",
        after.status, after.version, after.error
    );
    assert!(
        done.status.is_final(),
        "the fresh worker did not finish the run"
    );
    assert_eq!(
        after.status, done.status,
        "the late worker changed a run another worker had finished"
    );
    let report = check(
        &db.pool,
        &Expect {
            runs: 1,
            ..Expect::default()
        },
    )
    .await;
    report.assert_clean();
    db.drop().await;
}

// Schedules are kept by the wrapped store, unchanged.
agent_core::forward_schedule_store!(LateClaim => inner);
agent_core::forward_limit_store!(LateClaim => inner);
