//! Writes a SQLite store with runs of the fixture agent to `$API_TEST_DB`, for
//! `scripts/api-test` (schemathesis against `agentctl serve`) and for trying the API by hand:
//! `API_TEST_DB=/tmp/runs.sqlite3 cargo test --workspace --test fixture_db -- --ignored`.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::{RunFailure, RunStatus};
use common::Db;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes a store for scripts/api-test"]
async fn write_fixture_db() {
    let path = std::env::var("API_TEST_DB").expect("set API_TEST_DB to a file path");
    let db = Db::open(std::path::Path::new(&path)).await;
    // Waiting for its confirmation; completed; cancelled by the router (compensated).
    db.drive("order-waiting", "Pay").await;
    db.drive("order-done", "Pay").await;
    let r = db.runner("Pay");
    r.signal("order-done", "confirm", json!({"ok": true}))
        .await
        .unwrap();
    r.run("order-done").await.unwrap();
    db.drive("order-cancelled", "Cancelled").await;
    // One an operator has to deal with.
    db.drive("order-stuck", "Pay").await;
    db.store
        .set_status(
            "order-stuck",
            RunStatus::DeadLettered,
            Some(RunFailure {
                code: "crash_loop".into(),
                message: "claimed 5 times without progress".into(),
            }),
        )
        .await
        .unwrap();
    println!("wrote {path}");
}
