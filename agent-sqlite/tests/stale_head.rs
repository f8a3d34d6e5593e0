//! A store remembers the head of each run it committed, so that its next commit need not
//! read the run back. When another store on the same file has moved the run since, the
//! commit's compare-and-set on version and epoch refuses it: nothing is written, and the
//! answer says why.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_conformance::store_checks::step;
use agent_core::store::{
    Claimed, HistoryStore, NewRun, OperatorStore, RunStatus, RunStore, StoreError,
};
use agent_sqlite::SqliteStore;
use serde_json::json;

/// Two stores on one new file, holding run `r` at version 0.
async fn two_stores() -> (SqliteStore, SqliteStore, PathBuf) {
    let path = common::new_db_path("");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    a.create_run(NewRun::new("r", "A", "fp", "Start", json!({ "n": 0 })))
        .await
        .unwrap();
    (a, b, path)
}

async fn close(a: SqliteStore, b: SqliteStore, path: &Path) {
    a.close().await;
    b.close().await;
    common::remove_db_files(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_from_a_stale_remembered_head_writes_nothing() {
    let (a, b, path) = two_stores().await;
    let hour = Duration::from_hours(1);
    let Claimed { lease, .. } = a.claim_run("r", "w", hour).await.unwrap().unwrap();

    // `a` remembers version 1; `b` moves the run to version 2 behind its back.
    a.commit_step(&lease, &step(0, json!({ "n": 1 })), &[])
        .await
        .unwrap();
    b.commit_step(&lease, &step(1, json!({ "n": 2 })), &[])
        .await
        .unwrap();
    match a
        .commit_step(&lease, &step(1, json!({ "n": "stale" })), &[])
        .await
    {
        Err(StoreError::Conflict {
            expected: 1,
            found: 2,
            ..
        }) => {}
        other => panic!("a stale remembered version must be a conflict, got {other:?}"),
    }

    // `a` catches up to version 3 and remembers it; `b` claims the run again (a new
    // epoch), so `a`'s lease is stale though its remembered version is current.
    a.commit_step(&lease, &step(2, json!({ "n": 3 })), &[])
        .await
        .unwrap();
    let Claimed {
        lease: new_lease, ..
    } = b.claim_run("r", "w", hour).await.unwrap().unwrap();
    assert!(new_lease.epoch > lease.epoch);
    match a
        .commit_step(&lease, &step(3, json!({ "n": "stale" })), &[])
        .await
    {
        Err(StoreError::LeaseLost { .. }) => {}
        other => panic!("a stale epoch must lose the lease, got {other:?}"),
    }

    let run = b.load_run("r").await.unwrap().unwrap();
    assert_eq!((run.version, run.state), (3, json!({ "n": 3 })));
    let versions: Vec<u64> = b
        .history("r")
        .await
        .unwrap()
        .iter()
        .map(|t| t.version)
        .collect();
    assert_eq!(versions, [0, 1, 2, 3]);
    close(a, b, &path).await;
}

/// The common step leaves the run's status alone (a cheaper statement); when the stored
/// status is no longer the remembered one, the commit still writes the status it carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_writes_its_status_when_the_stored_one_moved() {
    let (a, b, path) = two_stores().await;
    // A short lease, so that another store may change the status once it ran out.
    let Claimed { lease, .. } = a
        .claim_run("r", "w", Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    a.commit_step(&lease, &step(0, json!({ "n": 1 })), &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.set_status("r", RunStatus::Waiting, None).await.unwrap();
    // `a` remembers `Running` at version 1; nobody claimed the run since, so its lease's
    // epoch is still current.
    let committed = a
        .commit_step(&lease, &step(1, json!({ "n": 2 })), &[])
        .await
        .unwrap();
    assert_eq!(committed.status, RunStatus::Running);
    let run = b.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (run.version, run.status, run.state),
        (2, RunStatus::Running, json!({ "n": 2 }))
    );
    close(a, b, &path).await;
}
