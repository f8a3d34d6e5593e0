//! Writes a store with runs of the fixture agent, for `scripts/api-test` (schemathesis
//! against `agentctl serve`) and for trying the API by hand: a SQLite store at
//! `$API_TEST_DB`, or, with `$API_TEST_PG_SCHEMA`, a PostgreSQL one in that schema of
//! `$DATABASE_URL` (`drop_fixture_schema` drops it again):
//! `API_TEST_DB=/tmp/runs.sqlite3 cargo test --workspace --test fixture_db -- --ignored`.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::{RunFailure, RunStatus};
use common::Db;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes a store for scripts/api-test"]
async fn write_fixture_db() {
    let (db, path) = if let Ok(schema) = std::env::var("API_TEST_PG_SCHEMA") {
        (Db::pg_in(&schema).await, format!("schema {schema}"))
    } else {
        let path = std::env::var("API_TEST_DB").expect("set API_TEST_DB to a file path");
        (Db::open(std::path::Path::new(&path)).await, path)
    };
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
                message: "5 lost claims in a row without progress".into(),
            }),
        )
        .await
        .unwrap();
    println!("wrote {path}");
}

#[tokio::test]
#[ignore = "drops the schema scripts/api-test wrote"]
async fn drop_fixture_schema() {
    let schema = std::env::var("API_TEST_PG_SCHEMA").expect("set API_TEST_PG_SCHEMA");
    let url = std::env::var("DATABASE_URL").expect("set DATABASE_URL");
    let store = agent_pg::PgStore::connect(&url, &schema)
        .await
        .expect("connect");
    store.drop_schema().await.expect("drop the schema");
}
