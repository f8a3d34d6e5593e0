//! History: time travel, fork, pruning and storage growth.

use std::sync::Arc;

use serde_json::json;

use super::{CheckResult, Ctx, claim, create, entry, grow, step, stored, unique, verify_chain};
use agent_core::store::{CallStatus, RetentionPolicy, RunStatus, Store};

/// `history_from` and `journal_from` are pages of `history` and `journal`: from a version
/// (and seq) on, at most the limit, in order, and `NotFound` for a run that does not
/// exist (an empty page for one that does, past its end).
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_history_and_journal_pages(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "pages", json!({ "items": [] })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    for v in 0..6_u64 {
        for seq in 0..3_u32 {
            store
                .record_entry(
                    &lease,
                    &entry(&r.id, v, seq, CallStatus::Succeeded, Some(json!(seq))),
                )
                .await
                .ctx("record_entry")?;
        }
        grow(&store, &lease, v, 1).await?;
    }
    let history = store.history(&r.id).await.ctx("history")?;
    let journal = store.journal(&r.id, None).await.ctx("journal")?;
    for from in 0..9_u64 {
        for limit in [1_usize, 2, 5, 100] {
            let page = store
                .history_from(&r.id, from, limit)
                .await
                .ctx("history_from")?;
            let want: Vec<u64> = (history.iter().map(|t| t.version))
                .filter(|v| *v >= from)
                .take(limit)
                .collect();
            let got: Vec<u64> = page.iter().map(|t| t.version).collect();
            ensure!(
                got == want,
                "history_from({from}, {limit}): {got:?}, want {want:?}"
            );
            for seq in 0..4_u32 {
                let page =
                    (store.journal_from(&r.id, (from, seq), limit).await).ctx("journal_from")?;
                let want: Vec<(u64, u32)> = (journal.iter().map(|e| (e.version, e.seq)))
                    .filter(|k| *k >= (from, seq))
                    .take(limit)
                    .collect();
                let got: Vec<(u64, u32)> = page.iter().map(|e| (e.version, e.seq)).collect();
                ensure!(
                    got == want,
                    "journal_from(({from}, {seq}), {limit}): {got:?}, want {want:?}"
                );
            }
        }
    }
    let whole = store
        .history_from(&r.id, 0, usize::MAX)
        .await
        .ctx("history_from")?;
    ensure!(whole == history, "history_from(0, all) must be the history");
    let missing = unique("no-such-run");
    ensure!(
        matches!(
            store.history_from(&missing, 0, 10).await,
            Err(agent_core::store::StoreError::NotFound(_))
        ),
        "history_from of a run that does not exist must be NotFound"
    );
    ensure!(
        matches!(
            store.journal_from(&missing, (0, 0), 10).await,
            Err(agent_core::store::StoreError::NotFound(_))
        ),
        "journal_from of a run that does not exist must be NotFound"
    );
    Ok(())
}

