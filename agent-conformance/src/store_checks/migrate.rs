//! Migrations ([`RunStore::migrate_run`]): a fenced transition of its own, once per run, that
//! the hash chain, time travel and fork see; and the claim filter by `Agent@N`.

use std::sync::Arc;

use serde_json::json;

use super::LONG as TTL;
use agent_core::store::verify::verify_run;
use agent_core::store::{
    Claimed, MigrationCommit, MigrationNote, NewRun, RunFilter, RunStatus, Store, StoreError,
    TransitionKind,
};

fn ensure(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.to_owned()) }
}

/// A migration of `run` (at `version`, on agent version 1) to version 2.
fn to_v2(version: u64) -> MigrationCommit {
    MigrationCommit {
        expected_version: version,
        from_agent_version: 1,
        to_agent_version: 2,
        fingerprint: "f2".into(),
        from_state: "A".into(),
        to_state: "B2".into(),
        state: json!({ "B2": { "n": 2 } }),
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        resume_base: Some(version),
        note: MigrationNote {
            agent: "Versioned".into(),
            from_version: 1,
            from_fingerprint: "f1".into(),
            to_version: 2,
            to_fingerprint: "f2".into(),
            resume_base: Some(version),
        },
    }
}

/// A migration writes one `migrated` version under the holder's lease (kept), moves the
/// run's agent version and fingerprint, and records its resume base; a second one from
/// the same version, or one under a stale lease, is refused with nothing written; the
/// chain verifies across it; time travel shows both sides; a fork from before it starts
/// on the old version, one from after it on the new.
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_migration_is_a_fenced_transition_once(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    let old = json!({ "A": { "n": 1 } });
    let run = store
        .create_run(NewRun::new("m1", "Versioned", "f1", "A", old.clone()))
        .await
        .map_err(|e| e.to_string())?;
    ensure(run.agent_version == 1, "a new run is on agent version 1")?;
    let Claimed { lease: stale, .. } = store
        .claim_run("m1", "w-old", TTL)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("claim")?;
    // Another worker takes the run over (the first one's lease is fenced out).
    store
        .release_lease(&stale)
        .await
        .map_err(|e| e.to_string())?;
    let Claimed { lease, .. } = store
        .claim_run("m1", "w-new", TTL)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("claim again")?;
    match store.migrate_run(&stale, &to_v2(0)).await {
        Err(StoreError::LeaseLost { .. }) => {}
        other => return Err(format!("a stale lease's migration: {other:?}")),
    }
    let untouched = store.load_run("m1").await.map_err(|e| e.to_string())?;
    ensure(
        untouched.is_some_and(|r| r.version == 0 && r.agent_version == 1),
        "a refused migration wrote nothing",
    )?;
    let migrated = store
        .migrate_run(&lease, &to_v2(0))
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        migrated.version == 1
            && migrated.agent_version == 2
            && migrated.fingerprint == "f2"
            && migrated.state_name == "B2"
            && migrated.status == RunStatus::Running
            && migrated.lease_owner.as_deref() == Some("w-new")
            && migrated.migration_resume_base() == Some(0),
        &format!("the migrated run: {migrated:?}"),
    )?;
    let loaded = store
        .load_run("m1")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("loaded")?;
    ensure(
        loaded == migrated,
        &format!("the returned record is what is stored: {loaded:?} vs {migrated:?}"),
    )?;
    // Exactly once: a second migration from version 1 (a worker that raced this one) is
    // refused.
    let mut again = to_v2(1);
    again.resume_base = None;
    match store.migrate_run(&lease, &again).await {
        Err(StoreError::Conflict { .. }) => {}
        other => return Err(format!("a second migration from version 1: {other:?}")),
    }
    let history = store.history("m1").await.map_err(|e| e.to_string())?;
    let migrations: Vec<_> = (history.iter())
        .filter(|t| t.kind == TransitionKind::Migrated)
        .collect();
    ensure(migrations.len() == 1, "one migration in the history")?;
    let note = migrations[0]
        .note
        .as_ref()
        .ok_or("the migration has a note")?;
    ensure(
        MigrationNote::parse(note).is_some_and(|n| n.from_version == 1 && n.to_version == 2),
        &format!("the note reads back: {note:?}"),
    )?;
    let report = verify_run(store.as_ref(), &loaded)
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        report.problem.is_none(),
        &format!(
            "the chain verifies across the migration: {:?}",
            report.problem
        ),
    )?;
    // A step commits after it as after any version; the resume base stops applying.
    let step = agent_core::store::StepCommit {
        expected_version: 1,
        from_state: "B2".into(),
        to_state: "C2".into(),
        state: json!({ "C2": {} }),
        kind: TransitionKind::Step,
        status: RunStatus::Completed,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    };
    let done = store
        .commit_step(&lease, &step, &[])
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        done.agent_version == 2 && done.migration_resume_base().is_none(),
        "a later commit keeps the version and leaves the resume base behind",
    )?;
    let report = verify_run(store.as_ref(), &done)
        .await
        .map_err(|e| e.to_string())?;
    ensure(report.problem.is_none(), "the chain verifies after a step")?;
    // Time travel on both sides.
    let at0 = store.state_at("m1", 0).await.map_err(|e| e.to_string())?;
    let at1 = store.state_at("m1", 1).await.map_err(|e| e.to_string())?;
    ensure(
        at0.is_some_and(|s| s.state == old && s.state_name == "A"),
        "version 0 is the old state",
    )?;
    ensure(
        at1.is_some_and(|s| s.state == json!({ "B2": { "n": 2 } }) && s.state_name == "B2"),
        "version 1 is the migrated state",
    )?;
    // Forks: from before the migration on the old version, from after on the new.
    let before = store
        .fork("m1", 0, "m1-f0")
        .await
        .map_err(|e| e.to_string())?;
    let after = store
        .fork("m1", 1, "m1-f1")
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        before.agent_version == 1 && before.fingerprint == "f1" && before.state == old,
        &format!("a fork from before the migration: {before:?}"),
    )?;
    ensure(
        after.agent_version == 2 && after.fingerprint == "f2" && after.state_name == "B2",
        &format!("a fork from after the migration: {after:?}"),
    )?;
    Ok(())
}

