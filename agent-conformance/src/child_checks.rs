//! Runner-level invariants of child runs, on a real store: the [`Batch`] parent starts one
//! [`Fanout`] child per order and joins them, driven by workers as in production (the
//! parent is found again by `claim_next` once its join holds), with crashes injected at
//! every fault point a tree of runs passes.
//!
//! Listed in [`runner_conformance!`](crate::runner_conformance) with the other runner
//! checks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::fixture::{self, Batch, BatchBehaviour, Fanout, FanoutBehaviour, World};
use agent_core::runner::{
    CrashAt, FaultHook, FaultPoint, NoFaults, Runner, RunnerConfig, Worker, WorkerConfig,
    child_run_id,
};
use agent_core::store::WaitingFor;
use agent_core::store::{
    EntryKind, OperatorNote, RunFilter, RunRecord, RunStatus, Store, TransitionKind,
};

const LEASE: Duration = Duration::from_millis(150);

/// A parent's and its children's workers, on one store and one world.
struct Tree {
    store: Arc<dyn Store>,
    parents: Worker<Batch, BatchBehaviour>,
    children: Worker<Fanout, FanoutBehaviour>,
}

impl Tree {
    fn new(
        store: &Arc<dyn Store>,
        world: &Arc<World>,
        worker: &str,
        faults: Arc<dyn FaultHook>,
        config: impl Fn(RunnerConfig) -> RunnerConfig,
    ) -> Result<Self, String> {
        let base = |id: &str| {
            config(RunnerConfig {
                worker_id: id.to_owned(),
                lease_ttl: LEASE,
                ..RunnerConfig::default()
            })
        };
        let parents = Runner::<Batch, BatchBehaviour>::builder(
            Arc::clone(store),
            BatchBehaviour,
            fixture::tools(world),
        )
        .config(base(&format!("{worker}-parents")))
        .faults(Arc::clone(&faults))
        .build()
        .map_err(|e| e.to_string())?;
        let children = Runner::<Fanout, FanoutBehaviour>::builder(
            Arc::clone(store),
            FanoutBehaviour,
            fixture::tools(world),
        )
        .config(base(&format!("{worker}-children")))
        .faults(faults)
        .build()
        .map_err(|e| e.to_string())?;
        let workers = WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_millis(20),
            ..WorkerConfig::default()
        };
        Ok(Self {
            store: Arc::clone(store),
            parents: Worker::new(parents, workers.clone()),
            children: Worker::new(children, workers),
        })
    }

    fn parent_runner(&self) -> &Runner<Batch, BatchBehaviour> {
        self.parents.runner()
    }

    /// Start parent `id` and give it one step of its own: it starts its children.
    async fn start(&self, id: &str, state: Batch) -> Result<RunRecord, String> {
        let parent = self.parent_runner();
        parent.start(id, state).await.map_err(|e| e.to_string())?;
        parent.run(id).await.map_err(|e| e.to_string())
    }

    /// Run both workers until nothing is claimable, `rounds` times or until `until` holds.
    async fn drive(
        &self,
        run_id: &str,
        rounds: usize,
        until: impl Fn(&RunRecord) -> bool,
    ) -> Result<RunRecord, String> {
        for _ in 0..rounds {
            self.parents.run_until_idle().await;
            self.children.run_until_idle().await;
            let record = load(self.store.as_ref(), run_id).await?;
            if until(&record) {
                return Ok(record);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        load(self.store.as_ref(), run_id).await
    }
}

async fn load(store: &dyn Store, run_id: &str) -> Result<RunRecord, String> {
    store
        .load_run(run_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("run `{run_id}` vanished"))
}

async fn children_of(store: &dyn Store, run_id: &str) -> Result<Vec<RunRecord>, String> {
    let mut kids = store
        .list_runs(&RunFilter {
            spawned_by: Some(run_id.to_owned()),
            ..RunFilter::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    kids.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(kids)
}

fn orders() -> Vec<Vec<String>> {
    [["a", "b"], ["cc", "dd"], ["eee", "fff"]]
        .iter()
        .map(|o| o.iter().map(|s| (*s).to_owned()).collect())
        .collect()
}

fn batch(first: bool) -> Batch {
    Batch::Splitting {
        orders: orders(),
        first,
    }
}

/// Every key applied once; `charges` charges; the parent's read `reads` times.
fn effects_once(world: &World, charges: usize, reads: u32) -> Result<(), String> {
    let w = world.state();
    let mut seen = BTreeSet::new();
    for (tool, key) in &w.applied {
        if !seen.insert(key) {
            return Err(format!("effect `{tool}` with key {key} applied twice"));
        }
    }
    let made = w.applied.iter().filter(|(t, _)| t == "Charge").count();
    if made != charges {
        return Err(format!("{made} charges, expected {charges}"));
    }
    if w.reads != reads {
        return Err(format!(
            "the parent's read ran {} times, expected {reads}: a resumed step serves it from \
             the journal",
            w.reads
        ));
    }
    Ok(())
}

/// The parent's history: start, the wait for its children, then the step that joined them:
/// woken once. With `or_no_wait`, also start then the step: a parent resumed after a crash
/// whose children were all final by then has nothing to wait for.
async fn woken_once(store: &dyn Store, parent: &RunRecord, or_no_wait: bool) -> Result<(), String> {
    let history = store.history(&parent.id).await.map_err(|e| e.to_string())?;
    let kinds: Vec<_> = history.iter().map(|t| (t.kind, t.status)).collect();
    let expected = [
        (TransitionKind::Start, RunStatus::Running),
        (TransitionKind::Status, RunStatus::Waiting),
        (TransitionKind::Step, RunStatus::Completed),
    ];
    if kinds != expected && !(or_no_wait && kinds == [expected[0], expected[2]]) {
        return Err(format!(
            "the parent's history is {kinds:?}, expected {expected:?} (one wait, woken once)"
        ));
    }
    Ok(())
}

/// A parent waits for all its children, stored as waiting and not claimable until the last
/// one is final; it is then woken once and gets their terminal states typed, in creation
/// order. Children have ids derived from the parent, carry their parent, and the parent's
/// read before the join and write after it run once.
///
/// # Errors
/// What went wrong.
pub async fn check_children_join_all(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let tree = Tree::new(&store, &world, "w", Arc::new(NoFaults), |c| c)?;
    let id = "tree-all";
    let waiting = tree.start(id, batch(false)).await?;
    if waiting.status != RunStatus::Waiting
        || waiting.waiting_for != Some(WaitingFor::AllChildren)
        || waiting.version != 1
    {
        return Err(format!(
            "after starting its children the parent must wait for them at v1: {} {:?} v{}",
            waiting.status, waiting.waiting_for, waiting.version
        ));
    }
    let kids = children_of(store.as_ref(), id).await?;
    let ids: Vec<&str> = kids.iter().map(|k| k.id.as_str()).collect();
    let expected: Vec<String> = (0..3).map(|i| child_run_id(id, 0, i)).collect();
    if ids != expected.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(format!("children {ids:?}, expected {expected:?}"));
    }
    for k in &kids {
        let by = k
            .spawned_by
            .as_ref()
            .map(|p| (p.run_id.as_str(), p.version));
        if by != Some((id, 0)) || k.agent != "Fanout" || k.status != RunStatus::Running {
            return Err(format!("child {} is {by:?} {} {}", k.id, k.agent, k.status));
        }
    }
    let batch_agents = ["Batch".to_owned()];
    // Two of three children final: the parent is not claimable.
    let child_runner = tree.children.runner();
    for k in &kids[..2] {
        child_runner.run(&k.id).await.map_err(|e| e.to_string())?;
    }
    let claimed = store
        .claim_next(&batch_agents, "probe", LEASE, 10)
        .await
        .map_err(|e| e.to_string())?;
    if !claimed.is_empty() {
        return Err("a parent with a running child must not be claimable".into());
    }
    child_runner
        .run(&kids[2].id)
        .await
        .map_err(|e| e.to_string())?;
    let parent = tree.drive(id, 3, |r| r.status.is_final()).await?;
    match &parent.state {
        serde_json::Value::Object(o) if o.contains_key("Settled") => {}
        other => return Err(format!("the parent must settle, got {other}")),
    }
    let settled: Batch = serde_json::from_value(parent.state.clone()).map_err(|e| e.to_string())?;
    let Batch::Settled { reservations, .. } = settled else {
        return Err("not settled".into());
    };
    let prefixes: Vec<Vec<String>> = reservations
        .iter()
        .map(|r| {
            r.iter()
                .map(|x| x.split('-').nth(1).unwrap_or("").to_owned())
                .collect()
        })
        .collect();
    if prefixes != orders() {
        return Err(format!(
            "the children's results must come in creation order: {prefixes:?}"
        ));
    }
    effects_once(&world, 1, 1)?;
    woken_once(store.as_ref(), &parent, false).await
}

/// `spawn_first`: the parent is woken by the first child to complete, takes its result, and
/// the children still running are cancelled.
///
/// # Errors
/// What went wrong.
pub async fn check_children_join_first_cancels_the_rest(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let tree = Tree::new(&store, &world, "w", Arc::new(NoFaults), |c| c)?;
    let id = "tree-first";
    let waiting = tree.start(id, batch(true)).await?;
    if waiting.waiting_for != Some(WaitingFor::FirstChild) {
        return Err(format!("expected a wait for the first child: {waiting:?}"));
    }
    let second = child_run_id(id, 0, 1);
    tree.children
        .runner()
        .run(&second)
        .await
        .map_err(|e| e.to_string())?;
    // The parent alone is claimable now: its worker wakes it, and it cancels the others.
    tree.parents.run_until_idle().await;
    let parent = load(store.as_ref(), id).await?;
    let Ok(Batch::Settled { reservations, .. }) = serde_json::from_value(parent.state.clone())
    else {
        return Err(format!(
            "the parent must settle: {} {}",
            parent.status, parent.state
        ));
    };
    if reservations.len() != 1 || !reservations[0][0].starts_with("res-cc-") {
        return Err(format!(
            "the first child to complete was #1: {reservations:?}"
        ));
    }
    tree.drive(id, 3, |_| false).await?;
    for k in children_of(store.as_ref(), id).await? {
        let expected = if k.id == second {
            RunStatus::Completed
        } else {
            RunStatus::Cancelled
        };
        if k.status != expected {
            return Err(format!(
                "child {} is {}, expected {expected}",
                k.id, k.status
            ));
        }
    }
    effects_once(&world, 1, 1)?;
    woken_once(store.as_ref(), &parent, false).await
}

/// A child that fails ends the parent's wait with its failure typed, not a hang; the failed
/// child compensated its own completed calls.
///
/// # Errors
/// What went wrong.
pub async fn check_failed_child_reaches_the_parent(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    world.configure(|w| w.fail_reserve_of = Some("dd".into()));
    let tree = Tree::new(&store, &world, "w", Arc::new(NoFaults), |c| c)?;
    let id = "tree-failed";
    tree.parent_runner()
        .start(id, batch(false))
        .await
        .map_err(|e| e.to_string())?;
    let parent = tree.drive(id, 6, |r| r.status.is_final()).await?;
    let Ok(Batch::Short { failed }) = serde_json::from_value(parent.state.clone()) else {
        return Err(format!(
            "the parent must end short: {} {}",
            parent.status, parent.state
        ));
    };
    let expected = format!("{}: compensated (tool.permanent)", child_run_id(id, 0, 1));
    if failed != [expected.clone()] {
        return Err(format!("failed children {failed:?}, expected [{expected}]"));
    }
    let w = world.state();
    if w.released.len() != 1 || !w.released[0].starts_with("res-cc-") {
        return Err(format!(
            "the failed child must release its one completed reservation: {:?}",
            w.released
        ));
    }
    effects_once(&world, 0, 1)
}

/// Cancelling a waiting parent cancels its running children (their compensations run),
/// through the parent's saga; the parent ends cancelled.
///
/// # Errors
/// What went wrong.
pub async fn check_cancelled_parent_cancels_its_children(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let world = Arc::new(World::default());
    let tree = Tree::new(&store, &world, "w", Arc::new(NoFaults), |c| c)?;
    let id = "tree-cancelled";
    tree.start(id, batch(false)).await?;
    // One child has completed; the other two are still to run.
    tree.children
        .runner()
        .run(&child_run_id(id, 0, 0))
        .await
        .map_err(|e| e.to_string())?;
    store
        .cancel_run(id, &OperatorNote::new("ops", "no longer needed"))
        .await
        .map_err(|e| e.to_string())?;
    let parent = tree.drive(id, 6, |r| r.status.is_final()).await?;
    tree.drive(id, 2, |_| false).await?;
    if parent.status != RunStatus::Cancelled {
        return Err(format!(
            "the parent must end cancelled, got {}",
            parent.status
        ));
    }
    let statuses: Vec<RunStatus> = children_of(store.as_ref(), id)
        .await?
        .iter()
        .map(|k| k.status)
        .collect();
    if statuses
        != [
            RunStatus::Completed,
            RunStatus::Cancelled,
            RunStatus::Cancelled,
        ]
    {
        return Err(format!(
            "the completed child stays completed, the others are cancelled: {statuses:?}"
        ));
    }
    Ok(())
}

/// A step starting more children than `max_children_per_step` fails with a budget error
/// before any child is created.
///
/// # Errors
/// What went wrong.
pub async fn check_children_budget(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let tree = Tree::new(&store, &world, "w", Arc::new(NoFaults), |c| RunnerConfig {
        max_children_per_step: 2,
        ..c
    })?;
    let id = "tree-budget";
    let parent = tree.start(id, batch(false)).await?;
    if parent.status != RunStatus::Failed
        || parent.error.as_ref().map(|e| e.code.as_str()) != Some("budget")
    {
        return Err(format!(
            "expected failed (budget), got {} {:?}",
            parent.status, parent.error
        ));
    }
    if !children_of(store.as_ref(), id).await?.is_empty() {
        return Err("no child may be created beyond the budget".into());
    }
    Ok(())
}

/// Crash at every fault point a tree of runs passes (children started and created, the
/// parent's wait committed, a child's calls and commits, the parent woken), at its 1st to
/// 6th hit, in `spawn_all` and `spawn_first` trees; then resume with fresh workers. Every
/// parent completes exactly as without a crash: 3 children, never a duplicate; each effect
/// applied once; the parent's read once; the parent woken once.
///
/// # Errors
/// What went wrong, naming the fault point.
pub async fn check_crash_sweep_children(store: Arc<dyn Store>) -> Result<(), String> {
    let mut fired = BTreeSet::new();
    for first in [false, true] {
        for point in [
            FaultPoint::RunClaimed,
            FaultPoint::ToolSent,
            FaultPoint::ToolAnswered,
            FaultPoint::CommitSent,
            FaultPoint::CommitApplied,
            FaultPoint::ChildrenStarted,
            FaultPoint::ChildrenCreated,
        ] {
            for nth in 0..6 {
                let world = Arc::new(World::default());
                let hook = Arc::new(CrashAt::new(point, nth));
                let id = format!("tree-sweep-{first}-{point}-{nth}");
                let crashy = Tree::new(&store, &world, "crashy", hook.clone(), |c| c)?;
                crashy
                    .parent_runner()
                    .start(&id, batch(first))
                    .await
                    .map_err(|e| e.to_string())?;
                crashy
                    .drive(&id, 10, |r| r.status.is_final() || hook.fired())
                    .await?;
                if hook.fired() {
                    fired.insert(point);
                    // The crashed worker's leases must expire before others take over.
                    tokio::time::sleep(LEASE + Duration::from_millis(30)).await;
                }
                let healthy = Tree::new(&store, &world, "healthy", Arc::new(NoFaults), |c| c)?;
                let parent = healthy.drive(&id, 20, |r| r.status.is_final()).await?;
                // Let cancelled children finish, too.
                healthy.drive(&id, 2, |_| false).await?;
                let ctx = |e: String| format!("{id}: {e}");
                if parent.status != RunStatus::Completed {
                    return Err(ctx(format!(
                        "status {} ({:?})",
                        parent.status, parent.error
                    )));
                }
                let kids = children_of(store.as_ref(), &id).await.map_err(ctx)?;
                if kids.len() != 3 || kids.iter().any(|k| !k.status.is_final()) {
                    return Err(ctx(format!(
                        "expected 3 final children, got {:?}",
                        kids.iter().map(|k| (&k.id, k.status)).collect::<Vec<_>>()
                    )));
                }
                // A read that answered before the crash is not journaled: it runs again (the
                // parent's read is the first call to answer).
                let reads = if hook.fired() && point == FaultPoint::ToolAnswered && nth == 0 {
                    2
                } else {
                    1
                };
                effects_once(&world, 1, reads).map_err(ctx)?;
                woken_once(store.as_ref(), &parent, true)
                    .await
                    .map_err(ctx)?;
                let starts = store
                    .journal(&id, None)
                    .await
                    .map_err(|e| ctx(e.to_string()))?
                    .into_iter()
                    .filter(|e| e.kind == EntryKind::Child)
                    .count();
                if starts != 1 {
                    return Err(ctx(format!("{starts} child entries, expected 1")));
                }
            }
        }
    }
    for point in [
        FaultPoint::RunClaimed,
        FaultPoint::ToolSent,
        FaultPoint::CommitSent,
        FaultPoint::CommitApplied,
        FaultPoint::ChildrenStarted,
        FaultPoint::ChildrenCreated,
    ] {
        if !fired.contains(&point) {
            return Err(format!("fault point {point} never fired"));
        }
    }
    Ok(())
}
