//! The inspector's timing page (`/ui/runs/{id}/timing`): a run's waterfall from its durable
//! history, with its tool calls, decisions, a retried call and a wait for a signal, each
//! with its duration; the decisions' prompt and answer with sealed values shown sealed; the
//! link to the run's trace when a trace viewer is configured; long runs paged.

extern crate durable_agents_http as agent_http;

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_conformance::fixture::{self, Behaviour, World};
use agent_core::runner::Runner;
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, NewRun, RunStatus, StepCommit, TransitionKind, now_ms,
};
use agent_core::trace::RunTrace;
use agent_http::ApiConfig;
use common::{Db, Server, client};
use serde_json::json;

async fn page(url: &str) -> (u16, String) {
    let resp = client().get(url).send().await.expect("get");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// A duration as the page writes it, for the short ones of these runs.
fn shown(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{}.{} s", ms / 1000, ms % 1000 / 100)
    }
}

/// The waterfall's row whose label cell holds `label` (the first one).
fn row<'a>(body: &'a str, label: &str) -> &'a str {
    body.split("<tr class=\"wf-")
        .skip(1)
        .find(|r| r.split("</th>").next().is_some_and(|h| h.contains(label)))
        .unwrap_or_else(|| panic!("no row `{label}` in {body}"))
        .split("</tr>")
        .next()
        .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A fixture run that pays (its charge timing out once, then retried), waits for the