/// Every version replays (time travel) as the state grows; fork starts a new run from any
/// version without touching the original.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_history_time_travel_and_fork(store: Arc<dyn Store>) -> CheckResult {
    const STEPS: u64 = 150;
    let r = create(&store, "travel", json!({ "items": [] })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    let mut state = json!({ "items": [], "meta": { "k": 0 } });
    let mut expected = vec![json!({ "items": [] })];
    for v in 0..STEPS {
        state["items"]
            .as_array_mut()
            .ok_or("test state lost its items")?
            .push(json!({ "n": v, "text": format!("step {v}") }));
        state["meta"]["k"] = json!(v);
        if v % 10 == 0 {
            // Shrinking and replacing changes too, not only growth.
            state["items"].as_array_mut().ok_or("no items")?.remove(0);
        }
        let mut c = step(v, state.clone());
        c.to_state = if v % 2 == 0 { "Even" } else { "Odd" }.into();
        c.from_state = if v == 0 {
            "Start"
        } else if v % 2 == 0 {
            "Odd"
        } else {
            "Even"
        }
        .into();
        store
            .commit_step(&lease, &c, &[])
            .await
            .ctx("commit_step")?;
        expected.push(state.clone());
    }
    for (v, want) in expected.iter().enumerate() {
        let at = store
            .state_at(&r.id, v as u64)
            .await
            .ctx("state_at")?
            .ok_or_else(|| format!("state_at({v}) is None"))?;
        ensure!(
            at.version == v as u64,
            "state_at({v}) answered version {}",
            at.version
        );
        ensure!(
            &at.state == want,
            "state_at({v}) differs from what was committed"
        );
        let name = match v {
            0 => "Start",
            v if v % 2 == 1 => "Even",
            _ => "Odd",
        };
        ensure!(
            at.state_name == name,
            "state_at({v}) has state name {}",
            at.state_name
        );
    }
    ensure!(
        store
            .state_at(&r.id, STEPS + 1)
            .await
            .ctx("state_at")?
            .is_none(),
        "state_at of a future version is not None"
    );
    verify_chain(&store, &r.id).await?;
    let fork_id = unique("fork");
    let fork = store.fork(&r.id, 100, &fork_id).await.ctx("fork")?;
    ensure!(
        fork.id == fork_id && fork.version == 0,
        "fork is not a new run at version 0"
    );
    ensure!(
        fork.state == expected[100],
        "fork does not start from the state at version 100"
    );
    ensure!(
        fork.parent == Some((r.id.clone(), 100)),
        "fork does not record its parent"
    );
    ensure!(fork.agent == r.agent, "fork changed the agent");
    let fl = claim(&store, &fork_id, "w").await?;
    store
        .commit_step(&fl, &step(0, json!({ "forked": true })), &[])
        .await
        .ctx("commit on fork")?;
    let orig = stored(&store, &r.id).await?;
    ensure!(
        orig.version == STEPS && orig.state == state,
        "committing on a fork changed the original"
    );
    ensure!(
        store.fork(&r.id, STEPS + 5, &unique("bad")).await.is_err(),
        "fork from a version that does not exist succeeded"
    );
    Ok(())
}

