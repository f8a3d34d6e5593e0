//! Writes a store with runs of the fixture agent, for `scripts/api-test` (schemathesis
//! against `agentctl serve`) and for trying the API by hand: a SQLite store at
//! `$API_TEST_DB`, or, with `$API_TEST_PG_SCHEMA`, a PostgreSQL one in that schema of
//! `$DATABASE_URL` (`drop_fixture_schema` drops it again):
//! `API_TEST_DB=/tmp/runs.sqlite3 cargo test --workspace --test fixture_db -- --ignored`.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::schedule::{NewSchedule, create_schedule, trigger_schedule};
use agent_core::store::{RunFailure, RunStatus};
use common::Db;
use serde_json::{Value, json};

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
    // Schedules, so that their listing and reads answer with records: a daily one in a
    // time zone with a tick asked for by hand, and a paused interval.
    let schedule = |id: &str, spec: Value, paused: bool| {
        serde_json::from_value::<NewSchedule>(json!({
            "id": id,
            "agent": "Order",
            "spec": spec,
            "paused": paused,
            "overlap": "buffer_one",
            "catch_up": { "up_to": 2 },
            "initial_state": { "Start": { "items": ["apple"] } },
            "labels": { "team": "ops" },
        }))
        .unwrap()
    };
    let now = agent_core::store::now_ms();
    for (id, spec, paused) in [
        (
            "nightly",
            json!({ "cron": { "expression": "30 2 * * *", "time_zone": "Europe/Berlin" } }),
            false,
        ),
        (
            "hourly",
            json!({ "interval": { "every_ms": 3_600_000 } }),
            true,
        ),
    ] {
        let starter = db.runner("Pay");
        create_schedule(
            db.store.as_ref(),
            schedule(id, spec, paused),
            Some(&starter),
            now,
        )
        .await
        .unwrap();
    }
    trigger_schedule(db.store.as_ref(), "nightly", now)
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
