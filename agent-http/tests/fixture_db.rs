//! Writes a store with runs of the fixture agent, for `scripts/api-test` (schemathesis
//! against `agentctl serve`) and for trying the API by hand: a SQLite store at
//! `$API_TEST_DB`, or, with `$API_TEST_PG_SCHEMA`, a PostgreSQL one in that schema of
//! `$DATABASE_URL` (`drop_fixture_schema` drops it again):
//! `API_TEST_DB=/tmp/runs.sqlite3 cargo test --workspace --test fixture_db -- --ignored`.
//!
//! `serve_fixture_agent` is the fixture agent's service, for `scripts/ts-client-test`: the
//! stock `agentctl serve` links no agent code and starts no runs, so the runs the
//! TypeScript client starts are started here, as a user's service starts them.

extern crate durable_agents_http as agent_http;

mod common;

use std::time::Duration;

use agent_core::runner::{Worker, WorkerConfig};
use agent_core::schedule::{NewSchedule, create_schedule, trigger_schedule};
use agent_core::store::{RunFailure, RunStatus};
use agent_http::ApiConfig;
use common::{Db, Server};
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

/// The fixture agent served as a service serves its agents: the API with the agent
/// registered (`POST /v1/agents/Order/runs` starts runs whose router picks `Pay`) and a
/// worker driving them, so a run waits for `confirm` and completes once the signal comes,
/// sent through this server or through an `agentctl serve` on the same file (a worker
/// polls for what other processes write).
///
/// Opens (creates) the SQLite store at `$API_TEST_DB` as its worker; the token is
/// `$DURABLE_AGENTS_TOKEN`. Prints `serving on http://127.0.0.1:PORT` once it listens
/// (run it with `--nocapture`), and stops after `$FIXTURE_SERVE_SECONDS` (600 by default)
/// so that a server its script failed to stop does not outlive it by long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "serves the fixture agent for scripts/ts-client-test until stopped"]
async fn serve_fixture_agent() {
    let path = std::env::var("API_TEST_DB").expect("set API_TEST_DB to a file path");
    let token = std::env::var("DURABLE_AGENTS_TOKEN").expect("set DURABLE_AGENTS_TOKEN");
    let lifetime = match std::env::var("FIXTURE_SERVE_SECONDS") {
        Ok(s) => s
            .parse()
            .map(Duration::from_secs)
            .expect("FIXTURE_SERVE_SECONDS is a number of seconds"),
        Err(_) => Duration::from_mins(10),
    };
    let db = Db::open(std::path::Path::new(&path)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let config = ApiConfig::default()
        .with_token(token)
        .with_agent(db.runner("Pay"));
    let server = Server::serve_on(&db.store, config, listener);
    // Signals sent through another process wake nothing here (SQLite notifies within a
    // process): a short poll keeps the client's test from waiting on the default 500 ms.
    let worker = Worker::new(
        db.runner("Pay"),
        WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    );
    println!("serving on {}", server.base);
    worker.run_until(tokio::time::sleep(lifetime)).await;
    drop(server);
}