/// Pruning keeps the current state and the last N versions replayable, honours
/// `only_final_runs`, removes old journal entries, and the run can still be resumed.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_prune_keeps_resume_working(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "prune", json!({ "items": [] })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    let mut states = vec![json!({ "items": [] })];
    for v in 0..60u64 {
        store
            .record_entry(
                &lease,
                &entry(&r.id, v, 0, CallStatus::Succeeded, Some(json!(v))),
            )
            .await
            .ctx("record_entry")?;
        let mut s = states[states.len() - 1].clone();
        if let Some(items) = s["items"].as_array_mut() {
            items.push(json!(v));
        }
        store
            .commit_step(&lease, &step(v, s.clone()), &[])
            .await
            .ctx("commit_step")?;
        states.push(s);
    }
    // A final run that must be pruned under only_final_runs.
    let fin = create(&store, "prune-final", json!({ "items": [] })).await?;
    let fl = claim(&store, &fin.id, "w").await?;
    grow(&store, &fl, 0, 20).await?;
    let mut done = step(20, json!({ "done": true }));
    done.status = RunStatus::Completed;
    store
        .commit_step(&fl, &done, &[])
        .await
        .ctx("commit_step")?;

    let report = store
        .prune(&RetentionPolicy {
            keep_last_versions: 5,
            only_final_runs: true,
            ..RetentionPolicy::default()
        })
        .await
        .ctx("prune")?;
    ensure!(
        report.versions_removed >= 16,
        "prune of a final run removed {} versions",
        report.versions_removed
    );
    ensure!(
        store.state_at(&r.id, 0).await.ctx("state_at")?.is_some(),
        "only_final_runs pruned a running run"
    );
    let h = store.history(&fin.id).await.ctx("history")?;
    ensure!(
        h.iter().map(|t| t.version).collect::<Vec<_>>() == (17..=21).collect::<Vec<_>>(),
        "final run keeps versions {:?}, want 17..=21",
        h.iter().map(|t| t.version).collect::<Vec<_>>()
    );

    let report = store
        .prune(&RetentionPolicy {
            keep_last_versions: 10,
            only_final_runs: false,
            ..RetentionPolicy::default()
        })
        .await
        .ctx("prune")?;
    ensure!(
        report.versions_removed >= 51,
        "prune removed {} versions, want >= 51",
        report.versions_removed
    );
    ensure!(
        report.entries_removed >= 50,
        "prune removed {} entries, want >= 50",
        report.entries_removed
    );
    for v in 0..=60u64 {
        let at = store.state_at(&r.id, v).await.ctx("state_at")?;
        if v < 51 {
            ensure!(at.is_none(), "pruned version {v} still readable");
        } else {
            let at = at.ok_or_else(|| format!("kept version {v} no longer readable"))?;
            ensure!(
                usize::try_from(v).is_ok_and(|i| at.state == states[i]),
                "kept version {v} replays wrong after prune"
            );
        }
    }
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.first().map(|t| t.version) == Some(51) && h.len() == 10,
        "history after prune starts at {:?} with {} records",
        h.first().map(|t| t.version),
        h.len()
    );
    verify_chain(&store, &r.id).await?;
    let j = store.journal(&r.id, None).await.ctx("journal")?;
    ensure!(
        j.iter().all(|e| e.version >= 51),
        "journal of pruned versions kept"
    );
    // Resume: load, a new claim, more commits, time travel over the new versions.
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.version == 60 && cur.state == states[60],
        "prune changed the current run"
    );
    store.release_lease(&lease).await.ctx("release_lease")?;
    let l2 = claim(&store, &r.id, "w2").await?;
    let last = grow(&store, &l2, 60, 5).await?;
    let at = store
        .state_at(&r.id, 65)
        .await
        .ctx("state_at")?
        .ok_or("new version unreadable")?;
    ensure!(
        at.state == last,
        "versions committed after prune replay wrong"
    );
    let again = store
        .prune(&RetentionPolicy {
            keep_last_versions: 10,
            only_final_runs: false,
            ..RetentionPolicy::default()
        })
        .await
        .ctx("prune")?;
    ensure!(
        again.versions_removed == 5,
        "second prune removed {} versions, want 5",
        again.versions_removed
    );
    Ok(())
}

/// Bytes per run grow linearly: 1000 steps of a state gaining one item per step cost less
/// than 2.5x of 500 steps (full copies per version would cost 4x). Skipped when the
/// backend cannot measure (`storage_bytes` is `None`).
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_storage_grows_linearly(store: Arc<dyn Store>) -> CheckResult {
    let small = create(&store, "bytes500", json!({ "items": [] })).await?;
    if store
        .storage_bytes(&small.id)
        .await
        .ctx("storage_bytes")?
        .is_none()
    {
        return Ok(());
    }
    let large = create(&store, "bytes1000", json!({ "items": [] })).await?;
    let ls = claim(&store, &small.id, "w").await?;
    let ll = claim(&store, &large.id, "w").await?;
    grow(&store, &ls, 0, 500).await?;
    grow(&store, &ll, 0, 1000).await?;
    let b500 = store
        .storage_bytes(&small.id)
        .await
        .ctx("storage_bytes")?
        .ok_or("None")?;
    let b1000 = store
        .storage_bytes(&large.id)
        .await
        .ctx("storage_bytes")?
        .ok_or("None")?;
    #[allow(clippy::cast_precision_loss)]
    let ratio = b1000 as f64 / b500.max(1) as f64;
    ensure!(
        b1000 * 2 < b500 * 5,
        "storage is not linear: 1000 steps take {b1000} bytes, {ratio:.2}x of 500 steps ({b500})"
    );
    ensure!(b500 > 0, "storage_bytes reports 0 for 500 steps");
    Ok(())
}
