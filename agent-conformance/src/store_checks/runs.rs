//! Creating, loading and listing runs, their status, the stored graphs, and damaged rows.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, create, grow, new_run, step, stored, unique};
use agent_core::graph::GraphDescription;
use agent_core::store::FailureCode;
use agent_core::store::{
    Claimed, Lease, RunFailure, RunFilter, RunKey, RunStatus, Store, StoreError, TransitionKind,
    now_ms,
};

/// Create, load, and the errors for unknown runs.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_store_and_load_runs(store: Arc<dyn Store>) -> CheckResult {
    let state = json!({ "cart": ["apple"], "nested": { "b": 1, "a": [1, 2, { "x": null }] } });
    let r = create(&store, "load", state.clone()).await?;
    ensure!(r.version == 0, "new run at version {}", r.version);
    ensure!(r.status == RunStatus::Running, "new run is {}", r.status);
    ensure!(r.epoch == 0, "new run has epoch {}", r.epoch);
    ensure!(r.state == state, "state changed on create");
    ensure!(r.lease_owner.is_none(), "new run has a lease owner");
    let loaded = store.load_run(&r.id).await.ctx("load_run")?;
    ensure!(
        loaded.as_ref() == Some(&r),
        "load_run differs from create_run: {loaded:?} vs {r:?}"
    );
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.len() == 1 && h[0].version == 0 && h[0].kind == TransitionKind::Start,
        "creation must record one start transition at version 0: {h:?}"
    );
    ensure!(
        store
            .load_run("no-such-run")
            .await
            .ctx("load_run")?
            .is_none(),
        "load_run of an unknown id is not None"
    );
    let lease = Lease {
        run_id: "no-such-run".into(),
        worker: "w".into(),
        epoch: 1,
        expires_at: now_ms() + 1000,
    };
    ensure!(
        matches!(
            store.commit_step(&lease, &step(0, json!({})), &[]).await,
            Err(StoreError::NotFound(_))
        ),
        "commit_step on an unknown run is not NotFound"
    );
    ensure!(
        matches!(
            store.claim_run("no-such-run", "w", LONG).await,
            Err(StoreError::NotFound(_)) | Ok(None)
        ),
        "claim_run on an unknown run must be NotFound or None"
    );
    Ok(())
}

/// `create_run` is idempotent on the id; other content is `AlreadyExists`.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_create_run_is_idempotent(store: Arc<dyn Store>) -> CheckResult {
    let id = unique("idem");
    let a = store
        .create_run(new_run(&id, "Agent", json!({ "n": 1 })))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &id, "w").await?;
    store
        .commit_step(&lease, &step(0, json!({ "n": 2 })), &[])
        .await
        .ctx("commit_step")?;
    let again = store
        .create_run(new_run(&id, "Agent", json!({ "n": 1 })))
        .await
        .ctx("create_run again")?;
    ensure!(again.id == a.id, "idempotent create returned another run");
    ensure!(
        again.version == 1 && again.state == json!({ "n": 2 }),
        "idempotent create must return the existing run unchanged, got version {}",
        again.version
    );
    for other in [
        new_run(&id, "Agent", json!({ "n": 99 })),
        new_run(&id, "OtherAgent", json!({ "n": 1 })),
    ] {
        ensure!(
            matches!(
                store.create_run(other).await,
                Err(StoreError::AlreadyExists(_))
            ),
            "create_run with other content must be AlreadyExists"
        );
    }
    let h = store.history(&id).await.ctx("history")?;
    ensure!(
        h.len() == 2,
        "idempotent creates added history: {} records",
        h.len()
    );
    Ok(())
}

