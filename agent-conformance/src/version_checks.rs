//! Runner-level checks of versioned agents: a run started on version 1 of the fixture
//! agent finishes on version 2 with its effects applied once, and a compensating version 1
//! run is compensated by a version 2 runner at its own version.
//!
//! Version 2 is [`OrderV2`], written by hand (a test stand-in for what
//! `#[agent(version = 2, migrate_from(Order, with = ...))]` generates): the same states as
//! [`Order`], its graph marked version 2 (so its fingerprint differs), a migration from
//! version 1 that maps every state to itself.

use std::sync::{Arc, LazyLock};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::fixture::{self, Behaviour, Order, World};
use agent_core::agent::{Agent, Handle, StepError, StepIo};
use agent_core::graph::GraphDescription;
use agent_core::runner::{CrashAt, FaultHook, FaultPoint, NoFaults, Runner, RunnerConfig};
use agent_core::store::verify::verify_run;
use agent_core::store::{CallStatus, EntryKind, RunStatus, Store, TransitionKind};
use agent_core::versions::{MigrationError, OlderVersion};

/// Version 2 of the fixture agent (a hand-written test stand-in for the derive's output).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderV2(pub Order);

static GRAPH_V2: LazyLock<GraphDescription> = LazyLock::new(|| {
    let mut graph = Order::graph().clone();
    graph.version = 2;
    graph
});

impl Agent for OrderV2 {
    const NAME: &'static str = Order::NAME;
    const VERSION: u32 = 2;

    fn graph() -> &'static GraphDescription {
        &GRAPH_V2
    }

    fn state_name(&self) -> &'static str {
        self.0.state_name()
    }

    fn migrate(from: u32, state: Value) -> Option<Result<Value, MigrationError>> {
        match from {
            2 => Some(Ok(state)),
            1 => Some(
                serde_json::from_value::<Order>(state)
                    .map_err(|e| MigrationError::Unreadable {
                        agent: Order::NAME.to_owned(),
                        version: 1,
                        message: e.to_string(),
                    })
                    .and_then(|old| {
                        serde_json::to_value(Self(old)).map_err(|e| MigrationError::Unwritable {
                            agent: Order::NAME.to_owned(),
                            version: 2,
                            message: e.to_string(),
                        })
                    }),
            ),
            _ => None,
        }
    }

    fn older_versions() -> Vec<OlderVersion> {
        vec![OlderVersion {
            version: 1,
            graph: Order::graph(),
            skipped_signals: Vec::new(),
        }]
    }

    // Its version 1's `on_error` states, which the derive built for `Order`.
    fn __on_error(from: &str, failure: agent_core::agent::Failure) -> Option<Self> {
        Order::__on_error(from, failure).map(Self)
    }
}

// Like its version 1, routed by the model in one state.
impl agent_core::agent::RoutedByLlm for OrderV2 {}

impl Handle<Behaviour> for OrderV2 {
    fn handle<'a>(
        self,
        handlers: &'a Behaviour,
        io: &'a dyn StepIo,
    ) -> BoxFuture<'a, Result<Self, StepError>> {
        Box::pin(async move { self.0.handle(handlers, io).await.map(Self) })
    }
}

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: std::time::Duration::from_millis(150),
        ..RunnerConfig::default()
    }
}

fn v1(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
) -> Result<Runner<Order, Behaviour>, String> {
    v1_with(store, world, choice, Arc::new(NoFaults))
}

fn v1_with(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
    faults: Arc<dyn FaultHook>,
) -> Result<Runner<Order, Behaviour>, String> {
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(world))
        .router(Arc::new(fixture::router(choice)))
        .config(config("worker-v1"))
        .faults(faults)
        .build()
        .map_err(|e| e.to_string())
}

fn v2(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
) -> Result<Runner<OrderV2, Behaviour>, String> {
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(world))
        .router(Arc::new(fixture::router(choice)))
        .config(config("worker-v2"))
        .build()
        .map_err(|e| e.to_string())
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Every effect key applied once, and executed once.
fn effects_once(world: &World) -> Result<(), String> {
    let w = world.state();
    let mut keys: Vec<&String> = w.applied.iter().map(|(_, k)| k).collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    ensure(keys.len() == n, || {
        format!("an effect applied twice: {:?}", w.applied)
    })?;
    ensure(w.executions.values().all(|n| *n == 1), || {
        format!("a write executed again: {:?}", w.executions)
    })
}

