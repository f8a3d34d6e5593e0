//! Child runs on SQLite beyond the conformance suite: a child's final commit wakes the idle
//! workers (its parent may be claimable now), and a child row whose parent columns do not
//! match reads as corrupt.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_conformance::store_checks::step;
use agent_core::store::{
    Claimed, HistoryStore, NewRun, ROW_UNREADABLE, RunFilter, RunStatus, RunStore, StoreError,
};
use agent_sqlite::SqliteStore;
use serde_json::json;

const LONG: Duration = Duration::from_mins(1);

async fn fresh_store() -> (Arc<SqliteStore>, PathBuf) {
    let path = common::new_db_path("");
    (Arc::new(SqliteStore::open(&path).await.unwrap()), path)
}

async fn remove(store: Arc<SqliteStore>, path: PathBuf) {
    store.close().await;
    common::remove_db_files(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_final_commit_wakes_the_parents_worker() {
    let (store, path) = fresh_store().await;
    store
        .create_run(NewRun::new("parent", "Parent", "fp", "Start", json!({})))
        .await
        .unwrap();
    let Claimed { lease, .. } = store.claim_run("parent", "w", LONG).await.unwrap().unwrap();
    for id in ["a", "b"] {
        store
            .create_run(NewRun::new(id, "Child", "fp", "Start", json!({})).spawned_by("parent", 0))
            .await
            .unwrap();
    }
    let mut wait = step(0, json!({}));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some(agent_core::store::WaitingFor::FirstChild);
    store.commit_step(&lease, &wait, &[]).await.unwrap();
    store.release_lease(&lease).await.unwrap();
    let Claimed {
        lease: child_lease, ..
    } = store.claim_run("a", "w", LONG).await.unwrap().unwrap();
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            store.wait_for_work(Duration::from_secs(20)).await;
            t.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut done = step(0, json!({ "done": true }));
    done.status = RunStatus::Completed;
    store.commit_step(&child_lease, &done, &[]).await.unwrap();
    let took = waiter.await.unwrap();
    assert!(
        took < Duration::from_secs(5),
        "wait_for_work took {took:?}: the child's final commit woke nobody"
    );
    let claimed = store
        .claim_next(&["Parent".to_owned()], "idle", LONG, 5)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the woken worker finds the parent");
    assert_eq!(claimed[0].record.id, "parent");
    remove(store, path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_without_its_version_is_corrupt() {
    let (store, path) = fresh_store().await;
    store
        .create_run(NewRun::new("child", "Child", "fp", "Start", json!({})).spawned_by("p", 2))
        .await
        .unwrap();
    sqlx::query("UPDATE runs SET spawned_by = NULL WHERE id = 'child'")
        .execute(store.pool())
        .await
        .unwrap();
    let loaded = store.load_run("child").await;
    assert!(
        matches!(&loaded, Err(StoreError::Corrupt { run_id, .. }) if run_id == "child"),
        "{loaded:?}"
    );
    let listed = store.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].error.as_ref().map(|e| e.code.as_str()),
        Some(ROW_UNREADABLE)
    );
    assert_eq!(listed[0].spawned_by, None);
    remove(store, path).await;
}
