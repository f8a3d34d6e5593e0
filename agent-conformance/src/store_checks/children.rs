//! Child runs: creating them ([`NewRun::spawned_by`]), listing a parent's children, and
//! `claim_next` finding a parent whose wait for its children
//! ([`WAIT_ALL_CHILDREN`], [`WAIT_FIRST_CHILD`]) holds.
//!
//! Pruning keeps a live run's [`EntryKind::Child`] entries, as it keeps its compensations:
//! a cancel of the run finds its children through them.
//!
//! A parent waiting at version `v` waits for the runs spawned by it at `v - 1`; runs it
//! spawned at other versions, and other parents' children, do not count. A parent with no
//! such child at all has nothing to wait for: it is claimable (the runner never commits
//! such a wait, but a store must not leave the run stuck when one is stored).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, entry, grow, new_run, step, stored, unique};
use agent_core::store::WaitingFor;
use agent_core::store::{
    CallStatus, Claimed, EntryKind, NewRun, RetentionPolicy, RunFailure, RunFilter, RunRecord,
    RunStatus, SpawnedBy, Store, StoreError, WAIT_ALL_CHILDREN, WAIT_FIRST_CHILD,
};

/// A child of `parent`, spawned by its step at `version`.
fn child_run(id: &str, agent: &str, parent: &str, version: u64) -> NewRun {
    new_run(id, agent, json!({ "child": id })).spawned_by(parent, version)
}

async fn spawn(
    store: &Arc<dyn Store>,
    agent: &str,
    parent: &str,
    version: u64,
) -> Result<RunRecord, String> {
    store
        .create_run(child_run(&unique("child"), agent, parent, version))
        .await
        .ctx("create_run of a child")
}

/// A running parent of agent `agent` and a running child it spawned at version 0.
pub(super) async fn children_of(
    store: &Arc<dyn Store>,
    agent: &str,
) -> Result<(RunRecord, RunRecord), String> {
    let parent = store
        .create_run(new_run(&unique("parent"), agent, json!({})))
        .await
        .ctx("create_run")?;
    let child = spawn(store, "Child", &parent.id, 0).await?;
    Ok((parent, child))
}

/// A parent run of `agent` that has spawned `children` (agent `child_agent`) at each
/// version before `wait_version` given, then committed a wait for them (`waiting_for`) at
/// `wait_version`, its lease released. Returns the parent and, per step, its children.
async fn waiting_parent(
    store: &Arc<dyn Store>,
    agent: &str,
    child_agent: &str,
    children_per_step: &[usize],
    waiting_for: &str,
) -> Result<(RunRecord, Vec<Vec<RunRecord>>), String> {
    let parent = store
        .create_run(new_run(&unique("parent"), agent, json!({})))
        .await
        .ctx("create_run of a parent")?;
    let lease = claim(store, &parent.id, "setup").await?;
    let mut spawned = Vec::new();
    let steps = children_per_step.len();
    for ((v, &n), i) in (0_u64..).zip(children_per_step).zip(1..) {
        let mut step_children = Vec::new();
        for _ in 0..n {
            step_children.push(spawn(store, child_agent, &parent.id, v).await?);
        }
        spawned.push(step_children);
        let mut c = step(v, json!({ "step": v }));
        if i == steps {
            c.status = RunStatus::Waiting;
            c.waiting_for = Some(WaitingFor::parse(waiting_for));
        }
        store
            .commit_step(&lease, &c, &[])
            .await
            .ctx("commit of the parent")?;
    }
    store.release_lease(&lease).await.ctx("release_lease")?;
    let parent = stored(store, &parent.id).await?;
    Ok((parent, spawned))
}

/// The runs of `agent` that `claim_next` returns now, handed back at once (so that the
/// probe neither holds them nor counts against them).
async fn claimable(store: &Arc<dyn Store>, agent: &str) -> Result<BTreeSet<String>, String> {
    let claimed = store
        .claim_next(&[agent.to_owned()], "probe", LONG, 20)
        .await
        .ctx("claim_next")?;
    let mut ids = BTreeSet::new();
    for Claimed { lease, .. } in &claimed {
        store.hand_back(lease).await.ctx("hand_back")?;
        ids.insert(lease.run_id.clone());
    }
    Ok(ids)
}

