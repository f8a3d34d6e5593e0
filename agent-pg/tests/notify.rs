//! PostgreSQL-specific behaviour: NOTIFY wakes idle workers of other store instances, and a
//! commit whose acknowledgement was lost is resolved by re-reading the run.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{
    Claimed, HistoryStore, NewRun, OperatorStore, RunStatus, RunStore, StepCommit, StoreError,
    TransitionKind,
};
use agent_pg::PgStore;
use serde_json::json;

fn new_run(id: &str) -> NewRun {
    NewRun::new(id, "Checkout", "fp", "Browsing", json!({ "cart": [] }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_a_worker_of_another_instance() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let url = common::database_url().unwrap();
    let idle = Arc::new(PgStore::connect(&url, store.schema()).await.unwrap());
    // Start the listener, then give LISTEN time to be in place.
    idle.wait_for_work(Duration::from_millis(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (i, wake) in ["create", "signal", "status"].into_iter().enumerate() {
        let waiter = {
            let idle = idle.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                idle.wait_for_work(Duration::from_secs(20)).await;
                t.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let id = format!("run-{i}");
        match wake {
            "create" => {
                store.create_run(new_run(&id)).await.unwrap();
            }
            "signal" => {
                store.create_run(new_run(&id)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                store
                    .send_signal(&id, "approval", &json!(true))
                    .await
                    .unwrap();
            }
            _ => {
                store.create_run(new_run(&id)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                store
                    .set_status(&id, RunStatus::Running, None)
                    .await
                    .unwrap();
            }
        }
        let took = waiter.await.unwrap();
        assert!(
            took < Duration::from_secs(5),
            "{wake}: wait_for_work took {took:?}; NOTIFY did not wake it"
        );
    }
    common::drop_store(store).await;
}

/// The documented recovery of a lost acknowledgement: re-read the run and compare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ack_is_resolved_by_rereading_never_by_committing_twice() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    store.create_run(new_run("r")).await.unwrap();
    let Claimed { lease, .. } = store
        .claim_run("r", "w", Duration::from_mins(1))
        .await
        .unwrap()
        .unwrap();
    let commit = StepCommit {
        expected_version: 0,
        from_state: "Browsing".into(),
        to_state: "Review".into(),
        state: json!({ "cart": ["apple"] }),
        kind: TransitionKind::Step,
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    };
    // The commit lands, but the caller never hears (simulated: the result is dropped).
    let _lost = store.commit_step(&lease, &commit, &[]).await;
    // Recovery: re-read; version == expected + 1 with our epoch and state means it landed.
    let now = store.load_run("r").await.unwrap().unwrap();
    assert_eq!(now.version, commit.expected_version + 1);
    assert_eq!(now.epoch, lease.epoch);
    assert_eq!(now.state, commit.state);
    // Committing blindly again would be refused, never applied twice.
    assert!(matches!(
        store.commit_step(&lease, &commit, &[]).await,
        Err(StoreError::Conflict { found: 1, .. })
    ));
    assert_eq!(store.history("r").await.unwrap().len(), 2);
    common::drop_store(store).await;
}

/// A connection that cannot be made is `Unavailable` (transient), so the runner retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    store.pool().close().await;
    let err = store.load_run("r").await.unwrap_err();
    assert!(err.is_transient(), "{err:?} is not transient");
    common::drop_store_after_close(store).await;
}

/// Connections killed under the store (a restart or a dropped link) surface as `Unavailable`
/// at most, the pool reconnects, and the step is resolved by re-reading, never committed
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_are_transient_and_the_run_continues() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    store.create_run(new_run("k")).await.unwrap();
    let Claimed { lease, .. } = store
        .claim_run("k", "w", Duration::from_mins(1))
        .await
        .unwrap()
        .unwrap();
    let admin = PgStore::connect(&common::database_url().unwrap(), store.schema())
        .await
        .unwrap();
    for v in 0..5u64 {
        // Kill every connection of the store's pool (named after its schema).
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND application_name = $1",
        )
        .bind(format!("agent-pg/{}", store.schema()))
        .execute(admin.pool())
        .await
        .unwrap();
        let commit = StepCommit {
            expected_version: v,
            from_state: "Browsing".into(),
            to_state: "Browsing".into(),
            state: json!({ "cart": [v] }),
            kind: TransitionKind::Step,
            status: RunStatus::Running,
            waiting_for: None,
            wake_at: None,
            error: None,
            consumed_signal: None,
            spend: None,
        };
        // The caller's loop: retry transient errors, resolving each by re-reading.
        let mut attempts = 0;
        loop {
            attempts += 1;
            assert!(attempts < 20, "the store did not recover");
            match store.commit_step(&lease, &commit, &[]).await {
                Ok(r) => {
                    assert_eq!(r.version, v + 1);
                    break;
                }
                Err(e) if e.is_transient() => {
                    eprintln!("step {v}: transient: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    match store.load_run("k").await {
                        Ok(Some(r)) if r.version == v + 1 && r.epoch == lease.epoch => break,
                        Ok(Some(r)) => assert_eq!(r.version, v, "the run moved elsewhere"),
                        Ok(None) => panic!("run vanished"),
                        Err(e) => assert!(e.is_transient(), "{e:?}"),
                    }
                }
                Err(e) => panic!("not transient: {e:?}"),
            }
        }
    }
    let history = store.history("k").await.unwrap();
    assert_eq!(
        history.iter().map(|t| t.version).collect::<Vec<_>>(),
        (0..=5).collect::<Vec<_>>()
    );
    common::drop_store(store).await;
}