/// A run started on version 1 crashes mid-step after its hybrid reservations completed
/// (before the step's commit); a version 2 runner migrates it (once, carrying the
/// interrupted step's calls over by index), replays them from the journal, and finishes the
/// run: every write applied and executed once, one `migrated` transition, the chain
/// verified across it, the run on version 2.
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_v1_run_interrupted_mid_step_finishes_on_v2(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let crash = Arc::new(CrashAt::new(FaultPoint::CommitSent, 0));
    let old = v1_with(&store, &world, "Pay", crash.clone())?;
    old.start("mig", fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    let crashed = old.run("mig").await;
    ensure(crash.fired() && crashed.is_err(), || {
        format!("the version 1 runner did not crash: {crashed:?}")
    })?;
    let reserved = world.state().reserved.len();
    ensure(reserved == 2, || {
        format!("{reserved} reservations before the crash")
    })?;
    drop(old);
    // Let the crashed runner's lease run out.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let new = v2(&store, &world, "Pay")?;
    let record = new.run("mig").await.map_err(|e| e.to_string())?;
    ensure(
        record.status == RunStatus::Waiting && record.agent_version == 2,
        || {
            format!(
                "after the migration: {} on version {}",
                record.status, record.agent_version
            )
        },
    )?;
    new.signal("mig", "confirm", json!({"ok": true}))
        .await
        .map_err(|e| e.to_string())?;
    let record = new.run("mig").await.map_err(|e| e.to_string())?;
    ensure(record.status == RunStatus::Completed, || {
        format!("ended {}", record.status)
    })?;
    let w = world.state();
    ensure(w.reserved.len() == 2 && w.held.len() == 2, || {
        format!("reservations made again: {:?}", w.reserved)
    })?;
    effects_once(&world)?;
    let history = store.history("mig").await.map_err(|e| e.to_string())?;
    let migrated: Vec<_> = (history.iter())
        .filter(|t| t.kind == TransitionKind::Migrated)
        .collect();
    ensure(migrated.len() == 1 && migrated[0].version == 1, || {
        format!("migrations: {migrated:?}")
    })?;
    // The interrupted step's calls stayed at its base (version 0) and were not made again
    // at the migration's version.
    let journal = store
        .journal("mig", None)
        .await
        .map_err(|e| e.to_string())?;
    let reserve_calls: Vec<_> = (journal.iter())
        .filter(|e| e.kind == EntryKind::Tool && e.name == "Reserve")
        .collect();
    ensure(
        reserve_calls.len() == 2
            && reserve_calls
                .iter()
                .all(|e| e.version == 0 && e.status == CallStatus::Succeeded),
        || format!("reserve calls: {reserve_calls:?}"),
    )?;
    let report = verify_run(store.as_ref(), &record)
        .await
        .map_err(|e| e.to_string())?;
    ensure(report.problem.is_none(), || {
        format!("the chain does not verify: {:?}", report.problem)
    })?;
    // A version 1 runner cannot run it any more, and leaves it alone.
    let old = v1(&store, &world, "Pay")?;
    ensure(
        old.run("mig")
            .await
            .is_ok_and(|r| r.status == RunStatus::Completed),
        || "a final run reads the same to any version".to_owned(),
    )
}

/// A version 1 run that failed into its compensating state crashes before its
/// compensations; a version 2 runner compensates it at version 1 (no migration), every
/// reservation released exactly once, and the run ends compensated on version 1.
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_compensating_v1_run_is_compensated_by_v2(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let crash = Arc::new(CrashAt::new(FaultPoint::CompensationRegistered, 0));
    let old = v1_with(&store, &world, "Cancelled", crash.clone())?;
    old.start("comp", fixture::initial(&["a", "bb", "ccc"]))
        .await
        .map_err(|e| e.to_string())?;
    let crashed = old.run("comp").await;
    ensure(crash.fired() && crashed.is_err(), || {
        format!("the version 1 runner did not crash: {crashed:?}")
    })?;
    let before = store
        .load_run("comp")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run")?;
    ensure(before.status == RunStatus::Compensating, || {
        format!("the run is {} before the takeover", before.status)
    })?;
    drop(old);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let new = v2(&store, &world, "Cancelled")?;
    let record = new.run("comp").await.map_err(|e| e.to_string())?;
    ensure(
        record.status == RunStatus::Compensated && record.agent_version == 1,
        || {
            format!(
                "ended {} on version {}",
                record.status, record.agent_version
            )
        },
    )?;
    let w = world.state();
    let mut released = w.released.clone();
    released.sort();
    let mut reserved = w.reserved.clone();
    reserved.sort();
    ensure(released == reserved && w.held.is_empty(), || {
        format!("reserved {:?}, released {:?}", w.reserved, w.released)
    })?;
    effects_once(&world)?;
    let history = store.history("comp").await.map_err(|e| e.to_string())?;
    ensure(
        history.iter().all(|t| t.kind != TransitionKind::Migrated),
        || "a compensating run was migrated".to_owned(),
    )?;
    let report = verify_run(store.as_ref(), &record)
        .await
        .map_err(|e| e.to_string())?;
    ensure(report.problem.is_none(), || {
        format!("the chain does not verify: {:?}", report.problem)
    })
}

/// A version 1 runner does not run a run already on version 2: it is an error naming the
/// versions, and the run is left as it is (not quarantined).
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_older_runner_leaves_newer_runs_alone(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let new = v2(&store, &world, "Pay")?;
    new.start("newer", OrderV2(fixture::initial(&["a"])))
        .await
        .map_err(|e| e.to_string())?;
    let old = v1(&store, &world, "Pay")?;
    let refused = old.run("newer").await;
    ensure(
        matches!(
            refused,
            Err(agent_core::runner::RunnerError::VersionNotRunnable { version: 2, .. })
        ),
        || format!("a version 1 runner on a version 2 run: {refused:?}"),
    )?;
    let run = store
        .load_run("newer")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run")?;
    ensure(
        run.version == 0 && run.status == RunStatus::Running && run.lease_owner.is_none(),
        || format!("the run was touched: {run:?}"),
    )?;
    ensure(world.state().reserved.is_empty(), || {
        "a version 1 runner executed a version 2 run".to_owned()
    })?;
    // A worker of version 1 does not claim it either.
    let worker = agent_core::runner::Worker::new(old, agent_core::runner::WorkerConfig::default());
    let report = worker.version_report().await.map_err(|e| e.to_string())?;
    ensure(report.unrunnable.get(&2) == Some(&1), || {
        format!("the version 1 worker's report: {report:?}")
    })?;
    worker.run_until_idle().await;
    let run = store
        .load_run("newer")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run")?;
    ensure(run.version == 0, || {
        "a version 1 worker claimed a version 2 run".to_owned()
    })?;
    // The version 2 worker runs it.
    let worker = agent_core::runner::Worker::new(new, agent_core::runner::WorkerConfig::default());
    worker.run_until_idle().await;
    let run = store
        .load_run("newer")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run")?;
    ensure(run.status == RunStatus::Waiting, || {
        format!("the version 2 worker left it {}", run.status)
    })
}