/// Whether `parent` is claimable now, as `want` says; `when` describes the situation.
async fn expect_claimable(
    store: &Arc<dyn Store>,
    agent: &str,
    parent: &RunRecord,
    want: bool,
    when: &str,
) -> CheckResult {
    let got = claimable(store, agent).await?;
    let expected: BTreeSet<String> = if want {
        BTreeSet::from([parent.id.clone()])
    } else {
        BTreeSet::new()
    };
    ensure!(
        got == expected,
        "parent waiting for {:?} at version {}: claim_next {} it {when} (claimed {got:?})",
        parent.waiting_for,
        parent.version,
        if want { "did not return" } else { "returned" },
    );
    Ok(())
}

async fn finish(store: &Arc<dyn Store>, run: &RunRecord, status: RunStatus) -> CheckResult {
    let error = (status != RunStatus::Completed).then(|| RunFailure {
        code: "child.ended".into(),
        message: format!("ended as {status}"),
    });
    store
        .set_status(&run.id, status, error)
        .await
        .ctx("set_status of a child")?;
    Ok(())
}

/// A child run keeps its parent; creating it again with the same content returns it,
/// with another parent (or version, or none) is `AlreadyExists`; forks of a child are no
/// one's child.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_child_creation_is_idempotent(store: Arc<dyn Store>) -> CheckResult {
    let parent = store
        .create_run(new_run(&unique("parent"), "Parent", json!({})))
        .await
        .ctx("create_run")?;
    ensure!(
        parent.spawned_by.is_none(),
        "a run created without a parent has spawned_by {:?}",
        parent.spawned_by
    );
    let id = unique("child");
    let want = Some(SpawnedBy {
        run_id: parent.id.clone(),
        version: 3,
    });
    let first = store
        .create_run(child_run(&id, "Child", &parent.id, 3))
        .await
        .ctx("create_run of a child")?;
    ensure!(
        first.spawned_by == want,
        "created child has spawned_by {:?}, want {want:?}",
        first.spawned_by
    );
    let loaded = stored(&store, &id).await?;
    ensure!(
        loaded.spawned_by == want,
        "loaded child has spawned_by {:?}, want {want:?}",
        loaded.spawned_by
    );
    let again = store
        .create_run(child_run(&id, "Child", &parent.id, 3))
        .await
        .ctx("create_run of the same child again")?;
    ensure!(
        again == first,
        "creating the same child again changed it: {again:?} vs {first:?}"
    );
    for (what, other) in [
        (
            "another parent",
            child_run(&id, "Child", "some-other-run", 3),
        ),
        ("another version", child_run(&id, "Child", &parent.id, 4)),
        ("no parent", new_run(&id, "Child", json!({ "child": id }))),
    ] {
        let result = store.create_run(other).await;
        ensure!(
            matches!(result, Err(StoreError::AlreadyExists(_))),
            "creating child `{id}` again with {what} must be AlreadyExists, got {result:?}"
        );
    }
    // The same content as a child run's but the parent.
    let plain_id = unique("plain");
    store
        .create_run(new_run(&plain_id, "Child", json!({ "child": plain_id })))
        .await
        .ctx("create_run")?;
    let result = store
        .create_run(child_run(&plain_id, "Child", &parent.id, 0))
        .await;
    ensure!(
        matches!(result, Err(StoreError::AlreadyExists(_))),
        "creating run `{plain_id}` again as a child must be AlreadyExists, got {result:?}"
    );
    let fork = store
        .fork(&id, 0, &unique("fork"))
        .await
        .ctx("fork of a child")?;
    ensure!(
        fork.spawned_by.is_none(),
        "a fork of a child is no one's child, it has spawned_by {:?}",
        fork.spawned_by
    );
    Ok(())
}

