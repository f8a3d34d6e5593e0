//! Commits: one winner per version, fencing by the lease epoch, what a commit ends.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, create, entry, step, stored, verify_chain};
use agent_core::store::FailureCode;
use agent_core::store::WaitingFor;
use agent_core::store::{CallStatus, Claimed, RunFailure, RunStatus, Store, StoreError};

/// N committers race the same expected version with the same lease: exactly one wins per
/// round, and the versions form one chain with a valid hash chain.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_version_chain_single_winner(store: Arc<dyn Store>) -> CheckResult {
    const RACERS: usize = 8;
    const ROUNDS: u64 = 12;
    let r = create(&store, "race", json!({ "winner": null })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    for v in 0..ROUNDS {
        let mut tasks = Vec::new();
        for i in 0..RACERS {
            let store = store.clone();
            let lease = lease.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .commit_step(&lease, &step(v, json!({ "winner": i, "round": v })), &[])
                    .await
            }));
        }
        let mut winners = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.map_err(|e| format!("committer panicked: {e}"))? {
                Ok(rec) => {
                    ensure!(rec.version == v + 1, "winner got version {}", rec.version);
                    winners.push(i);
                }
                Err(StoreError::Conflict { expected, .. }) => {
                    ensure!(
                        expected == v,
                        "conflict reports expected {expected}, not {v}"
                    );
                }
                Err(e) => return Err(format!("racer {i} got {e}, not a conflict")),
            }
        }
        ensure!(
            winners.len() == 1,
            "round {v}: {} committers won the same expected version",
            winners.len()
        );
        let cur = stored(&store, &r.id).await?;
        ensure!(
            cur.version == v + 1 && cur.state["winner"] == json!(winners[0]),
            "stored run does not match the winner in round {v}"
        );
    }
    // A late commit of an old version is still a conflict.
    ensure!(
        matches!(
            store.commit_step(&lease, &step(3, json!({})), &[]).await,
            Err(StoreError::Conflict { found, .. }) if found == ROUNDS
        ),
        "a commit from an old version must be Conflict with the current version"
    );
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.len() as u64 == ROUNDS + 1,
        "history has {} records, want {}",
        h.len(),
        ROUNDS + 1
    );
    ensure!(
        h.iter().skip(1).all(|t| t.epoch == lease.epoch),
        "transitions must record the writer's epoch"
    );
    verify_chain(&store, &r.id).await
}

/// What a store remembers of a run's last commit does not outlive the lease it was made
/// under: after the same worker claims the run again (a new epoch), a commit under the old
/// lease is refused, and one under the new lease goes on from the same version.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_commits_across_a_reclaim(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "reclaim", json!({ "n": 0 })).await?;
    let first = claim(&store, &r.id, "w").await?;
    store
        .commit_step(&first, &step(0, json!({ "n": 1 })), &[])
        .await
        .ctx("commit under the first lease")?;
    store.release_lease(&first).await.ctx("release_lease")?;
    let second = claim(&store, &r.id, "w").await?;
    ensure!(
        second.epoch > first.epoch,
        "claiming again did not increase the epoch"
    );
    match store
        .commit_step(&first, &step(1, json!({ "n": "stale" })), &[])
        .await
    {
        Err(StoreError::LeaseLost { .. }) => {}
        other => {
            return Err(format!(
                "a commit under the released lease must be LeaseLost, got {other:?}"
            ));
        }
    }
    let committed = store
        .commit_step(&second, &step(1, json!({ "n": 2 })), &[])
        .await
        .ctx("commit under the second lease")?;
    ensure!(
        committed.version == 2 && committed.epoch == second.epoch,
        "the commit returned version {} at epoch {}, not 2 at {}",
        committed.version,
        committed.epoch,
        second.epoch
    );
    ensure!(
        committed.lease_owner.as_deref() == Some("w"),
        "the commit returned lease owner {:?}",
        committed.lease_owner
    );
    let run = stored(&store, &r.id).await?;
    ensure!(
        run.version == 2 && run.state == json!({ "n": 2 }),
        "stored run at version {} with state {}",
        run.version,
        run.state
    );
    Ok(())
}

