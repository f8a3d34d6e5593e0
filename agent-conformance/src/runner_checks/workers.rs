//! How workers share runs: a suspect alone, old leases expired at start, a takeover on expiry.

use std::sync::Arc;
use std::time::Duration;

use super::{runner, runner_with, start};
use crate::fixture::{Behaviour, Order, World};
use agent_core::runner::{Crash, FaultHook, FaultPoint, SUSPECT_CLAIMS, Worker, WorkerConfig};
use agent_core::store::{RunStatus, Store};

/// Every fault point passed, in order: what ran when, across the runs of a worker. Each
/// tool call holds its thread for a while, so that runs in flight overlap in time.
#[derive(Debug, Default)]
struct Timeline {
    events: std::sync::Mutex<Vec<(FaultPoint, String)>>,
}

impl FaultHook for Timeline {
    fn check(&self, point: FaultPoint, run_id: &str, _: u64) -> Result<(), Crash> {
        if let Ok(mut events) = self.events.lock() {
            events.push((point, run_id.to_owned()));
        }
        if point == FaultPoint::ToolSent {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// A worker runs a suspect (a run with `SUSPECT_CLAIMS` lost claims without a commit) alone: no
/// other run does anything between its claim and its last commit. The runs claimed with it
/// wait uncounted, and every run (the suspect is healthy after all) completes with its
/// count reset.
///
/// # Errors
/// What went wrong.
pub async fn check_worker_runs_suspects_alone(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let timeline = Arc::new(Timeline::default());
    let r = runner_with(&store, &world, "Pay", "suspicious", timeline.clone())?;
    // Older runs first: the suspect is claimed while some of them are in flight.
    let healthy: Vec<String> = (0..6).map(|i| format!("healthy-{i}")).collect();
    for id in &healthy {
        start(&r, id).await?;
    }
    start(&r, "suspect").await?;
    // Workers claimed it and vanished without a commit.
    for n in 0..SUSPECT_CLAIMS {
        store
            .claim_run(
                "suspect",
                &format!("vanished-{n}"),
                Duration::from_millis(1),
            )
            .await
            .map_err(|e| e.to_string())?
            .ok_or("could not claim the run with an expired lease")?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let worker = Worker::new(
        r,
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
    );
    tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
        .await
        .map_err(|_| "the worker did not finish in 30 s")?;
    for id in healthy.iter().chain(std::iter::once(&"suspect".to_owned())) {
        let record = store
            .load_run(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("run vanished")?;
        if record.status != RunStatus::Completed || record.claims_without_progress != 0 {
            return Err(format!(
                "{id} ended {} with claims_without_progress {}",
                record.status, record.claims_without_progress
            ));
        }
    }
    let events = timeline.events.lock().map_err(|e| e.to_string())?.clone();
    let mine = |e: &(FaultPoint, String)| e.1 == "suspect";
    let first = events
        .iter()
        .position(mine)
        .ok_or("the suspect never ran")?;
    let last = events
        .iter()
        .rposition(mine)
        .ok_or("the suspect never ran")?;
    if events[first].0 != FaultPoint::RunClaimed {
        return Err(format!(
            "the suspect's first event is {:?}",
            events[first].0
        ));
    }
    if let Some(other) = events[first..=last].iter().find(|e| !mine(e)) {
        return Err(format!(
            "{} ran ({:?}) while the suspect was running",
            other.1, other.0
        ));
    }
    Ok(())
}

/// A worker restarting under a stable id with `expire_own_leases_at_start` takes over at once
/// the runs its previous process held, and only those; without the setting they wait for
/// their leases.
///
/// # Errors
/// What went wrong.
pub async fn check_worker_expires_its_old_leases_at_start(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let worker_config = |expire: bool| WorkerConfig {
        concurrency: 4,
        poll_interval: Duration::from_millis(10),
        expire_own_leases_at_start: expire,
        retention: None,
    };
    let r = runner(&store, &world, "Pay", "slot-1")?;
    start(&r, "orphaned").await?;
    start(&r, "foreign").await?;
    // The previous process of `slot-1` died holding a long lease; another worker is alive.
    for (run, holder) in [("orphaned", "slot-1"), ("foreign", "slot-2")] {
        store
            .claim_run(run, holder, Duration::from_mins(10))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("could not claim a free run")?;
    }
    let status = |run: &'static str| {
        let store = Arc::clone(&store);
        async move {
            store
                .load_run(run)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{run} vanished"))
        }
    };
    let idle = |worker: Worker<Order, Behaviour>| async move {
        tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
            .await
            .map_err(|_| "the worker did not finish in 30 s".to_owned())
    };
    idle(Worker::new(r.clone(), worker_config(false))).await?;
    let waited = status("orphaned").await?;
    if waited.status.is_final() || waited.lease_owner.as_deref() != Some("slot-1") {
        return Err(format!(
            "without the setting, a run under a live lease of the same id was taken: {} {:?}",
            waited.status, waited.lease_owner
        ));
    }
    idle(Worker::new(r, worker_config(true))).await?;
    let orphaned = status("orphaned").await?;
    if orphaned.status != RunStatus::Completed {
        return Err(format!(
            "the run of the previous process ended {} (want completed at once)",
            orphaned.status
        ));
    }
    let foreign = status("foreign").await?;
    if foreign.version != 0 || foreign.lease_owner.as_deref() != Some("slot-2") {
        return Err(format!(
            "another worker's run was taken: version {}, lease {:?}",
            foreign.version, foreign.lease_owner
        ));
    }
    Ok(())
}

/// A worker with nothing to claim takes a run over when the lease of its dead holder
/// expires, not at its next poll: here the worker polls once an hour, and the run's lease
/// runs out after 300 ms ([`RunStore::next_due`](agent_core::store::RunStore::next_due)).
///
/// # Errors
/// What went wrong.
pub async fn check_worker_takes_over_when_a_lease_expires(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "survivor")?;
    start(&r, "abandoned").await?;
    store
        .claim_run("abandoned", "dead", Duration::from_millis(300))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("could not claim a free run")?;
    let worker = Worker::new(
        r,
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_hours(1),
            expire_own_leases_at_start: false,
            retention: None,
        },
    );
    let finished = {
        let store = Arc::clone(&store);
        async move {
            loop {
                if let Ok(Some(run)) = store.load_run("abandoned").await
                    && run.status.is_final()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(1), worker.run_until(finished))
        .await
        .map_err(|_| {
            "the run was not taken over when its lease expired (the worker polls once an hour)"
                .to_owned()
        })?;
    let run = store
        .load_run("abandoned")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run vanished")?;
    if run.status != RunStatus::Completed {
        return Err(format!("the run taken over ended {}", run.status));
    }
    Ok(())
}