/// `list_runs` with [`RunFilter::spawned_by`] returns exactly that parent's children, of
/// every version, with the other filters still applied.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_list_runs_by_parent(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Kids");
    let parent = store
        .create_run(new_run(&unique("parent"), &agent, json!({})))
        .await
        .ctx("create_run")?;
    let other = store
        .create_run(new_run(&unique("other"), &agent, json!({})))
        .await
        .ctx("create_run")?;
    let mut mine = Vec::new();
    for v in [0, 0, 2] {
        mine.push(spawn(&store, &agent, &parent.id, v).await?);
    }
    let theirs = spawn(&store, &agent, &other.id, 0).await?;
    // A fork names the parent as its source, but it is not a child.
    store
        .fork(&parent.id, 0, &unique("fork"))
        .await
        .ctx("fork")?;
    // A child of one of the children: a grandchild is not the parent's child.
    spawn(&store, &agent, &mine[0].id, 0).await?;

    let list = |filter: RunFilter| {
        let store = Arc::clone(&store);
        async move {
            let runs = store.list_runs(&filter).await.ctx("list_runs")?;
            for r in &runs {
                ensure!(
                    r.spawned_by.as_ref().map(|p| &p.run_id) == filter.spawned_by.as_ref(),
                    "list_runs by parent {:?} listed `{}`, spawned by {:?}",
                    filter.spawned_by,
                    r.id,
                    r.spawned_by
                );
            }
            Ok::<BTreeSet<String>, String>(runs.into_iter().map(|r| r.id).collect())
        }
    };
    let ids = |runs: &[&RunRecord]| runs.iter().map(|r| r.id.clone()).collect::<BTreeSet<_>>();
    let by = |parent: &str| RunFilter {
        spawned_by: Some(parent.to_owned()),
        ..RunFilter::default()
    };

    let got = list(by(&parent.id)).await?;
    let want = ids(&mine.iter().collect::<Vec<_>>());
    ensure!(
        got == want,
        "list_runs spawned_by `{}`: got {got:?}, want {want:?}",
        parent.id
    );
    let got = list(by(&other.id)).await?;
    ensure!(
        got == ids(&[&theirs]),
        "list_runs spawned_by `{}`: got {got:?}, want only `{}`",
        other.id,
        theirs.id
    );
    let got = list(by("no-such-parent")).await?;
    ensure!(
        got.is_empty(),
        "list_runs spawned_by an unknown run listed {got:?}"
    );

    finish(&store, &mine[1], RunStatus::Completed).await?;
    let got = list(RunFilter {
        statuses: vec![RunStatus::Completed],
        agent: Some(agent.clone()),
        ..by(&parent.id)
    })
    .await?;
    ensure!(
        got == ids(&[&mine[1]]),
        "list_runs of the parent's completed children: got {got:?}, want only `{}`",
        mine[1].id
    );
    let got = list(RunFilter {
        agent: Some(unique("Nobody")),
        ..by(&parent.id)
    })
    .await?;
    ensure!(
        got.is_empty(),
        "list_runs by parent and another agent listed {got:?}"
    );
    let got = list(RunFilter {
        limit: Some(2),
        ..by(&parent.id)
    })
    .await?;
    ensure!(
        got.len() == 2 && got.is_subset(&want),
        "list_runs by parent with limit 2 listed {got:?}"
    );
    Ok(())
}

