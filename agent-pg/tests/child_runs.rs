//! Child runs on PostgreSQL beyond the conformance suite: a child's final commit wakes the
//! idle workers of other store instances (its parent may be claimable now), and a child
//! row whose parent columns do not match reads as corrupt.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_conformance::store_checks::step;
use agent_core::store::{
    Claimed, HistoryStore, NewRun, ROW_UNREADABLE, RunFilter, RunStatus, RunStore, StoreError,
};
use agent_pg::PgStore;
use serde_json::json;

const LONG: Duration = Duration::from_mins(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_final_commit_wakes_the_parents_worker() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let url = common::database_url().unwrap();
    let idle = Arc::new(PgStore::connect(&url, store.schema()).await.unwrap());
    // The parent, waiting at version 1 for its one child spawned at version 0.
    store
        .create_run(NewRun::new("parent", "Parent", "fp", "Start", json!({})))
        .await
        .unwrap();
    let Claimed { lease, .. } = store.claim_run("parent", "w", LONG).await.unwrap().unwrap();
    store
        .create_run(NewRun::new("child", "Child", "fp", "Start", json!({})).spawned_by("parent", 0))
        .await
        .unwrap();
    let mut wait = step(0, json!({}));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some(agent_core::store::WaitingFor::AllChildren);
    store.commit_step(&lease, &wait, &[]).await.unwrap();
    store.release_lease(&lease).await.unwrap();
    let Claimed {
        lease: child_lease, ..
    } = store.claim_run("child", "w", LONG).await.unwrap().unwrap();
    assert!(
        idle.claim_next(&["Parent".to_owned()], "idle", LONG, 5)
            .await
            .unwrap()
            .is_empty(),
        "the parent is claimable while its child runs"
    );
    // Start the listener, then give LISTEN time to be in place.
    idle.wait_for_work(Duration::from_millis(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiter = {
        let idle = idle.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            idle.wait_for_work(Duration::from_secs(20)).await;
            t.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut done = step(0, json!({ "done": true }));
    done.status = RunStatus::Completed;
    let child = store.commit_step(&child_lease, &done, &[]).await.unwrap();
    assert!(
        child.lease_owner.is_none(),
        "the final commit ended the lease"
    );
    let took = waiter.await.unwrap();
    assert!(
        took < Duration::from_secs(5),
        "wait_for_work took {took:?}: the child's final commit did not NOTIFY"
    );
    let claimed = idle
        .claim_next(&["Parent".to_owned()], "idle", LONG, 5)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the woken worker finds the parent");
    assert_eq!(claimed[0].record.id, "parent");
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_without_its_version_is_corrupt() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    store
        .create_run(NewRun::new("child", "Child", "fp", "Start", json!({})).spawned_by("p", 2))
        .await
        .unwrap();
    sqlx::query("UPDATE runs SET spawned_at_version = NULL WHERE id = 'child'")
        .execute(store.pool())
        .await
        .unwrap();
    let loaded = store.load_run("child").await;
    assert!(
        matches!(&loaded, Err(StoreError::Corrupt { run_id, .. }) if run_id == "child"),
        "{loaded:?}"
    );
    // Listed as far as it reads, without the parent it half names.
    let listed = store.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].error.as_ref().map(|e| e.code.as_str()),
        Some(ROW_UNREADABLE)
    );
    assert_eq!(listed[0].spawned_by, None);
    common::drop_store(store).await;
}
