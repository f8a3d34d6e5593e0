//! Retention as a worker applies it (`runner::Retention`): versions compacted by age,
//! final runs deleted by age, in bounded batches.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::children::children_of;
use super::{CheckResult, Ctx, claim, create, entry, grow, step, stored, verify_chain};
use agent_core::store::{CallStatus, RetentionPolicy, RunStatus, Store, StoreError, now_ms};

/// Nothing removed by count: only the time bounds decide.
const KEEP_ALL: u64 = u64::MAX;

/// Versions committed before `keep_versions_since` are removed, the first kept one
/// replays and anchors a chain that verifies, the run resumes; `max_runs` bounds a call;
/// a second call with the same policy removes nothing more.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_retention_keeps_the_window(store: Arc<dyn Store>) -> CheckResult {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let r = create(&store, "window", json!({ "items": [] })).await?;
        let lease = claim(&store, &r.id, "w").await?;
        grow(&store, &lease, 0, 10).await?;
        runs.push((r, lease));
    }
    // Clocks of a database server and of this process agree to well within this.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let since = now_ms();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut states = Vec::new();
    for (r, lease) in &runs {
        let mut s = stored(&store, &r.id).await?.state;
        let mut recent = Vec::new();
        for v in 10..15u64 {
            s["items"]
                .as_array_mut()
                .ok_or("test state lost its items")?
                .push(json!(v));
            store
                .commit_step(lease, &step(v, s.clone()), &[])
                .await
                .ctx("commit_step")?;
            recent.push(s.clone());
        }
        states.push(recent);
    }
    let policy = RetentionPolicy {
        keep_last_versions: 1,
        only_final_runs: false,
        keep_versions_since: Some(since),
        delete_final_before: None,
        max_runs: Some(2),
    };
    let first = store.prune(&policy).await.ctx("prune")?;
    ensure!(
        first.runs_pruned == 2 && first.versions_removed == 22,
        "a batch of at most 2 runs pruned {} runs and {} versions, want 2 and 22 (versions \
         0 to 10 of each)",
        first.runs_pruned,
        first.versions_removed
    );
    let second = store.prune(&policy).await.ctx("prune")?;
    ensure!(
        second.runs_pruned == 1 && second.versions_removed == 11,
        "the next batch pruned {} runs and {} versions, want the third run's 11",
        second.runs_pruned,
        second.versions_removed
    );
    let third = store.prune(&policy).await.ctx("prune")?;
    ensure!(
        third.runs_pruned == 0 && third.versions_removed == 0,
        "pruning again with the same window removed {} more versions",
        third.versions_removed
    );
    for ((r, lease), recent) in runs.iter().zip(&states) {
        let versions: Vec<u64> = store
            .history(&r.id)
            .await
            .ctx("history")?
            .iter()
            .map(|t| t.version)
            .collect();
        ensure!(
            versions == (11..=15).collect::<Vec<_>>(),
            "after compacting versions older than the window, `{}` keeps {versions:?}, want \
             11..=15 (those committed in the window)",
            r.id
        );
        for (i, want) in recent.iter().enumerate() {
            let v = 11 + i as u64;
            let at = store
                .state_at(&r.id, v)
                .await
                .ctx("state_at")?
                .ok_or_else(|| format!("version {v} in the window no longer replays"))?;
            ensure!(
                &at.state == want,
                "version {v} replays wrong after retention"
            );
        }
        verify_chain(&store, &r.id).await?;
        // Resume: the run goes on from its current version.
        let last = recent.last().ok_or("no recent state")?;
        let mut next = last.clone();
        next["items"]
            .as_array_mut()
            .ok_or("no items")?
            .push(json!("after"));
        store
            .commit_step(lease, &step(15, next.clone()), &[])
            .await
            .ctx("commit_step after retention")?;
        ensure!(
            stored(&store, &r.id).await?.state == next,
            "the run did not resume after retention"
        );
        verify_chain(&store, &r.id).await?;
    }
    Ok(())
}

