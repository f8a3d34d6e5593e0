//! Issue 44, traces and logs: the research tree (a parent run, three child runs, a model
//! routing decision, tools) run with telemetry installed, its spans kept by the SDK's
//! in-memory exporter and its logs written as JSON lines into a buffer. Checked:
//! - every span of the tree is in one trace, the parent run's, and every run has one
//!   `invoke_agent` span with the derived id; a child run's span is a child of its parent
//!   run's; steps and claims are children of their run's span; tools of their step;
//! - the GenAI attribute names are the conventions' own (checked against
//!   `opentelemetry-semantic-conventions`, whose version the scope announces);
//! - no text of a state or an input (a canary in the question) reaches a span or a log line;
//! - every JSON log line in a run carries its run id, and the trace and span ids of a span
//!   that was exported.
//!
//! One test: telemetry is installed once per process.

// The GenAI names moved from the semantic conventions to a repository of their own
// (semantic-conventions-genai) after 1.42.0, which deprecates them here; the names are
// the ones the spans must carry.
#![allow(deprecated)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_agents::Agent as _;
use durable_agents::observe::{BoxMakeWriter, LogFormat, RunTrace, Telemetry, Traces};
use durable_agents::runner::{Runner, RunnerConfig, Worker, WorkerConfig};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RunStatus, Store};
use examples::research::{self, Handlers, Report, Research};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use opentelemetry_semantic_conventions::attribute as semconv;
use serde_json::Value;

/// In the question: must reach no span and no log line.
const CANARY: &str = "canary-question-5e1f0a";