/// A parent waiting for [`WAIT_ALL_CHILDREN`] is not claimed while one child of its step
/// (`version - 1`) is not final, and is once all are; children of its other steps and of
/// other parents do not count. A parent with no child at that version is claimable.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_claim_next_waits_for_all_children(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Join");
    let kids = unique("JoinKid");
    // Children at version 0 (an earlier step's, left running) and 1 (the step that waits).
    let (parent, spawned) =
        waiting_parent(&store, &agent, &kids, &[1, 3], WAIT_ALL_CHILDREN).await?;
    ensure!(
        parent.version == 2 && parent.status == RunStatus::Waiting,
        "the parent's wait was stored as version {} {}",
        parent.version,
        parent.status
    );
    let (earlier, joined) = (&spawned[0][0], &spawned[1]);
    // Runs that must not count: a child spawned at the wait's own version, and another
    // parent's child at version 1.
    let later = spawn(&store, &kids, &parent.id, 2).await?;
    let stranger = store
        .create_run(new_run(&unique("stranger"), &kids, json!({})))
        .await
        .ctx("create_run")?;
    let strangers_child = spawn(&store, &kids, &stranger.id, 1).await?;

    expect_claimable(
        &store,
        &agent,
        &parent,
        false,
        "with three children running",
    )
    .await?;
    finish(&store, &joined[0], RunStatus::Completed).await?;
    expect_claimable(&store, &agent, &parent, false, "with two children running").await?;
    // A child that is waiting is not final either; commit it there, then to failed.
    let lease = claim(&store, &joined[1].id, "child-worker").await?;
    let mut wait = step(0, json!({}));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some("go".into());
    store
        .commit_step(&lease, &wait, &[])
        .await
        .ctx("commit of a child")?;
    finish(&store, &joined[2], RunStatus::Cancelled).await?;
    expect_claimable(&store, &agent, &parent, false, "with one child waiting").await?;
    let mut failed = step(1, json!({}));
    failed.status = RunStatus::Failed;
    failed.error = Some(RunFailure {
        code: "child.failed".into(),
        message: "failed".into(),
    });
    store
        .commit_step(&lease, &failed, &[])
        .await
        .ctx("final commit of a child")?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        true,
        "with all its children final (children of its other steps and of other \
         parents still running)",
    )
    .await?;
    for r in [earlier, &later, &strangers_child] {
        let r = stored(&store, &r.id).await?;
        ensure!(
            r.status == RunStatus::Running,
            "child `{}` that must not count is {}",
            r.id,
            r.status
        );
    }
    let claimed = store
        .claim_next(std::slice::from_ref(&agent), "w", LONG, 5)
        .await
        .ctx("claim_next")?;
    ensure!(
        claimed.len() == 1
            && claimed[0].record.id == parent.id
            && claimed[0].record.waiting_for == Some(WaitingFor::AllChildren)
            && claimed[0].record.version == 2,
        "claim_next of the parent returned {claimed:?}"
    );
    store.hand_back(&claimed[0].lease).await.ctx("hand_back")?;

    // Nothing to wait for: no child at version 0 (its only child is at version 1).
    let lonely_agent = unique("Lonely");
    let (lonely, _) = waiting_parent(&store, &lonely_agent, &kids, &[0], WAIT_ALL_CHILDREN).await?;
    spawn(&store, &kids, &lonely.id, 1).await?;
    expect_claimable(
        &store,
        &lonely_agent,
        &lonely,
        true,
        "without any child at version 0",
    )
    .await?;
    Ok(())
}

/// A parent waiting for [`WAIT_FIRST_CHILD`] is claimable as soon as one child of its
/// step (`version - 1`) completed, or once all of them are final without any completed;
/// not while none completed and one is not final. A completed child of another version
/// does not count.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_claim_next_wakes_on_first_child(store: Arc<dyn Store>) -> CheckResult {
    let kids = unique("RaceKid");

    // One completes while the others are still running.
    let agent = unique("Race");
    let (parent, spawned) = waiting_parent(&store, &agent, &kids, &[3], WAIT_FIRST_CHILD).await?;
    let children = &spawned[0];
    // Completed children that must not count: one of the wait's own version, and another
    // parent's at version 0.
    let later = spawn(&store, &kids, &parent.id, 1).await?;
    finish(&store, &later, RunStatus::Completed).await?;
    let stranger = store
        .create_run(new_run(&unique("stranger"), &kids, json!({})))
        .await
        .ctx("create_run")?;
    let strangers_child = spawn(&store, &kids, &stranger.id, 0).await?;
    finish(&store, &strangers_child, RunStatus::Completed).await?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        false,
        "with its children running (a completed child of version 1 and one of another \
         parent do not count)",
    )
    .await?;
    finish(&store, &children[0], RunStatus::Failed).await?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        false,
        "with one child failed and two running",
    )
    .await?;
    // Completed by its own final commit, as the runner does.
    let lease = claim(&store, &children[1].id, "child-worker").await?;
    let mut done = step(0, json!({ "done": true }));
    done.status = RunStatus::Completed;
    store
        .commit_step(&lease, &done, &[])
        .await
        .ctx("final commit of a child")?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        true,
        "with one child completed and one still running",
    )
    .await?;

    // None completes: claimable once all are final.
    let agent = unique("Race");
    let (parent, spawned) = waiting_parent(&store, &agent, &kids, &[2], WAIT_FIRST_CHILD).await?;
    finish(&store, &spawned[0][0], RunStatus::Failed).await?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        false,
        "with one child failed and one running",
    )
    .await?;
    finish(&store, &spawned[0][1], RunStatus::Terminated).await?;
    expect_claimable(
        &store,
        &agent,
        &parent,
        true,
        "with all its children final, none completed",
    )
    .await?;

    // Nothing to wait for.
    let agent = unique("Race");
    let (parent, _) = waiting_parent(&store, &agent, &kids, &[0], WAIT_FIRST_CHILD).await?;
    expect_claimable(&store, &agent, &parent, true, "without any child").await?;
    Ok(())
}