/// `list_runs` filters by agent and status, newest first, with a limit; `count_runs`
/// counts what it lists, per status, ignoring the limit.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_list_runs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("List");
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = store
            .create_run(new_run(
                &unique(&format!("list{i}")),
                &agent,
                json!({ "i": i }),
            ))
            .await
            .ctx("create_run")?;
        ids.push(r.id);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    store
        .set_status(
            &ids[1],
            RunStatus::Failed,
            Some(RunFailure {
                code: FailureCode::Handler,
                message: "x".into(),
            }),
        )
        .await
        .ctx("set_status")?;
    let all = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            ..RunFilter::default()
        })
        .await
        .ctx("list_runs")?;
    let got: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    let want: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    ensure!(
        got == want,
        "list_runs must be newest first: {got:?} vs {want:?}"
    );
    let failed = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            statuses: vec![RunStatus::Failed],
            ..RunFilter::default()
        })
        .await
        .ctx("list_runs")?;
    ensure!(
        failed.len() == 1 && failed[0].id == ids[1],
        "status filter failed"
    );
    let two = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            limit: Some(2),
            ..RunFilter::default()
        })
        .await
        .ctx("list_runs")?;
    ensure!(two.len() == 2 && two[0].id == ids[4], "limit failed");

    // `count_runs` counts what `list_runs` lists, per status, whatever the limit.
    let mut want: Vec<(RunStatus, u64)> = RunStatus::ALL
        .into_iter()
        .map(|s| (s, all.iter().filter(|r| r.status == s).count() as u64))
        .filter(|(_, n)| *n > 0)
        .collect();
    let counted = store
        .count_runs(&RunFilter {
            agent: Some(agent.clone()),
            limit: Some(2),
            ..RunFilter::default()
        })
        .await
        .ctx("count_runs")?;
    ensure!(
        counted == want && want.iter().map(|(_, n)| n).sum::<u64>() == 5,
        "count_runs by agent: got {counted:?}, want {want:?}"
    );
    want.retain(|(s, _)| *s == RunStatus::Failed);
    let counted = store
        .count_runs(&RunFilter {
            agent: Some(agent.clone()),
            statuses: vec![RunStatus::Failed],
            ..RunFilter::default()
        })
        .await
        .ctx("count_runs")?;
    ensure!(
        counted == vec![(RunStatus::Failed, 1)],
        "count_runs by status: got {counted:?}, want [(Failed, 1)]"
    );
    let none = store
        .count_runs(&RunFilter {
            agent: Some(unique("NoSuchAgent")),
            ..RunFilter::default()
        })
        .await
        .ctx("count_runs")?;
    ensure!(
        none.is_empty(),
        "count_runs of an agent without runs: {none:?}"
    );
    Ok(())
}

