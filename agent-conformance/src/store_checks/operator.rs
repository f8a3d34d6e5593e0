//! Operators' verbs: terminate, cancel and drop a signal (fenced, idempotent, hash-chained).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, create, new_run, step, stored, unique, verify_chain};
use agent_core::store::FailureCode;
use agent_core::store::FailureCode::{Cancelled as CANCELLED, Terminated as TERMINATED};
use agent_core::store::WaitingFor;
use agent_core::store::{
    Claimed, Lease, OperatorNote, RunRecord, RunStatus, StepCommit, Store, StoreError,
    TransitionKind,
};

fn note(reason: &str) -> OperatorNote {
    OperatorNote::new("alice", reason)
}

/// A new run of `agent` committed into waiting for a signal under `worker`'s lease, which
/// is released unless `keep_lease`; with the lease.
async fn waiting_run(
    store: &Arc<dyn Store>,
    agent: &str,
    worker: &str,
    keep_lease: bool,
) -> Result<(RunRecord, Lease), String> {
    let run = store
        .create_run(new_run(&unique("waiting"), agent, json!({})))
        .await
        .ctx("create_run")?;
    let lease = claim(store, &run.id, worker).await?;
    let commit = StepCommit {
        status: RunStatus::Waiting,
        waiting_for: Some(WaitingFor::signal("approval")),
        ..step(0, json!({ "waiting": true }))
    };
    store
        .commit_step(&lease, &commit, &[])
        .await
        .ctx("commit_step to waiting")?;
    if !keep_lease {
        store.release_lease(&lease).await.ctx("release_lease")?;
    }
    Ok((run, lease))
}

/// The last transition of `run_id` is the operator's `kind` with `note`, at the run's
/// version, and the chain verifies.
async fn ends_with(
    store: &Arc<dyn Store>,
    run: &RunRecord,
    kind: TransitionKind,
    note: &OperatorNote,
) -> CheckResult {
    let history = store.history(&run.id).await.ctx("history")?;
    let last = history.last().ok_or("no history")?;
    ensure!(
        last.kind == kind && last.version == run.version && last.status == run.status,
        "the last transition of `{}` is {:?} v{} {}, expected {kind:?} v{} {}",
        run.id,
        last.kind,
        last.version,
        last.status,
        run.version,
        run.status
    );
    ensure!(
        last.note.as_ref() == Some(note),
        "the {kind:?} transition records {:?}, expected {note:?}",
        last.note
    );
    ensure!(
        last.from_state == last.to_state && run.state_name == last.to_state,
        "an operator's transition keeps the state"
    );
    verify_chain(store, &run.id).await
}

fn refused_as_final(
    result: Result<RunRecord, StoreError>,
    status: RunStatus,
    what: &str,
) -> CheckResult {
    match result {
        Err(StoreError::RunIsFinal { status: s, .. }) if s == status => Ok(()),
        other => Err(format!(
            "{what} of a {status} run must be refused naming its status, got {other:?}"
        )),
    }
}