/// A compensating run, or one whose cancel is requested, is not migrated.
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_migration_refuses_compensating_runs(
    store: Arc<dyn Store>,
) -> Result<(), String> {
    store
        .create_run(NewRun::new(
            "mc",
            "Versioned",
            "f1",
            "A",
            json!({ "A": { "n": 1 } }),
        ))
        .await
        .map_err(|e| e.to_string())?;
    let Claimed { lease, .. } = store
        .claim_run("mc", "w", TTL)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("claim")?;
    let compensating = agent_core::store::StepCommit {
        expected_version: 0,
        from_state: "A".into(),
        to_state: "A".into(),
        state: json!({ "A": { "n": 1 } }),
        kind: TransitionKind::Status,
        status: RunStatus::Compensating,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    };
    store
        .commit_step(&lease, &compensating, &[])
        .await
        .map_err(|e| e.to_string())?;
    match store.migrate_run(&lease, &to_v2(1)).await {
        Err(StoreError::Backend(_)) => {}
        other => return Err(format!("migrating a compensating run: {other:?}")),
    }
    let run = store
        .load_run("mc")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("run")?;
    ensure(
        run.version == 1 && run.agent_version == 1,
        "nothing was written",
    )
}

/// `claim_next` takes `Agent` (any version) and `Agent@N` (that version only); listing
/// and counting filter by agent version alike; `count_versions` counts per version and
/// recorded graph, and listing filters by graph.
///
/// # Errors
/// What the store or the runner did wrong, when it breaks the guarantee.
pub async fn check_claim_next_filters_by_version(store: Arc<dyn Store>) -> Result<(), String> {
    for (id, version) in [("v1-a", 1), ("v2-a", 2), ("v3-a", 3), ("v1-b", 1)] {
        store
            .create_run(
                NewRun::new(
                    id,
                    "Versioned",
                    format!("f{version}"),
                    "A",
                    json!({ "A": {} }),
                )
                .with_agent_version(version),
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    let ids = |claimed: Vec<agent_core::store::Claimed>| {
        let mut ids: Vec<String> = claimed.into_iter().map(|c| c.record.id).collect();
        ids.sort();
        ids
    };
    let entries = ["Versioned@2".to_owned(), "Versioned@1".to_owned()];
    let got = ids(store
        .claim_next(&entries, "w12", TTL, 10)
        .await
        .map_err(|e| e.to_string())?);
    ensure(
        got == ["v1-a", "v1-b", "v2-a"],
        &format!("a worker of versions 1 and 2 claimed {got:?}"),
    )?;
    let got = ids(store
        .claim_next(&["Versioned@2".to_owned()], "w2", TTL, 10)
        .await
        .map_err(|e| e.to_string())?);
    ensure(got.is_empty(), &format!("claimed runs twice: {got:?}"))?;
    let got = ids(store
        .claim_next(&["Other@3".to_owned()], "w", TTL, 10)
        .await
        .map_err(|e| e.to_string())?);
    ensure(got.is_empty(), "another agent's version claims nothing")?;
    let got = ids(store
        .claim_next(&["Versioned".to_owned()], "wany", TTL, 10)
        .await
        .map_err(|e| e.to_string())?);
    ensure(
        got == ["v3-a"],
        &format!("the agent's name claims any version: {got:?}"),
    )?;
    let listed = store
        .list_runs(&RunFilter {
            agent_version: Some(1),
            ..RunFilter::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut listed: Vec<String> = listed.into_iter().map(|r| r.id).collect();
    listed.sort();
    ensure(
        listed == ["v1-a", "v1-b"],
        &format!("listed by version: {listed:?}"),
    )?;
    let counted = store
        .count_runs(&RunFilter {
            agent_version: Some(2),
            ..RunFilter::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        counted == [(RunStatus::Running, 1)],
        &format!("counted by version: {counted:?}"),
    )?;
    // A version 1 run that recorded another graph: counted apart, listed by its graph.
    store
        .create_run(
            NewRun::new("v1-c", "Versioned", "g1", "A", json!({ "A": {} })).with_agent_version(1),
        )
        .await
        .map_err(|e| e.to_string())?;
    let versioned = RunFilter {
        agent: Some("Versioned".to_owned()),
        ..RunFilter::default()
    };
    let counted: Vec<(u32, String, u64)> = store
        .count_versions(&RunFilter {
            limit: Some(1),
            ..versioned.clone()
        })
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| (c.agent_version, c.fingerprint, c.runs))
        .collect();
    let expected = [(1, "f1", 2), (1, "g1", 1), (2, "f2", 1), (3, "f3", 1)]
        .map(|(v, f, n)| (v, f.to_owned(), n));
    ensure(
        counted == expected,
        &format!("counted by version and graph, whatever the limit: {counted:?}"),
    )?;
    let listed = store
        .list_runs(&RunFilter {
            fingerprint: Some("g1".to_owned()),
            ..versioned.clone()
        })
        .await
        .map_err(|e| e.to_string())?;
    let listed: Vec<String> = listed.into_iter().map(|r| r.id).collect();
    ensure(listed == ["v1-c"], &format!("listed by graph: {listed:?}"))?;
    let counted = store
        .count_versions(&RunFilter {
            statuses: vec![RunStatus::Waiting],
            ..versioned
        })
        .await
        .map_err(|e| e.to_string())?;
    ensure(
        counted.is_empty(),
        &format!("counted under a status no run is in: {counted:?}"),
    )
}