/// customer's `confirm`, and, when `confirm` is set, is confirmed and completes.
async fn paid_run(db: &Db, id: &str, confirm: bool) {
    let world = Arc::new(World::default());
    world.configure(|w| w.charge_timeouts = 1);
    let runner = Runner::builder(Arc::clone(&db.store), Behaviour, fixture::tools(&world))
        .router(Arc::new(fixture::router("Pay")))
        .build()
        .expect("runner");
    runner
        .start(id, fixture::initial(&["apple", "kiwi"]))
        .await
        .expect("start");
    runner.run(id).await.expect("run");
    if confirm {
        // A wait long enough to read as one on the page.
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner
            .signal(id, "confirm", json!({"ok": true}))
            .await
            .expect("signal");
        runner.run(id).await.expect("run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_waterfall_shows_its_steps_calls_retries_decisions_and_waits() {
    let db = Db::new().await;
    paid_run(&db, "paid", true).await;
    paid_run(&db, "waiting", false).await;
    let record = db.store.load_run("paid").await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    // The run's page links to its timing.
    let (_, run_page) = page(&server.url("/ui/runs/paid")).await;
    assert!(
        run_page.contains(r#"id="run-timing" href="../../ui/runs/paid/timing""#),
        "{run_page}"
    );

    let (status, body) = page(&server.url("/ui/runs/paid/timing")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#"<table id="waterfall" class="waterfall">"#),
        "{body}"
    );
    // One row per step, with its transition.
    assert!(body.contains("v1 Start → Decide"), "{body}");
    assert!(body.contains("v2 Decide → Pay"), "{body}");
    // Every call of the journal is a row, with its duration as recorded.
    let journal = db.store.journal("paid", None).await.unwrap();
    for e in &journal {
        let label = match e.tool_kind {
            Some(k) => format!("{} ({k})", e.name),
            None => e.name.clone(),
        };
        let href = format!("/entries/{}/{}\"", e.version, e.seq);
        let anchor = format!("#d-{}-{}\"", e.version, e.seq);
        let r = body
            .split("<tr class=\"wf-")
            .skip(1)
            .find(|r| r.contains(&href) || r.contains(&anchor))
            .unwrap_or_else(|| panic!("no row for {}.{}: {body}", e.version, e.seq));
        assert!(r.contains(&label), "{label}: {r}");
        assert!(
            r.contains(&format!("<td class=\"num\">{}</td>", shown(e.duration_ms))),
            "{label} lasted {} ms: {r}",
            e.duration_ms
        );
        assert!(r.contains(&format!("c-{}", e.status.as_str())), "{r}");
    }
    // The charge timed out once: two attempts, one retry, in words.
    let charge = journal.iter().find(|e| e.name == "Charge").unwrap();
    assert_eq!(charge.attempts, 2);
    let r = row(&body, "Charge (write)");
    assert!(r.starts_with("tool"), "{r}");
    assert!(r.contains("2 (1 retry)"), "{r}");
    assert!(charge.duration_ms >= 200, "the timeout is 200 ms");
    // The decisions: rows of their own, and their prompt and answer below.
    assert!(journal.iter().any(|e| e.kind == EntryKind::Decision));
    let r = row(&body, "router");
    assert!(r.starts_with("decision"), "{r}");
    assert!(body.contains("Prompt sent (as stored)") && body.contains("prompt_hash"));
    assert!(body.contains("Answer received"), "{body}");
    // The wait for `confirm`: a bar of its own, said in words, of the time it lasted.
    let wait = row(&body, "waiting for signal `confirm`");
    assert!(wait.starts_with("wait"), "{wait}");
    assert!(wait.contains(r#"class="status s-waiting""#), "{wait}");
    let history = db.store.history("paid").await.unwrap();
    let waited = history
        .windows(2)
        .find(|p| p[0].status == RunStatus::Waiting)
        .map(|p| p[1].created_at - p[0].created_at)
        .expect("a wait in the history");
    assert!(waited >= 300, "{waited}");
    let waited = u64::try_from(waited).unwrap();
    assert!(
        wait.contains(&format!("<td class=\"num\">{}</td>", shown(waited))),
        "waited {waited} ms: {wait}"
    );
    // Every bar is placed by classes (no inline style passes the CSP), within the axis.
    assert!(!body.contains("style="), "{body}");
    assert!(body.contains(r#"class="wf-bar at-0 w-"#), "{body}");
    let (_, css) = page(&server.url("/ui/assets/inspector.css")).await;
    assert!(css.contains(".at-37 { left: 37%; }") && css.contains(".w-100 { width: 100%; }"));

    // A run waiting now: the wait is under way.
    let (_, body) = page(&server.url("/ui/runs/waiting/timing")).await;
    let wait = row(&body, "waiting for signal `confirm`");
    assert!(wait.contains(" so far</td>"), "{wait}");
    assert!(body.contains("(waiting)"), "{body}");

    // No trace viewer: the trace id alone, no link.
    let trace = hex(&RunTrace::of_record(&record).trace_id);
    assert_eq!(trace.len(), 32);
    let (_, body) = page(&server.url("/ui/runs/paid/timing")).await;
    assert!(!body.contains("id=\"trace-link\""), "{body}");
    assert!(body.contains(&format!(r#"<code id="trace-id">{trace}</code>"#)));

    // Unknown runs are a page that says so.
    let (status, missing) = page(&server.url("/ui/runs/nope/timing")).await;
    assert_eq!(status, 404);
    assert!(missing.contains("run `nope` not found"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_links_to_the_runs_trace_when_a_viewer_is_configured() {
    let db = Db::new().await;
    paid_run(&db, "traced", false).await;
    let record = db.store.load_run("traced").await.unwrap().unwrap();
    let config = ApiConfig::default()
        .with_trace_url("http://phoenix:6006/projects/default/traces/{trace_id}")
        .expect("a viewer's URL");
    let server = Server::serve(&db.store, config).await;
    let (status, body) = page(&server.url("/ui/runs/traced/timing")).await;
    assert_eq!(status, 200, "{body}");
    let trace = hex(&RunTrace::of_record(&record).trace_id);
    assert!(
        body.contains(&format!(
            r#"<a id="trace-link" href="http://phoenix:6006/projects/default/traces/{trace}" rel="noreferrer">"#
        )),
        "{body}"
    );
    // A template that is not a web URL with the trace id's place is refused.
    for bad in [
        "http://phoenix:6006/projects/default/traces/",
        "javascript:alert(1)//{trace_id}",
        "phoenix:6006/{trace_id}",
    ] {
        assert!(ApiConfig::default().with_trace_url(bad).is_err(), "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decisions_sealed_values_show_sealed() {
    let db = Db::new().await;
    let lease = db
        .claimed(
            NewRun::new("sealed", "Order", "f", "Decide", json!({})),
            "test",
        )
        .await;
    let ciphertext = "c2VjcmV0LWNpcGhlcnRleHQtZG8tbm90LXNob3c";
    let envelope = json!({"$sealed": format!("v1:k7:{ciphertext}")});
    let now = now_ms();
    let decision = JournalEntry {
        run_id: "sealed".into(),
        version: 0,
        seq: 0,
        kind: EntryKind::Decision,
        state: "Decide".into(),
        name: "router".into(),
        tool_kind: None,
        input_hash: "0".repeat(64),
        input: json!({"prompt_hash": "abc", "options": ["Pay"], "card": envelope}),
        idempotency_key: None,
        status: CallStatus::Succeeded,
        output: Some(json!({
            "options": ["Pay"],
            "decision": null,
            "rejection": null,
            "model": "test-model",
            "prompt_hash": "abc",
            "input_tokens": 12,
            "output_tokens": 3,
            "latency_ms": 42,
            "raw_output": envelope.to_string(),
        })),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 42,
        started_at: now,
        finished_at: Some(now + 42),
    };
    db.store.record_entry(&lease, &decision).await.unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, body) = page(&server.url("/ui/runs/sealed/timing")).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(ciphertext), "a sealed value opened: {body}");
    let (_, decisions) = body.split_once("timing-decisions-h").unwrap();
    // Shown sealed in the prompt and in the answer, as the entry's page shows them.
    assert_eq!(decisions.matches("[sealed:k7]").count(), 2, "{decisions}");
    assert!(decisions.contains("test-model") && decisions.contains("12 in / 3 out"));
    // The step under way, with its call.
    let r = row(&body, "router");
    assert!(r.contains("42 ms"), "{r}");
    assert!(body.contains("v1 in Decide (under way)"), "{body}");
    // The entry's page, linked, shows the prompt's sealed value sealed too.
    assert!(decisions.contains(r#"href="../../../ui/runs/sealed/entries/0/0""#));
    let (_, entry) = page(&server.url("/ui/runs/sealed/entries/0/0")).await;
    assert!(entry.contains("[sealed:k7]"), "{entry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_runs_waterfall_is_paged() {
    let db = Db::new().await;
    let lease = db
        .claimed(
            NewRun::new("long", "Loop", "f", "Spin", json!({"n": 0})),
            "test",
        )
        .await;
    let steps = 320_u64;
    for v in 0..steps {
        db.store
            .commit_step(
                &lease,
                &StepCommit {
                    expected_version: v,
                    from_state: "Spin".into(),
                    to_state: "Spin".into(),
                    state: json!({"Spin": {"n": v + 1}}),
                    kind: TransitionKind::Step,
                    status: if v + 1 == steps {
                        RunStatus::Completed
                    } else {
                        RunStatus::Running
                    },
                    waiting_for: None,
                    wake_at: None,
                    error: None,
                    consumed_signal: None,
                    spend: None,
                },
                &[],
            )
            .await
            .unwrap();
    }
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, latest) = page(&server.url("/ui/runs/long/timing")).await;
    assert_eq!(status, 200);
    assert!(latest.contains("steps v121 to v320"), "{latest}");
    assert_eq!(latest.matches("<tr class=\"wf-step").count(), 200);
    assert!(
        latest.contains(r#"id="timing-earlier" href="?upto=120""#),
        "{latest}"
    );
    assert!(!latest.contains("timing-later"));
    assert!(latest.len() < 400 * 1024, "{} bytes", latest.len());

    let (_, earliest) = page(&server.url("/ui/runs/long/timing?upto=120")).await;
    assert!(earliest.contains("steps v1 to v120"), "{earliest}");
    assert_eq!(earliest.matches("<tr class=\"wf-step").count(), 120);
    assert!(earliest.contains(r#"id="timing-later" href="?upto=320""#));
    assert!(!earliest.contains("timing-earlier"));
    // Past the head is the head.
    let (_, past) = page(&server.url("/ui/runs/long/timing?upto=9999")).await;
    assert!(past.contains("steps v121 to v320"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_on_the_timing_page_are_escaped() {
    let db = Db::new().await;
    let evil = "<script>alert(1)</script>";
    db.store
        .create_run(NewRun::new("evil", evil, "f", evil, json!({})))
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, body) = page(&server.url("/ui/runs/evil/timing")).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("<script>alert"), "{body}");
    assert!(
        body.contains(
            "v1 in &#60;script&#62;alert(1)&#60;/script&#62; (queued: no worker holds it)"
        ) || body
            .contains("v1 in &lt;script&gt;alert(1)&lt;/script&gt; (queued: no worker holds it)"),
        "{body}"
    );
    assert!(body.contains("no step committed yet"), "{body}");
}
