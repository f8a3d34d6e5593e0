//! The store every simulated worker sees: the shared memory store behind faults (lost
//! requests, lost acknowledgements, a process paused before it renews its lease), an
//! observer that writes what the store really did into the trace, and, for the broken
//! variant only, a flaw (fenced writes use the run's current epoch, not the caller's).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use durable_agents_core::graph::GraphDescription;
use durable_agents_core::store::memory::MemoryStore;
use durable_agents_core::store::{
    Claimed, EventLog, HistoryStore, JournalEntry, Lease, NewRun, OperatorNote, OperatorStore,
    PruneReport, RepairCommit, RetentionPolicy, RunFailure, RunRecord, RunStatus, RunStore,
    SignalReceipt, StepCommit, StoreError,
};
use serde_json::Value;

use super::{Event, Sim, View};

/// One worker incarnation's view of the shared store.
#[derive(Debug)]
pub(crate) struct SimStore {
    pub(crate) inner: Arc<MemoryStore>,
    pub(crate) sim: Arc<Sim>,
    pub(crate) view: Arc<View>,
}

impl SimStore {
    /// The lease as the broken variant uses it: the run's current epoch, whoever holds it.
    async fn fenced_as(&self, lease: &Lease) -> Result<Lease, StoreError> {
        if !self.sim.broken {
            return Ok(lease.clone());
        }
        Ok(match self.inner.load_run(&lease.run_id).await? {
            Some(r) => Lease {
                epoch: r.epoch,
                ..lease.clone()
            },
            None => lease.clone(),
        })
    }

    async fn epoch_now(&self, run_id: &str) -> Option<u64> {
        self.inner
            .load_run(run_id)
            .await
            .ok()
            .flatten()
            .map(|r| r.epoch)
    }
}

durable_agents_core::forward_history_store!(SimStore => inner);