/// Pruning a live run keeps its journal entries of kind [`EntryKind::Child`] (the children
/// it started, which a cancel of the run reaches through them), as it keeps compensations,
/// and removes its other old entries.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_prune_keeps_child_entries(store: Arc<dyn Store>) -> CheckResult {
    let parent = store
        .create_run(new_run(&unique("parent"), "Parent", json!({ "items": [] })))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &parent.id, "w").await?;
    let mut started = entry(&parent.id, 0, 0, CallStatus::Succeeded, None);
    started.kind = EntryKind::Child;
    started.tool_kind = None;
    started.idempotency_key = None;
    started.name = "Child".into();
    let child = spawn(&store, "Child", &parent.id, 0).await?;
    started.output = Some(json!([child.id]));
    store
        .record_entry(&lease, &started)
        .await
        .ctx("record_entry of a child entry")?;
    let plain = entry(&parent.id, 0, 1, CallStatus::Succeeded, Some(json!("ok")));
    store
        .record_entry(&lease, &plain)
        .await
        .ctx("record_entry")?;
    grow(&store, &lease, 0, 6).await?;
    store
        .prune(&RetentionPolicy {
            keep_last_versions: 2,
            only_final_runs: false,
            ..RetentionPolicy::default()
        })
        .await
        .ctx("prune")?;
    let kept = store.journal(&parent.id, Some(0)).await.ctx("journal")?;
    let kinds: Vec<(u32, EntryKind)> = kept.iter().map(|e| (e.seq, e.kind)).collect();
    ensure!(
        kinds == [(0, EntryKind::Child)],
        "after pruning live run `{}` to 2 versions, its entries of version 0 are {kinds:?}, \
         want only the child entry (seq 0)",
        parent.id
    );
    ensure!(
        kept[0].output == started.output,
        "the kept child entry changed: {:?}",
        kept[0]
    );
    Ok(())
}