/// Final runs last updated before `delete_final_before` are deleted whole; runs not final,
/// a final child whose parent is not final, and a final parent with a child not final
/// stay; once those end, they go too.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_retention_deletes_old_final_runs(store: Arc<dyn Store>) -> CheckResult {
    // A final run with a journal and a signal: deleted.
    let done = create(&store, "done", json!({ "items": [] })).await?;
    let lease = claim(&store, &done.id, "w").await?;
    store
        .record_entry(
            &lease,
            &entry(&done.id, 0, 0, CallStatus::Succeeded, Some(json!("x"))),
        )
        .await
        .ctx("record_entry")?;
    store
        .send_signal(&done.id, "late", &json!({}))
        .await
        .ctx("send_signal")?;
    let mut last = step(0, json!({ "done": true }));
    last.status = RunStatus::Completed;
    store
        .commit_step(&lease, &last, &[])
        .await
        .ctx("commit_step")?;
    // A running run: kept.
    let live = create(&store, "live", json!({ "items": [] })).await?;
    // A final parent whose child still runs, and a final child of a running parent: kept.
    let (parent, child) = children_of(&store, "Ended").await?;
    store
        .set_status(&parent.id, RunStatus::Completed, None)
        .await
        .ctx("set_status")?;
    let (running_parent, ended_child) = children_of(&store, "Running").await?;
    store
        .set_status(&ended_child.id, RunStatus::Completed, None)
        .await
        .ctx("set_status")?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let policy = RetentionPolicy {
        keep_last_versions: KEEP_ALL,
        delete_final_before: Some(now_ms()),
        ..RetentionPolicy::default()
    };
    let report = store.prune(&policy).await.ctx("prune")?;
    ensure!(
        report.runs_deleted == 1,
        "retention deleted {} runs, want 1 (the final run without relatives)",
        report.runs_deleted
    );
    ensure!(
        store.load_run(&done.id).await.ctx("load_run")?.is_none(),
        "the old final run is still there"
    );
    // A store may answer `NotFound` for the records of a run it no longer has.
    let history = match store.history(&done.id).await {
        Err(StoreError::NotFound(_)) => Vec::new(),
        other => other.ctx("history")?,
    };
    let journal = match store.journal(&done.id, None).await {
        Err(StoreError::NotFound(_)) => Vec::new(),
        other => other.ctx("journal")?,
    };
    ensure!(
        history.is_empty() && journal.is_empty(),
        "the deleted run's versions ({}) or journal entries ({}) are still there",
        history.len(),
        journal.len()
    );
    for (id, why) in [
        (&live.id, "a running run"),
        (&parent.id, "a final parent whose child runs"),
        (&child.id, "a running child"),
        (&running_parent.id, "a running parent"),
        (&ended_child.id, "a final child whose parent runs"),
    ] {
        ensure!(
            store.load_run(id).await.ctx("load_run")?.is_some(),
            "retention deleted {why}"
        );
    }
    let again = store.prune(&policy).await.ctx("prune")?;
    ensure!(
        again.runs_deleted == 0,
        "deleting again deleted {} more runs",
        again.runs_deleted
    );
    // The child ends: the parent and the child go.
    store
        .set_status(&child.id, RunStatus::Completed, None)
        .await
        .ctx("set_status")?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let later = RetentionPolicy {
        delete_final_before: Some(now_ms()),
        ..policy
    };
    let report = store.prune(&later).await.ctx("prune")?;
    ensure!(
        report.runs_deleted == 2,
        "after the child ended, retention deleted {} runs, want 2 (parent and child)",
        report.runs_deleted
    );
    ensure!(
        store.load_run(&parent.id).await.ctx("load_run")?.is_none()
            && store.load_run(&child.id).await.ctx("load_run")?.is_none(),
        "the ended parent or its child is still there"
    );
    ensure!(
        store
            .load_run(&ended_child.id)
            .await
            .ctx("load_run")?
            .is_some(),
        "retention deleted a final child whose parent runs"
    );
    Ok(())
}
