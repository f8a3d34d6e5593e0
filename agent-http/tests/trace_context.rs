//! Issue 44, traces through the HTTP API: a request carrying a W3C `traceparent` gets a
//! span in the caller's trace (`{method} {route}`, never a run id in its name); a run it
//! starts keeps the request's span as its parent (`trace.parent`), so the run is in the
//! caller's trace; a retried start from another trace is the same start; a signal sent
//! through the API links its request to the run it wakes.
//!
//! One test: telemetry is installed once per process.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::RunStatus;
use agent_core::trace::{RunTrace, TRACE_PARENT_LABEL, TraceParent};
use agent_http::ApiConfig;
use agent_observe::{Telemetry, Traces};
use common::{Db, Server, TOKEN, client, json};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;

const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const SIGNALLER: &str = "00-1bf7651916cd43dd8448eb211c80319d-c7ad6b7169203332-01";

fn spans_named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_continue_their_callers_traces_and_runs_join_them() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::new()
        .traces(Traces::exporter(exporter.clone()))
        .log_filter("warn")
        .install()
        .expect("telemetry installs");
    let db = Db::new().await;
    let config = ApiConfig::default()
        .with_token(TOKEN)
        .with_agent(db.runner("Pay"));
    let server = Server::serve(&db.store, config).await;
    let bearer = format!("Bearer {TOKEN}");
    let start = |traceparent: &'static str| {
        client()
            .post(server.url("/v1/agents/Order/runs"))
            .header("authorization", &bearer)
            .header("traceparent", traceparent)
            .json(&json!({"id": "traced-7", "state": {"Start": {"items": ["apple"]}}}))
            .send()
    };

    let (status, body) = json(start(CALLER).await.unwrap()).await;
    assert_eq!(status, 201, "{body}");
    let caller = TraceParent::parse(CALLER).unwrap();
    let run = db.store.load_run("traced-7").await.unwrap().unwrap();
    let label = run
        .labels
        .get(TRACE_PARENT_LABEL)
        .expect("the run keeps its parent");
    let parent = TraceParent::parse(label).expect("a traceparent");
    assert_eq!(
        parent.trace_id, caller.trace_id,
        "the run is in the caller's trace"
    );
    let trace = RunTrace::of_record(&run);
    assert_eq!(trace.trace_id, caller.trace_id);

    // A retried start from another trace is the same start: found, not refused.
    let (status, body) = json(start(SIGNALLER).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["created"], false);
    let again = db.store.load_run("traced-7").await.unwrap().unwrap();
    assert_eq!(again.labels, run.labels, "the first start's parent is kept");

    // Driven by a worker: its step spans are the run's, in the caller's trace.
    let waiting = db.runner("Pay").run("traced-7").await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);
    let (status, body) = json(
        client()
            .post(server.url("/v1/runs/traced-7/signals"))
            .header("authorization", &bearer)
            .header("traceparent", SIGNALLER)
            .json(&json!({"name": "confirm", "payload": {"ok": true}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = db.runner("Pay").run("traced-7").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    telemetry.flush();
    let spans = exporter.get_finished_spans().unwrap();

    let starts = spans_named(&spans, "POST /v1/agents/{agent}/runs");
    assert_eq!(starts.len(), 2, "one span per start request");
    let first = starts
        .iter()
        .find(|s| s.span_context.trace_id().to_bytes() == caller.trace_id)
        .expect("the first start continues the caller's trace");
    assert_eq!(first.parent_span_id.to_bytes(), caller.span_id);
    assert_eq!(
        first.span_context.span_id().to_bytes(),
        parent.span_id,
        "the run's parent is the request that started it"
    );
    assert!(
        first
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "http.response.status_code" && kv.value.as_str() == "201")
    );

    let run_span = spans_named(&spans, "invoke_agent Order");
    assert_eq!(run_span.len(), 1, "the run's span, exported when it ended");
    assert_eq!(
        run_span[0].span_context.trace_id().to_bytes(),
        caller.trace_id
    );
    assert_eq!(run_span[0].parent_span_id.to_bytes(), parent.span_id);
    assert_eq!(run_span[0].span_context.span_id().to_bytes(), trace.span_id);
    for step in spans.iter().filter(|s| s.name.starts_with("step ")) {
        assert_eq!(step.span_context.trace_id().to_bytes(), caller.trace_id);
        assert_eq!(step.parent_span_id.to_bytes(), trace.span_id);
    }

    let signals = spans_named(&spans, "POST /v1/runs/{id}/signals");
    assert_eq!(signals.len(), 1);
    let signal = signals[0];
    let signaller = TraceParent::parse(SIGNALLER).unwrap();
    assert_eq!(
        signal.span_context.trace_id().to_bytes(),
        signaller.trace_id
    );
    assert!(
        signal.links.iter().any(|l| {
            l.span_context.trace_id().to_bytes() == trace.trace_id
                && l.span_context.span_id().to_bytes() == trace.span_id
        }),
        "the signal's request links to the run it wakes: {:?}",
        signal.links
    );
    assert!(
        spans.iter().all(|s| !s.name.contains("traced-7")),
        "no span is named by a run id"
    );
    telemetry.shutdown();
}