/// An operator's cancel of a parent reaches its children in the same write, and theirs: a
/// child a worker holds gets the request (its holder's next commit is refused), a free one
/// moves to compensating, a grandchild too, each with a note naming the parent; a final
/// child, and one started in a state whose children outlive the run, are left alone. Every
/// chain verifies.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_reaches_children(store: Arc<dyn Store>) -> CheckResult {
    use agent_core::store::operator::child_cancel_note;
    use agent_core::store::{OperatorNote, TransitionKind};

    let agent = unique("cascade");
    // A graph whose `Start` state's children outlive the run.
    let mut graph = <crate::fixture::Order as agent_core::Agent>::graph().clone();
    graph.agent.clone_from(&agent);
    for s in &mut graph.states {
        s.children_outlive = s.name == "Start";
    }
    store.register_agent(&graph).await.ctx("register_agent")?;
    let fp = graph.fingerprint();
    let parent = store
        .create_run(NewRun::new(
            unique("parent"),
            &agent,
            &fp,
            "Start",
            json!({}),
        ))
        .await
        .ctx("create_run of the parent")?;
    let outliving = spawn(&store, "Child", &parent.id, 0).await?;
    let lease = claim(&store, &parent.id, "setup").await?;
    let to_decide = agent_core::store::StepCommit {
        to_state: "Decide".to_owned(),
        ..step(0, json!({ "step": 0 }))
    };
    store
        .commit_step(&lease, &to_decide, &[])
        .await
        .ctx("commit of the parent")?;
    let held = spawn(&store, "Child", &parent.id, 1).await?;
    let free = spawn(&store, "Child", &parent.id, 1).await?;
    let done = spawn(&store, "Child", &parent.id, 1).await?;
    let grandchild = spawn(&store, "Grandchild", &free.id, 0).await?;
    let done_lease = claim(&store, &done.id, "cw").await?;
    store
        .commit_step(
            &done_lease,
            &agent_core::store::StepCommit {
                status: RunStatus::Completed,
                ..step(0, json!({}))
            },
            &[],
        )
        .await
        .ctx("complete a child")?;
    let held_lease = claim(&store, &held.id, "cw").await?;
    let wait = agent_core::store::StepCommit {
        from_state: "Decide".to_owned(),
        to_state: "Decide".to_owned(),
        status: RunStatus::Waiting,
        waiting_for: Some(WaitingFor::AllChildren),
        ..step(1, json!({ "step": 1 }))
    };
    store
        .commit_step(&lease, &wait, &[])
        .await
        .ctx("the parent's wait")?;
    store.release_lease(&lease).await.ctx("release_lease")?;

    let note = OperatorNote::new("alice", "customer left");
    let cancelled = store
        .cancel_run(&parent.id, &note)
        .await
        .ctx("cancel_run of the parent")?;
    ensure!(
        cancelled.status == RunStatus::Compensating,
        "the parent must be compensating, got {cancelled:?}"
    );
    let to_child = child_cancel_note(&parent.id, &note);
    let held_now = stored(&store, &held.id).await?;
    ensure!(
        held_now.cancel_requested.as_ref() == Some(&to_child)
            && held_now.status == RunStatus::Running,
        "a held child must get the cancel request naming its parent, got {held_now:?}"
    );
    ensure!(
        matches!(
            store
                .commit_step(&held_lease, &step(0, json!({ "late": true })), &[])
                .await,
            Err(StoreError::CancelRequested(_))
        ),
        "the holder of a child must not commit a step after its parent's cancel"
    );
    let free_now = stored(&store, &free.id).await?;
    ensure!(
        free_now.status == RunStatus::Compensating,
        "a free child must be compensating, got {free_now:?}"
    );
    let last = store.history(&free.id).await.ctx("history")?;
    let last = last.last().ok_or("no history")?;
    ensure!(
        last.kind == TransitionKind::Cancel && last.note.as_ref() == Some(&to_child),
        "the child's cancel must carry the note naming its parent, got {last:?}"
    );
    let grand_now = stored(&store, &grandchild.id).await?;
    ensure!(
        grand_now.status == RunStatus::Compensating
            && grand_now
                .error
                .as_ref()
                .is_some_and(|e| e.message.contains(&free.id)),
        "a grandchild must be cancelled with its own parent named, got {grand_now:?}"
    );
    let outliving_now = stored(&store, &outliving.id).await?;
    ensure!(
        outliving_now.status == RunStatus::Running && outliving_now.cancel_requested.is_none(),
        "a child of a `children_outlive` state must be left alone, got {outliving_now:?}"
    );
    let done_now = stored(&store, &done.id).await?;
    ensure!(
        done_now.status == RunStatus::Completed && done_now.version == 1,
        "a completed child must be left alone, got {done_now:?}"
    );
    for id in [&parent.id, &free.id, &grandchild.id, &done.id] {
        super::verify_chain(&store, id).await?;
    }
    Ok(())
}