/// `list_runs` lists in one total order, the same in every store (newest first by the
/// millisecond, then by id descending, as bytes), and [`RunFilter::after`] lists exactly
/// the runs after a key in that order: pages read one after the other list every run
/// once, whatever ties one millisecond holds.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_list_runs_keyset(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Keyset");
    // Created back to back, so that several share a millisecond, with ids whose byte order
    // is the reverse of their creation order (and one outside ASCII, one a prefix of
    // another): an order by creation within a millisecond is caught.
    let tag = unique("k");
    let mut ids = Vec::new();
    for i in 0..24_u32 {
        let id = match i {
            0 => format!("{tag}-é"),
            1 => format!("{tag}-Z"),
            2 => format!("{tag}-Z0"),
            _ => format!("{tag}-{}", char::from(b'z' - u8::try_from(i).unwrap_or(0))),
        };
        store
            .create_run(new_run(&id, &agent, json!({ "i": i })))
            .await
            .ctx("create_run")?;
        ids.push(id);
    }
    let filter = RunFilter {
        agent: Some(agent.clone()),
        ..RunFilter::default()
    };
    let all = store.list_runs(&filter).await.ctx("list_runs")?;
    let keys: Vec<RunKey> = all.iter().map(RunKey::of).collect();
    let mut want = keys.clone();
    want.sort_by(|a, b| b.cmp(a));
    ensure!(
        all.len() == ids.len() && keys == want,
        "list_runs must list newest first, then by id descending (as bytes): {keys:?}"
    );
    // Every page after the last key of the one before, three at a time.
    let mut paged = Vec::new();
    let mut after = None;
    // Bounded: a store that does not advance past the key would page for ever.
    for _ in 0..=keys.len() {
        let page = store
            .list_runs(&RunFilter {
                limit: Some(3),
                after: after.clone(),
                ..filter.clone()
            })
            .await
            .ctx("list_runs after a key")?;
        ensure!(
            page.len() <= 3,
            "a page after a key over its limit: {}",
            page.len()
        );
        let Some(last) = page.last() else { break };
        after = Some(RunKey::of(last));
        paged.extend(page.iter().map(RunKey::of));
    }
    ensure!(
        paged == keys,
        "pages after keys must list every run once, in order: {paged:?} vs {keys:?}"
    );
    // After any key, runs of the agent or not: exactly the smaller keys, in order, also
    // for a key in the middle of a millisecond that no run has.
    for key in &keys {
        for probe in [
            key.clone(),
            RunKey {
                created_at: key.created_at,
                id: format!("{}0", key.id),
            },
        ] {
            let got: Vec<RunKey> = store
                .list_runs(&RunFilter {
                    after: Some(probe.clone()),
                    ..filter.clone()
                })
                .await
                .ctx("list_runs after a key")?
                .iter()
                .map(RunKey::of)
                .collect();
            let want: Vec<RunKey> = keys.iter().filter(|k| **k < probe).cloned().collect();
            ensure!(got == want, "after {probe:?}: {got:?}, want {want:?}");
        }
    }
    // Counts ignore the key, as they ignore the limit.
    let counted = store
        .count_runs(&RunFilter {
            after: keys.last().cloned(),
            ..filter.clone()
        })
        .await
        .ctx("count_runs")?;
    ensure!(
        counted == vec![(RunStatus::Running, 24)],
        "count_runs must ignore `after`: {counted:?}"
    );
    Ok(())
}

/// `set_status` quarantines a run that no live lease holds, refuses one that is held, and
/// an operator's retry back to running clears the error.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_set_status(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "status", json!({})).await?;
    let err = RunFailure {
        code: FailureCode::StateCorrupt,
        message: "missing field `cart`".into(),
    };
    let q = store
        .set_status(&r.id, RunStatus::Quarantined, Some(err.clone()))
        .await
        .ctx("set_status")?;
    ensure!(
        q.status == RunStatus::Quarantined && q.error == Some(err.clone()),
        "quarantine not stored"
    );
    let loaded = stored(&store, &r.id).await?;
    ensure!(
        loaded.status == RunStatus::Quarantined && loaded.error == Some(err),
        "quarantine not durable"
    );
    ensure!(
        store
            .claim_run(&r.id, "w", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "a quarantined run was claimable"
    );
    let back = store
        .set_status(&r.id, RunStatus::Running, None)
        .await
        .ctx("set_status")?;
    ensure!(
        back.status == RunStatus::Running && back.error.is_none(),
        "retry did not clear the error"
    );
    let _lease = claim(&store, &r.id, "w").await?;
    ensure!(
        store
            .set_status(&r.id, RunStatus::DeadLettered, None)
            .await
            .is_err(),
        "set_status changed a run held by a live lease"
    );
    ensure!(
        matches!(
            store
                .set_status("no-such-run", RunStatus::Failed, None)
                .await,
            Err(StoreError::NotFound(_))
        ),
        "set_status of an unknown run must be NotFound"
    );
    Ok(())
}

fn graph(agent: &str, extra_state: &str) -> Result<GraphDescription, String> {
    GraphDescription::from_json(
        &json!({
            "agent": agent,
            "states": [
                { "name": "Start", "initial": true, "to": [extra_state] },
                { "name": extra_state, "terminal": true }
            ],
            "tools": [{ "name": "search", "kind": "read" }]
        })
        .to_string(),
    )
    .map_err(|e| e.to_string())
}