/// After another claim, the old holder's `commit_step`, `record_entry` and `renew_lease`
/// get `LeaseLost`, and nothing of theirs is written.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_stale_epoch_is_fenced(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "fence", json!({ "n": 0 })).await?;
    let Claimed { lease: old, .. } = store
        .claim_run(&r.id, "old", Duration::from_millis(150))
        .await
        .ctx("claim_run")?
        .ok_or("first claim returned None")?;
    store
        .record_entry(&old, &entry(&r.id, 0, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry under a live lease")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Claimed {
        lease: new,
        record: rec,
        ..
    } = store
        .claim_run(&r.id, "new", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of an expired lease returned None")?;
    ensure!(new.epoch > old.epoch, "reclaim did not increase the epoch");
    ensure!(
        rec.epoch == new.epoch,
        "claimed record and lease disagree on the epoch"
    );
    match store
        .commit_step(&old, &step(0, json!({ "n": "stale" })), &[])
        .await
    {
        Err(StoreError::LeaseLost { epoch, .. }) => {
            ensure!(
                epoch == old.epoch,
                "LeaseLost reports epoch {epoch}, not {}",
                old.epoch
            );
        }
        other => {
            return Err(format!(
                "stale commit_step must be LeaseLost, got {other:?}"
            ));
        }
    }
    let stale_entry = entry(&r.id, 0, 1, CallStatus::Succeeded, Some(json!("stale")));
    ensure!(
        matches!(
            store.record_entry(&old, &stale_entry).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "stale record_entry must be LeaseLost"
    );
    ensure!(
        matches!(
            store.renew_lease(&old, LONG).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "stale renew_lease must be LeaseLost"
    );
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.version == 0,
        "a stale commit moved the run to {}",
        cur.version
    );
    let j = store.journal(&r.id, None).await.ctx("journal")?;
    ensure!(
        j.len() == 1 && j[0].seq == 0,
        "a stale record_entry was written: journal has {} entries",
        j.len()
    );
    // Releasing a stale lease does not free the new holder's.
    store
        .release_lease(&old)
        .await
        .ctx("release of a stale lease")?;
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.lease_owner.as_deref() == Some("new"),
        "releasing a stale lease freed the current holder's lease"
    );
    store
        .commit_step(&new, &step(0, json!({ "n": 1 })), &[])
        .await
        .ctx("commit by the current holder")?;
    store
        .record_entry(&new, &entry(&r.id, 1, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry by the current holder")?;
    Ok(())
}

/// A commit to a final status ends the lease in the same write; a commit that leaves the
/// run running or waiting keeps it.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_final_commit_ends_the_lease(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "final-commit", json!({})).await?;
    let lease = claim(&store, &run.id, "w").await?;
    let mut waiting = step(0, json!({ "n": 1 }));
    waiting.status = RunStatus::Waiting;
    waiting.waiting_for = Some(WaitingFor::signal("go"));
    let rec = store
        .commit_step(&lease, &waiting, &[])
        .await
        .ctx("commit_step (waiting)")?;
    ensure!(
        rec.lease_owner.as_deref() == Some("w"),
        "a commit to `waiting` ended the lease (owner {:?})",
        rec.lease_owner
    );
    let mut done = step(1, json!({ "n": 2 }));
    done.status = RunStatus::Completed;
    let rec = store
        .commit_step(&lease, &done, &[])
        .await
        .ctx("commit_step (completed)")?;
    let after = stored(&store, &run.id).await?;
    for (what, r) in [("returned", &rec), ("stored", &after)] {
        ensure!(
            r.lease_owner.is_none() && r.lease_expires_at.is_none(),
            "after a commit to `completed` the {what} record still has the lease: {:?} until {:?}",
            r.lease_owner,
            r.lease_expires_at
        );
    }
    ensure!(
        after.version == 2 && after.status == RunStatus::Completed && after.epoch == lease.epoch,
        "the final commit stored version {} status {} epoch {}",
        after.version,
        after.status,
        after.epoch
    );
    Ok(())
}

/// `quarantine` under a lease: refused with a stale epoch (the current holder keeps the
/// run), done with the current one, without writing a version, leaving the run unleased.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_quarantine_is_fenced(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "quarantine", json!({})).await?;
    let Claimed { lease: stale, .. } = store
        .claim_run(&run.id, "a", Duration::from_millis(1))
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let current = claim(&store, &run.id, "b").await?;
    let error = RunFailure {
        code: FailureCode::HistoryInconsistent,
        message: "conformance".into(),
    };
    ensure!(
        matches!(
            store.quarantine(&stale, error.clone()).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "a quarantine under a stale epoch was not refused with LeaseLost"
    );
    let held = stored(&store, &run.id).await?;
    ensure!(
        held.status == RunStatus::Running && held.lease_owner.as_deref() == Some("b"),
        "a stale quarantine changed the run: {} held by {:?}",
        held.status,
        held.lease_owner
    );
    let done = store
        .quarantine(&current, error.clone())
        .await
        .ctx("quarantine")?;
    let after = stored(&store, &run.id).await?;
    for (what, r) in [("returned", &done), ("stored", &after)] {
        ensure!(
            r.status == RunStatus::Quarantined
                && r.error.as_ref() == Some(&error)
                && r.lease_owner.is_none()
                && r.version == run.version,
            "the {what} record after quarantine: {} {:?}, lease {:?}, version {} (want {})",
            r.status,
            r.error,
            r.lease_owner,
            r.version,
            run.version
        );
    }
    ensure!(
        store
            .claim_next(&["Agent".into()], "c", LONG, 100)
            .await
            .ctx("claim_next")?
            .iter()
            .all(|Claimed { lease: l, .. }| l.run_id != run.id),
        "a quarantined run was claimed again"
    );
    Ok(())
}