/// Terminate stops a running, a waiting and a leased run at once, in one `terminate`
/// transition with who and why; a live holder is fenced out; terminating again changes
/// nothing; a run in another final status is refused.
///
/// # Errors
/// What went wrong.
pub async fn check_terminate_stops_runs_at_once(store: Arc<dyn Store>) -> CheckResult {
    let why = note("duplicate order");

    let running = create(&store, "term-running", json!({})).await?;
    let t = store
        .terminate_run(&running.id, &why)
        .await
        .ctx("terminate_run")?;
    ensure!(
        t.status == RunStatus::Terminated && t.version == 1,
        "terminate of a running run gave {} v{}",
        t.status,
        t.version
    );
    ensure!(
        t.error.as_ref().is_some_and(|e| e.code == TERMINATED
            && e.message.contains("alice")
            && e.message.contains("duplicate order")),
        "a terminated run's error says who and why: {:?}",
        t.error
    );
    ends_with(&store, &t, TransitionKind::Terminate, &why).await?;
    let again = store
        .terminate_run(&running.id, &note("again"))
        .await
        .ctx("terminate_run again")?;
    ensure!(
        again.version == t.version && again.status == RunStatus::Terminated,
        "terminating a terminated run must write nothing (v{} -> v{})",
        t.version,
        again.version
    );
    ends_with(&store, &again, TransitionKind::Terminate, &why).await?;
    refused_as_final(
        store.cancel_run(&running.id, &why).await,
        RunStatus::Terminated,
        "cancel",
    )?;
    ensure!(
        store
            .claim_run(&running.id, "w", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "a terminated run must not be claimable"
    );

    let (waiting, _) = waiting_run(&store, "Agent", "w", false).await?;
    let t = store
        .terminate_run(&waiting.id, &why)
        .await
        .ctx("terminate_run waiting")?;
    ensure!(
        t.status == RunStatus::Terminated && t.waiting_for.is_none() && t.version == 2,
        "terminate of a waiting run gave {} v{} waiting for {:?}",
        t.status,
        t.version,
        t.waiting_for
    );
    ends_with(&store, &t, TransitionKind::Terminate, &why).await?;

    let leased = create(&store, "term-leased", json!({})).await?;
    let lease = claim(&store, &leased.id, "w").await?;
    let t = store
        .terminate_run(&leased.id, &why)
        .await
        .ctx("terminate_run leased")?;
    ensure!(
        t.status == RunStatus::Terminated && t.lease_owner.is_none() && t.epoch > lease.epoch,
        "terminate of a leased run must end the lease with a new epoch: {} owner {:?} epoch {} \
         (lease {})",
        t.status,
        t.lease_owner,
        t.epoch,
        lease.epoch
    );
    ensure!(
        matches!(
            store.commit_step(&lease, &step(0, json!({})), &[]).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "the holder of a terminated run's lease must be fenced out of commits"
    );
    ensure!(
        matches!(
            store
                .record_entry(
                    &lease,
                    &super::entry(
                        &leased.id,
                        0,
                        0,
                        agent_core::store::CallStatus::Started,
                        None
                    )
                )
                .await,
            Err(StoreError::LeaseLost { .. })
        ),
        "the holder of a terminated run's lease must be fenced out of the journal"
    );
    ends_with(&store, &t, TransitionKind::Terminate, &why).await?;

    let done = create(&store, "term-done", json!({})).await?;
    let lease = claim(&store, &done.id, "w").await?;
    store
        .commit_step(
            &lease,
            &StepCommit {
                status: RunStatus::Completed,
                ..step(0, json!({}))
            },
            &[],
        )
        .await
        .ctx("commit_step to completed")?;
    refused_as_final(
        store.terminate_run(&done.id, &why).await,
        RunStatus::Completed,
        "terminate",
    )?;
    refused_as_final(
        store.cancel_run(&done.id, &why).await,
        RunStatus::Completed,
        "cancel",
    )?;
    ensure!(
        matches!(
            store.terminate_run("no-such-run", &why).await,
            Err(StoreError::NotFound(_))
        ),
        "terminating an unknown run must be NotFound"
    );
    Ok(())
}

/// Cancel moves a run without a live lease (running, waiting, or held by an expired lease)
/// to compensating with error `cancelled` in one `cancel` transition, fencing out an
/// expired holder; cancelling again changes nothing.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_moves_free_runs_to_compensating(store: Arc<dyn Store>) -> CheckResult {
    let why = note("customer asked");
    let expect_cancelled = |r: &RunRecord, version: u64| -> CheckResult {
        ensure!(
            r.status == RunStatus::Compensating
                && r.version == version
                && r.error.as_ref().is_some_and(|e| e.code == CANCELLED)
                && r.waiting_for.is_none()
                && r.lease_owner.is_none()
                && r.cancel_requested.is_none(),
            "a cancelled run must be compensating at v{version} with error `{CANCELLED}`, got \
             {} v{} {:?} waiting {:?} owner {:?} request {:?}",
            r.status,
            r.version,
            r.error,
            r.waiting_for,
            r.lease_owner,
            r.cancel_requested
        );
        Ok(())
    };

    let running = create(&store, "cancel-running", json!({})).await?;
    let c = store
        .cancel_run(&running.id, &why)
        .await
        .ctx("cancel_run")?;
    expect_cancelled(&c, 1)?;
    ends_with(&store, &c, TransitionKind::Cancel, &why).await?;
    let again = store
        .cancel_run(&running.id, &note("twice"))
        .await
        .ctx("cancel_run again")?;
    expect_cancelled(&again, 1)?;

    let agent = unique("cancel-agent");
    let (waiting, _) = waiting_run(&store, &agent, "w", false).await?;
    let c = store
        .cancel_run(&waiting.id, &why)
        .await
        .ctx("cancel_run waiting")?;
    expect_cancelled(&c, 2)?;
    ends_with(&store, &c, TransitionKind::Cancel, &why).await?;
    let claimed = store
        .claim_next(std::slice::from_ref(&agent), "w2", LONG, 10)
        .await
        .ctx("claim_next")?;
    ensure!(
        claimed.len() == 1 && claimed[0].record.id == waiting.id,
        "a cancelled waiting run must be claimable to compensate, claimed {:?}",
        claimed.iter().map(|c| &c.record.id).collect::<Vec<_>>()
    );

    let expired = create(&store, "cancel-expired", json!({})).await?;
    let Claimed { lease: old, .. } = store
        .claim_run(&expired.id, "crashed", Duration::ZERO)
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    let c = store
        .cancel_run(&expired.id, &why)
        .await
        .ctx("cancel_run expired")?;
    expect_cancelled(&c, 1)?;
    ensure!(
        c.epoch > old.epoch,
        "the cancel of a run held by an expired lease must fence the holder (epoch {} vs {})",
        c.epoch,
        old.epoch
    );
    ensure!(
        matches!(
            store.commit_step(&old, &step(0, json!({})), &[]).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "the expired holder's late commit must be refused after a cancel"
    );
    ends_with(&store, &c, TransitionKind::Cancel, &why).await
}

/// A cancel of a run held by a live lease is recorded as a request (no version); the
/// holder's next commit is refused with `CancelRequested` and nothing is written; it
/// accepts the cancel under its lease and compensates to `cancelled`; then cancel changes
/// nothing and terminate is refused.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_of_a_leased_run_waits_for_its_holder(
    store: Arc<dyn Store>,
) -> CheckResult {
    let why = note("wrong address");
    let run = create(&store, "cancel-leased", json!({})).await?;
    let lease = claim(&store, &run.id, "holder").await?;
    store
        .commit_step(&lease, &step(0, json!({ "n": 1 })), &[])
        .await
        .ctx("commit_step")?;
    let requested = store.cancel_run(&run.id, &why).await.ctx("cancel_run")?;
    ensure!(
        requested.version == 1
            && requested.status == RunStatus::Running
            && requested.cancel_requested.as_ref() == Some(&why),
        "a cancel under a live lease must record the request only, got {} v{} request {:?}",
        requested.status,
        requested.version,
        requested.cancel_requested
    );
    let again = store
        .cancel_run(&run.id, &note("someone else"))
        .await
        .ctx("cancel_run again")?;
    ensure!(
        again.version == 1 && again.cancel_requested.as_ref() == Some(&why),
        "a second cancel must keep the first request, got {:?}",
        again.cancel_requested
    );
    ensure!(
        stored(&store, &run.id).await?.cancel_requested.as_ref() == Some(&why),
        "the cancel request must be stored with the run"
    );
    match store
        .commit_step(&lease, &step(1, json!({ "n": 2 })), &[])
        .await
    {
        Err(StoreError::CancelRequested(id)) if id == run.id => {}
        other => {
            return Err(format!(
                "a commit after a cancel request must be refused with CancelRequested, got \
                 {other:?}"
            ));
        }
    }
    ensure!(
        stored(&store, &run.id).await?.version == 1,
        "a refused commit must write nothing"
    );
    let accepted = store.accept_cancel(&lease).await.ctx("accept_cancel")?;
    ensure!(
        accepted.status == RunStatus::Compensating
            && accepted.version == 2
            && accepted.epoch == lease.epoch
            && accepted.lease_owner.as_deref() == Some("holder")
            && accepted.cancel_requested.is_none()
            && accepted.error.as_ref().is_some_and(|e| e.code == CANCELLED),
        "accept_cancel must write the cancel at v2 under the holder's lease, got {} v{} epoch \
         {} owner {:?} request {:?} error {:?}",
        accepted.status,
        accepted.version,
        accepted.epoch,
        accepted.lease_owner,
        accepted.cancel_requested,
        accepted.error
    );
    ends_with(&store, &accepted, TransitionKind::Cancel, &why).await?;
    ensure!(
        store.accept_cancel(&lease).await.is_err(),
        "accept_cancel without a pending request must fail"
    );
    let done = store
        .commit_step(
            &lease,
            &StepCommit {
                status: RunStatus::Cancelled,
                error: accepted.error.clone(),
                kind: TransitionKind::Status,
                ..step(2, json!({ "n": 1 }))
            },
            &[],
        )
        .await
        .ctx("commit_step to cancelled")?;
    ensure!(
        done.status == RunStatus::Cancelled && done.lease_owner.is_none(),
        "the compensated cancel must end cancelled without a lease"
    );
    let same = store.cancel_run(&run.id, &why).await.ctx("cancel_run")?;
    ensure!(
        same.version == done.version && same.status == RunStatus::Cancelled,
        "cancelling a cancelled run must write nothing"
    );
    refused_as_final(
        store.terminate_run(&run.id, &why).await,
        RunStatus::Cancelled,
        "terminate",
    )?;
    verify_chain(&store, &run.id).await?;

    // A request whose holder goes away is taken by the next claimer, whatever the run
    // waits for.
    let agent = unique("cancel-agent");
    let (waiting, lease) = waiting_run(&store, &agent, "holder", true).await?;
    store
        .cancel_run(&waiting.id, &why)
        .await
        .ctx("cancel_run")?;
    store.release_lease(&lease).await.ctx("release_lease")?;
    let claimed = store
        .claim_next(std::slice::from_ref(&agent), "next", LONG, 10)
        .await
        .ctx("claim_next")?;
    ensure!(
        claimed.len() == 1 && claimed[0].record.cancel_requested.as_ref() == Some(&why),
        "a waiting run with a cancel request must be claimable, with its request"
    );
    Ok(())
}

/// Outcome of one committer in [`check_cancel_racing_a_commit`].
async fn commit_until_cancelled(store: Arc<dyn Store>, lease: Lease) -> CheckResult {
    for v in 0..10_000 {
        match store
            .commit_step(&lease, &step(v, json!({ "n": v })), &[])
            .await
        {
            Ok(_) => tokio::task::yield_now().await,
            Err(StoreError::CancelRequested(_)) => {
                return store
                    .accept_cancel(&lease)
                    .await
                    .map(|_| ())
                    .ctx("accept_cancel");
            }
            // The lease expired and the cancel was written without it.
            Err(StoreError::LeaseLost { .. }) => return Ok(()),
            Err(e) => return Err(format!("commit from v{v}: unexpected error: {e}")),
        }
    }
    Err("10000 commits went through a cancel".to_owned())
}

/// A cancel racing a holder's commits, many times, with live and with expiring leases:
/// every time the history is one chain of steps ended by exactly one `cancel`, nothing
/// after it, and the chain verifies.
///
/// # Errors
/// What went wrong.
pub async fn check_cancel_racing_a_commit(store: Arc<dyn Store>) -> CheckResult {
    let why = note("race");
    for round in 0..24_u64 {
        let run = create(&store, "cancel-race", json!({})).await?;
        // Every other round the lease runs out during the race, so the cancel is written
        // without the holder as well as by it.
        let ttl = if round % 2 == 0 {
            LONG
        } else {
            Duration::from_millis(5)
        };
        let Claimed { lease, .. } = store
            .claim_run(&run.id, "holder", ttl)
            .await
            .ctx("claim_run")?
            .ok_or("claim of a free run returned None")?;
        let committer = tokio::spawn(commit_until_cancelled(Arc::clone(&store), lease));
        let wait_until = round % 4;
        let canceller = {
            let store = Arc::clone(&store);
            let id = run.id.clone();
            let why = why.clone();
            tokio::spawn(async move {
                while stored(&store, &id).await?.version < wait_until {
                    tokio::task::yield_now().await;
                }
                store.cancel_run(&id, &why).await.ctx("cancel_run")
            })
        };
        canceller
            .await
            .map_err(|e| format!("canceller panicked: {e}"))??;
        committer
            .await
            .map_err(|e| format!("committer panicked: {e}"))??;
        let after = stored(&store, &run.id).await?;
        ensure!(
            after.status == RunStatus::Compensating && after.cancel_requested.is_none(),
            "round {round}: after the race the run is {} with request {:?}",
            after.status,
            after.cancel_requested
        );
        let history = store.history(&run.id).await.ctx("history")?;
        let kinds: Vec<TransitionKind> = history.iter().map(|t| t.kind).collect();
        let cancels = kinds
            .iter()
            .filter(|k| **k == TransitionKind::Cancel)
            .count();
        ensure!(
            cancels == 1 && kinds.last() == Some(&TransitionKind::Cancel),
            "round {round}: one cancel, last, expected: {kinds:?}"
        );
        ensure!(
            kinds[1..kinds.len() - 1]
                .iter()
                .all(|k| *k == TransitionKind::Step),
            "round {round}: only steps before the cancel: {kinds:?}"
        );
        ends_with(&store, &after, TransitionKind::Cancel, &why).await?;
    }
    Ok(())
}

/// Terminate closes out a failed, a quarantined and a dead-lettered run (each waits for an
/// operator, and nothing else would end it): one `terminate` transition with who and why,
/// the chain verifying; a completed run is still refused.
///
/// # Errors
/// What went wrong.
pub async fn check_terminate_closes_out_stopped_runs(store: Arc<dyn Store>) -> CheckResult {
    let why = note("nothing will fix it");
    let failed = create(&store, "close-failed", json!({})).await?;
    let lease = claim(&store, &failed.id, "w").await?;
    store
        .commit_step(
            &lease,
            &StepCommit {
                status: RunStatus::Failed,
                error: Some(agent_core::store::RunFailure {
                    code: FailureCode::Handler,
                    message: "the payload does not read".to_owned(),
                }),
                ..step(0, json!({}))
            },
            &[],
        )
        .await
        .ctx("commit_step to failed")?;
    let quarantined = create(&store, "close-quarantined", json!({})).await?;
    let dead = create(&store, "close-dead", json!({})).await?;
    for (run, status) in [
        (&quarantined, RunStatus::Quarantined),
        (&dead, RunStatus::DeadLettered),
    ] {
        store
            .set_status(
                &run.id,
                status,
                Some(agent_core::store::RunFailure {
                    code: FailureCode::Other("stuck".to_owned()),
                    message: "stuck".to_owned(),
                }),
            )
            .await
            .ctx("set_status")?;
    }
    for run in [&failed, &quarantined, &dead] {
        let before = stored(&store, &run.id).await?;
        let t = store
            .terminate_run(&run.id, &why)
            .await
            .ctx("terminate_run of a stopped run")?;
        ensure!(
            t.status == RunStatus::Terminated
                && t.version == before.version + 1
                && t.error.as_ref().is_some_and(|e| e.code == TERMINATED),
            "a {} run must be terminated in one new version, got {t:?}",
            before.status
        );
        ends_with(&store, &t, TransitionKind::Terminate, &why).await?;
        ensure!(
            store
                .claim_run(&run.id, "w2", LONG)
                .await
                .ctx("claim")?
                .is_none(),
            "a terminated run must not be claimable"
        );
    }
    Ok(())
}

/// A pending signal is dropped in one `signal_dropped` version that keeps the run's state,
/// status and wait and records who and why (naming the signal), the chain verifying; the
/// signal is no longer pending, the one sent after it is; dropping it again, dropping
/// another run's signal, and dropping under a live lease are refused.
///
/// # Errors
/// What went wrong.
pub async fn check_drop_signal_is_audited(store: Arc<dyn Store>) -> CheckResult {
    let why = note("the payload is not a Confirmation");
    let agent = unique("drop-agent");
    let (run, _) = waiting_run(&store, &agent, "w", false).await?;
    let bad = store
        .send_signal(&run.id, "approval", &json!({ "ok": "nope" }))
        .await
        .ctx("send_signal")?;
    let good = store
        .send_signal(&run.id, "approval", &json!({ "ok": true }))
        .await
        .ctx("send_signal")?;
    let before = stored(&store, &run.id).await?;
    let after = store
        .drop_signal(&run.id, bad, &why)
        .await
        .ctx("drop_signal")?;
    ensure!(
        after.version == before.version + 1
            && after.status == RunStatus::Waiting
            && after.waiting_for == Some(WaitingFor::signal("approval"))
            && after.state == before.state
            && after.lease_owner.is_none(),
        "dropping a signal keeps state, status and wait in one new version: {after:?}"
    );
    let reread = stored(&store, &run.id).await?;
    ensure!(
        (
            reread.version,
            reread.status,
            &reread.waiting_for,
            reread.epoch
        ) == (after.version, after.status, &after.waiting_for, after.epoch),
        "the stored run {reread:?} differs from the one drop_signal returned {after:?}"
    );
    let pending: Vec<i64> = store
        .pending_signals(&run.id)
        .await
        .ctx("pending_signals")?
        .iter()
        .map(|s| s.id)
        .collect();
    ensure!(
        pending == vec![good],
        "after the drop only the later signal is pending, got {pending:?}"
    );
    let recorded = OperatorNote::new(
        why.by.clone(),
        format!("dropped signal #{bad} `approval`: {}", why.reason),
    );
    ends_with(&store, &after, TransitionKind::SignalDropped, &recorded).await?;
    ensure!(
        matches!(
            store.drop_signal(&run.id, bad, &why).await,
            Err(StoreError::NoPendingSignal { signal_id, .. }) if signal_id == bad
        ),
        "dropping a dropped signal must be NoPendingSignal"
    );
    let (other, _) = waiting_run(&store, &agent, "w", false).await?;
    ensure!(
        matches!(
            store.drop_signal(&other.id, good, &why).await,
            Err(StoreError::NoPendingSignal { .. })
        ),
        "dropping another run's signal must be NoPendingSignal"
    );
    ensure!(
        stored(&store, &run.id).await?.version == after.version,
        "a refused drop writes nothing"
    );
    ensure!(
        matches!(
            store.drop_signal("no-such-run", good, &why).await,
            Err(StoreError::NotFound(_))
        ),
        "dropping a signal of an unknown run must be NotFound"
    );
    // The run's signal is consumed by a step of a live holder: the drop must not race it.
    let lease = claim(&store, &run.id, "holder").await?;
    ensure!(
        matches!(
            store.drop_signal(&run.id, good, &why).await,
            Err(StoreError::RunIsHeld { .. })
        ),
        "dropping a signal of a run held by a live lease must be RunIsHeld"
    );
    store.release_lease(&lease).await.ctx("release_lease")?;
    verify_chain(&store, &run.id).await
}