#[async_trait]
impl RunStore for SimStore {
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
        let claimed = self.inner.claim_run(run_id, worker, ttl).await?;
        if let Some(c) = &claimed {
            self.view.hold(run_id, c.lease.epoch, c.record.version);
            self.sim.event(Event::Claim {
                worker: worker.to_owned(),
                run: run_id.to_owned(),
                epoch: c.lease.epoch,
                version: c.record.version,
            });
        }
        Ok(claimed)
    }

    async fn claim_next(
        &self,
        agents: &[String],
        worker: &str,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        // The simulation's workers claim by id; a claim here would bypass the trace.
        let _ = (agents, worker, ttl, limit);
        Err(StoreError::backend("claim_next is not simulated"))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        // A process paused (a long GC, a stalled VM) past its lease before it renews.
        if self.sim.draw(self.sim.faults.pause) {
            let ms = self.sim.below(3 * ms_of(ttl)) + ms_of(ttl);
            self.sim.event(Event::Pause {
                worker: lease.worker.clone(),
                run: lease.run_id.clone(),
                ms,
            });
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let renewed = self
            .inner
            .renew_lease(&self.fenced_as(lease).await?, ttl)
            .await;
        self.sim.event(Event::Renew {
            worker: lease.worker.clone(),
            run: lease.run_id.clone(),
            ok: renewed.is_ok(),
        });
        renewed
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release_lease(lease).await
    }
    async fn defer_run(
        &self,
        lease: &Lease,
        until: durable_agents_core::store::Millis,
        why: &durable_agents_core::store::WaitingFor,
    ) -> Result<bool, StoreError> {
        self.inner.defer_run(lease, until, why).await
    }

    async fn hand_back(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.hand_back(lease).await
    }
    async fn expire_leases_of(&self, worker: &str) -> Result<u64, StoreError> {
        self.inner.expire_leases_of(worker).await
    }

    async fn record_entry(&self, lease: &Lease, entry: &JournalEntry) -> Result<(), StoreError> {
        if self.sim.draw(self.sim.faults.lost_request) {
            self.sim.event(Event::Lost {
                worker: lease.worker.clone(),
                what: format!(
                    "entry request {}@{}#{}",
                    entry.run_id, entry.version, entry.seq
                ),
            });
            return Err(StoreError::unavailable("simulated: request lost"));
        }
        let before = self.epoch_now(&lease.run_id).await;
        let applied = self
            .inner
            .record_entry(&self.fenced_as(lease).await?, entry)
            .await;
        if applied.is_ok() && before != Some(lease.epoch) {
            self.sim.violation(format!(
                "invariant 5: {}'s journal entry {}@{}#{} was accepted under epoch {} while the \
                 run was at epoch {before:?}",
                lease.worker, entry.run_id, entry.version, entry.seq, lease.epoch
            ));
        }
        self.sim.event(Event::Entry {
            worker: lease.worker.clone(),
            run: entry.run_id.clone(),
            version: entry.version,
            seq: entry.seq,
            kind: format!("{:?}", entry.kind),
            name: entry.name.clone(),
            key: entry.idempotency_key.clone(),
            status: format!("{:?}", entry.status),
            epoch: lease.epoch,
            applied: applied.is_ok(),
        });
        applied?;
        if self.sim.draw(self.sim.faults.lost_ack) {
            self.sim.event(Event::Lost {
                worker: lease.worker.clone(),
                what: format!("entry ack {}@{}#{}", entry.run_id, entry.version, entry.seq),
            });
            return Err(StoreError::unavailable("simulated: acknowledgement lost"));
        }
        Ok(())
    }

    async fn migrate_run(
        &self,
        lease: &Lease,
        commit: &durable_agents_core::store::MigrationCommit,
    ) -> Result<RunRecord, StoreError> {
        self.inner.migrate_run(lease, commit).await
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        commit: &StepCommit,
        entries: &[JournalEntry],
    ) -> Result<RunRecord, StoreError> {
        let what = format!(
            "{}@{}->{}",
            lease.run_id, commit.expected_version, commit.to_state
        );
        if self.sim.draw(self.sim.faults.lost_request) {
            self.sim.event(Event::Lost {
                worker: lease.worker.clone(),
                what: format!("commit request {what}"),
            });
            return Err(StoreError::unavailable("simulated: request lost"));
        }
        let applied = self
            .inner
            .commit_step(&self.fenced_as(lease).await?, commit, entries)
            .await;
        let outcome = match &applied {
            Ok(r) => {
                self.sim.step_committed();
                self.view.hold(&lease.run_id, lease.epoch, r.version);
                if r.epoch != lease.epoch {
                    self.sim.violation(format!(
                        "invariant 5: {}'s commit {what} under epoch {} was applied while the run \
                         was at epoch {}",
                        lease.worker, lease.epoch, r.epoch
                    ));
                }
                format!("applied v{} {:?}", r.version, r.status)
            }
            Err(e) => format!("refused: {}", error_kind(e)),
        };
        self.sim.event(Event::Commit {
            worker: lease.worker.clone(),
            what: what.clone(),
            epoch: lease.epoch,
            outcome,
        });
        let record = applied?;
        if self.sim.draw(self.sim.faults.lost_ack) {
            self.sim.event(Event::Lost {
                worker: lease.worker.clone(),
                what: format!("commit ack {what}"),
            });
            return Err(StoreError::unavailable("simulated: acknowledgement lost"));
        }
        Ok(record)
    }

    async fn send_signal(
        &self,
        run_id: &str,
        name: &str,
        payload: &Value,
    ) -> Result<i64, StoreError> {
        self.inner.send_signal(run_id, name, payload).await
    }
    async fn quarantine(&self, lease: &Lease, error: RunFailure) -> Result<RunRecord, StoreError> {
        self.sim.violation(format!(
            "run {} quarantined: {}",
            lease.run_id, error.message
        ));
        self.inner.quarantine(lease, error).await
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
}

#[async_trait]
impl OperatorStore for SimStore {
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
        budget: Option<durable_agents_core::store::Budget>,
    ) -> Result<RunRecord, StoreError> {
        self.inner.set_budget(run_id, budget).await
    }
}

#[async_trait]
impl EventLog for SimStore {
    async fn events(
        &self,
        scope: &durable_agents_core::store::EventScope,
        after: durable_agents_core::store::EventCursor,
        limit: usize,
    ) -> Result<Vec<durable_agents_core::store::RunEvent>, StoreError> {
        self.inner.events(scope, after, limit).await
    }
    async fn event_wakes(
        &self,
    ) -> Result<Option<durable_agents_core::store::EventWakes>, StoreError> {
        self.inner.event_wakes().await
    }
}

durable_agents_core::forward_schedule_store!(SimStore => inner);
durable_agents_core::forward_limit_store!(SimStore => inner);

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A store error's kind, without its message (which may carry a time).
fn error_kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::LeaseLost { .. } => "lease lost",
        StoreError::Conflict { .. } => "conflict",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::CancelRequested(_) => "cancel requested",
        _ => "other",
    }
}