/// Graphs are stored per fingerprint; the latest registered one is returned by default.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_agent_graphs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Graph");
    let g1 = graph(&agent, "Done")?;
    let g2 = graph(&agent, "Finished")?;
    store.register_agent(&g1).await.ctx("register_agent")?;
    store
        .register_agent(&g1)
        .await
        .ctx("register_agent again")?;
    ensure!(
        store
            .agent_graph(&agent, None)
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g1),
        "registered graph not returned"
    );
    store.register_agent(&g2).await.ctx("register_agent")?;
    ensure!(
        store
            .agent_graph(&agent, None)
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g2),
        "the most recently registered graph is not the default"
    );
    ensure!(
        store
            .agent_graph(&agent, Some(&g1.fingerprint()))
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g1),
        "graph by fingerprint not returned"
    );
    ensure!(
        store
            .agent_graph(&agent, Some("nope"))
            .await
            .ctx("agent_graph")?
            .is_none(),
        "unknown fingerprint returned a graph"
    );
    let names = store.agents().await.ctx("agents")?;
    ensure!(
        names.iter().filter(|n| **n == agent).count() == 1,
        "agents() must list each agent once: {names:?}"
    );
    let mut sorted = names.clone();
    sorted.sort();
    ensure!(sorted == names, "agents() is not sorted");
    Ok(())
}

/// Damaged stored data (an unknown status name, an unparsable history payload) surfaces as
/// [`StoreError::Corrupt`], never a panic, and other runs are unaffected. `corrupt` damages
/// the given run's stored data in a backend-specific way.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_corrupt_data_is_an_error<F, Fut>(
    store: Arc<dyn Store>,
    corrupt: F,
) -> CheckResult
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let healthy = create(&store, "healthy", json!({ "items": [] })).await?;
    let bad = create(&store, "corrupt", json!({ "items": [] })).await?;
    let lease = claim(&store, &bad.id, "w").await?;
    grow(&store, &lease, 0, 5).await?;
    // Claimable again, so a claimer meets it next to the healthy run.
    store.release_lease(&lease).await.ctx("release_lease")?;
    corrupt(bad.id.clone()).await;
    let store2 = store.clone();
    let bad_id = bad.id.clone();
    // Run in a task so a panic in the store is reported as a failed check with a message.
    let outcome = tokio::spawn(async move {
        let load = store2.load_run(&bad_id).await;
        let at = store2.state_at(&bad_id, 5).await;
        (load, at)
    })
    .await
    .map_err(|e| format!("reading corrupt data panicked: {e}"))?;
    match outcome.0 {
        Ok(Some(_)) | Err(StoreError::Corrupt { .. }) => {}
        other => {
            return Err(format!(
                "load_run of corrupt run gave {other:?}, want Corrupt"
            ));
        }
    }
    match outcome.1 {
        Err(StoreError::Corrupt { run_id, .. }) => {
            ensure!(
                run_id == bad.id,
                "Corrupt names run `{run_id}`, not `{}`",
                bad.id
            );
        }
        other => {
            return Err(format!(
                "state_at of a corrupt version gave {other:?}, want Corrupt"
            ));
        }
    }
    let ok = store
        .load_run(&healthy.id)
        .await
        .ctx("load_run of a healthy run")?;
    ensure!(ok.is_some(), "healthy run vanished");
    ensure!(
        store
            .state_at(&healthy.id, 0)
            .await
            .ctx("state_at of a healthy run")?
            .is_some(),
        "healthy run's history unreadable"
    );
    let claimed = store
        .claim_next(&["Agent".into()], "w9", LONG, 100)
        .await
        .ctx("claim_next next to a corrupt run")?;
    ensure!(
        claimed
            .iter()
            .any(|Claimed { lease: l, .. }| l.run_id == healthy.id),
        "a corrupt run kept claim_next from returning a healthy run"
    );
    if let Ok(Some(r)) = store.load_run(&bad.id).await {
        ensure!(
            !claimed
                .iter()
                .any(|Claimed { lease: l, .. }| l.run_id == bad.id)
                || r.state.is_object(),
            "claim_next handed out a run whose state does not read"
        );
    }
    Ok(())
}