/// Log lines written into memory.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_of_runs_is_one_trace_and_its_logs_join_it() {
    let exporter = InMemorySpanExporter::default();
    let lines = Lines::default();
    let writer = lines.clone();
    let telemetry = Telemetry::new()
        .traces(Traces::exporter(exporter.clone()).batch_delay(Duration::from_millis(50)))
        .log_format(LogFormat::Json)
        .log_filter("debug")
        .log_writer(BoxMakeWriter::new(move || writer.clone()))
        .install()
        .expect("telemetry installs");

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    let config = |worker: &str| RunnerConfig {
        worker_id: worker.to_owned(),
        ..RunnerConfig::default()
    };
    let parents = Runner::<Report, Handlers>::builder(
        Arc::clone(&store),
        Handlers,
        research::report_tools(dir.path().join("reports")),
    )
    .router(Arc::new(research::scripted_reviewer()))
    .config(config("parents"))
    .build()
    .unwrap();
    let children = Runner::<Research, Handlers>::builder(
        Arc::clone(&store),
        Handlers,
        research::research_tools(),
    )
    .config(config("children"))
    .build()
    .unwrap();
    let id = "report-traced";
    parents
        .start(
            id,
            Report::Planning {
                question: format!("What does {CANARY} mean?"),
            },
        )
        .await
        .unwrap();
    let workers = WorkerConfig {
        poll_interval: Duration::from_millis(20),
        ..WorkerConfig::default()
    };
    let watch = {
        let store = Arc::clone(&store);
        async move {
            loop {
                let record = store.load_run(id).await.unwrap().unwrap();
                if record.status.is_final() {
                    return record;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|done| *done).await;
    };
    let watch = async {
        let record = watch.await;
        let _ = done_tx.send(true);
        record
    };
    let parent_worker = Worker::new(parents, workers.clone());
    let child_worker = Worker::new(children, workers);
    let (_, _, record) = tokio::join!(
        parent_worker.run_until(stop(done_rx.clone())),
        child_worker.run_until(stop(done_rx)),
        watch,
    );
    assert_eq!(record.status, RunStatus::Completed);
    telemetry.flush();
    let spans = exporter.get_finished_spans().unwrap();
    let stats = telemetry.trace_stats().unwrap();
    assert_eq!(
        stats.exported(),
        spans.len() as u64,
        "the counters count what was exported"
    );
    assert_eq!(stats.failed(), 0);

    // The tree: the parent and its children, each with its derived trace.
    let kids = store
        .list_runs(&durable_agents::store::RunFilter {
            spawned_by: Some(id.to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(kids.len(), 3, "three child runs");
    let parent = RunTrace::of_record(&record);
    assert_eq!(
        parent.parent, None,
        "the parent was started outside any span"
    );
    let trace_id = hex(&parent.trace_id);
    for s in &spans {
        assert_eq!(
            hex(&s.span_context.trace_id().to_bytes()),
            trace_id,
            "span `{}` is outside the tree's trace",
            s.name
        );
    }
    let mut runs = vec![(record.clone(), Report::NAME)];
    runs.extend(kids.iter().map(|k| (k.clone(), Research::NAME)));
    let by_id: BTreeMap<String, &SpanData> = spans
        .iter()
        .map(|s| (hex(&s.span_context.span_id().to_bytes()), s))
        .collect();
    for (run, agent) in &runs {
        let trace = RunTrace::of_record(run);
        let run_span = hex(&trace.span_id);
        let roots: Vec<&SpanData> = spans
            .iter()
            .filter(|s| {
                s.name == format!("invoke_agent {agent}")
                    && attr(s, "run_id").as_deref() == Some(run.id.as_str())
            })
            .collect();
        assert_eq!(roots.len(), 1, "run {}: one invoke_agent span", run.id);
        let root = roots[0];
        assert_eq!(hex(&root.span_context.span_id().to_bytes()), run_span);
        assert_eq!(
            attr(root, semconv::GEN_AI_OPERATION_NAME).as_deref(),
            Some("invoke_agent")
        );
        assert_eq!(
            attr(root, semconv::GEN_AI_AGENT_NAME).as_deref(),
            Some(*agent)
        );
        assert_eq!(
            attr(root, semconv::GEN_AI_CONVERSATION_ID).as_deref(),
            Some(run.id.as_str())
        );
        assert!(
            root.start_time < root.end_time,
            "run {}: the run's span has a duration",
            run.id
        );
        let expected_parent = match run.spawned_by {
            Some(_) => hex(&parent.span_id),
            None => "0000000000000000".to_owned(),
        };
        assert_eq!(
            hex(&root.parent_span_id.to_bytes()),
            expected_parent,
            "run {}: its span's parent",
            run.id
        );
        for s in spans
            .iter()
            .filter(|s| attr(s, "run_id").as_deref() == Some(run.id.as_str()))
        {
            if s.name.starts_with("step ") || s.name.starts_with("run ") {
                assert_eq!(
                    hex(&s.parent_span_id.to_bytes()),
                    run_span,
                    "run {}: `{}` is a child of the run's span",
                    run.id,
                    s.name
                );
            }
        }
    }
    let tools: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    assert!(
        tools.len() >= 10,
        "the outline, 9 searches and the publish: {}",
        tools.len()
    );
    for t in &tools {
        assert_eq!(
            attr(t, semconv::GEN_AI_OPERATION_NAME).as_deref(),
            Some("execute_tool")
        );
        let name = attr(t, semconv::GEN_AI_TOOL_NAME).expect("the tool's name");
        assert_eq!(t.name, format!("execute_tool {name}"));
        assert!(attr(t, semconv::GEN_AI_TOOL_CALL_ID).is_some());
        assert_eq!(
            attr(t, semconv::GEN_AI_TOOL_TYPE).as_deref(),
            Some("function")
        );
        let parent_step = by_id
            .get(&hex(&t.parent_span_id.to_bytes()))
            .unwrap_or_else(|| panic!("tool span `{}` has no exported parent", t.name));
        assert!(
            parent_step.name.starts_with("step "),
            "a tool's parent is its step: {}",
            parent_step.name
        );
    }
    assert!(
        spans.iter().any(|s| s.name == "route Reviewing"),
        "the routing decision has its span"
    );
    assert_eq!(
        spans[0].instrumentation_scope.schema_url(),
        Some(opentelemetry_semantic_conventions::SCHEMA_URL),
        "the scope announces the conventions' version"
    );

    // Nothing of a state or an input in a span.
    for s in &spans {
        for kv in &s.attributes {
            assert!(
                !kv.value.as_str().contains(CANARY),
                "span `{}` attribute `{}` carries the question",
                s.name,
                kv.key
            );
        }
    }

    // The logs: JSON lines, joined to the trace, without the question.
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    assert!(!text.contains(CANARY), "a log line carries the question");
    let span_ids: BTreeSet<String> = spans
        .iter()
        .map(|s| hex(&s.span_context.span_id().to_bytes()))
        .collect();
    let mut in_runs = 0;
    for line in text.lines() {
        let line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(line.get(key).is_some(), "a line without `{key}`: {line}");
        }
        if line.get("span").is_some() && line.get("run_id").is_some() {
            in_runs += 1;
            assert_eq!(line["trace_id"].as_str(), Some(trace_id.as_str()), "{line}");
            let span_id = line["span_id"].as_str().unwrap_or_default();
            assert!(
                span_ids.contains(span_id),
                "a log line's span was not exported: {line}"
            );
        }
    }
    assert!(
        in_runs > 0,
        "no log line inside a run at debug level:\n{text}"
    );
    telemetry.shutdown();
}
