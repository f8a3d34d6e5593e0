//! `agentctl` run as a user would: the real binary against a SQLite file written by the real
//! runner driving the conformance fixture agent.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;

use agent_conformance::fixture;
use agent_core::graph::GraphDescription;
use agent_core::store::{RunStatus, TransitionKind};
use common::{CANCELLED, DECLINED, DONE, Db, PAID_WAITING, SAGA_STUCK, STUCK};
use serde_json::{Value, json};

fn code(out: &std::process::Output) -> i32 {
    out.status.code().expect("exit code")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn runs_lists_and_filters(new_db: fn() -> Db) {
    let db = new_db();
    let all = db.ok(&["runs"]);
    for id in [PAID_WAITING, DONE, CANCELLED, DECLINED, STUCK, SAGA_STUCK] {
        assert!(all.contains(id), "{id} missing from:\n{all}");
    }
    assert!(all.lines().next().unwrap().starts_with("RUN"), "{all}");
    assert!(all.contains("waiting for `confirm`"), "{all}");

    let completed = db.ok(&["runs", "--status", "completed"]);
    assert!(
        completed.contains(DONE) && !completed.contains(CANCELLED),
        "{completed}"
    );

    let json = db.json(&[
        "runs",
        "--agent",
        "Order",
        "--status",
        "compensated,completed",
    ]);
    let ids: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.contains(&DECLINED) && ids.contains(&CANCELLED) && ids.contains(&DONE));

    let limited = db.json(&["runs", "--limit", "2"]);
    assert_eq!(limited.as_array().unwrap().len(), 2);

    let none = db.ok(&["runs", "--agent", "Nobody"]);
    assert!(none.contains("no runs of agent `Nobody`"), "{none}");

    let dead = db.json(&["runs", "--status", "dead-lettered"]);
    assert_eq!(dead.as_array().unwrap().len(), 2);

    let bad = db.agentctl(&["runs", "--status", "sleeping"]);
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("unknown status `sleeping`"));
}

fn show_prints_the_timeline(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["show", PAID_WAITING]);
    for needle in [
        "Run order-waiting",
        "waiting for  signal `confirm`",
        "Lookup",
        "Reserve",
        "Charge",
        "hybrid",
        // Write and hybrid calls carry their idempotency keys: (run, version, call index).
        "key order-waiting:0:1",
        "key order-waiting:2:0",
        // The router looked a price up, then chose to pay, among the legal options.
        "chose tool Lookup",
        "chose → Pay of [Pay, Cancelled, Lookup]",
        "Start → Decide",
        "agentctl signal order-waiting confirm",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    // The timed-out charge was retried under the same key: one entry, two attempts.
    let charge = out.lines().find(|l| l.contains("Charge")).unwrap();
    assert!(charge.contains("succeeded"), "{charge}");

    let cancelled = db.ok(&["show", CANCELLED]);
    assert!(cancelled.contains("compensate"), "{cancelled}");
    assert!(cancelled.contains("Release"), "{cancelled}");

    let declined = db.ok(&["show", DECLINED]);
    assert!(
        declined.contains("error tool.permanent: card declined"),
        "{declined}"
    );
    assert!(declined.contains("Pay → Failed"), "{declined}");
}

fn show_snapshot(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["show", CANCELLED]);
    insta::with_settings!({
        // One snapshot for both backends: their output must be the same.
        prepend_module_to_snapshot => false,
        // Same-width placeholders keep the columns aligned.
        filters => vec![
            (r"\d{4}-\d{2}-\d{2} ", "YYYY-MM-DD "),
            (r"\d{2}:\d{2}:\d{2}\.\d{3}Z", "hh:mm:ss.mmmZ"),
            (r"graph [0-9a-f]{12}", "graph ffffffffffff"),
            (r"latency \d+ ms", "latency [dur]"),
            (r"  \d+ ms +", "  [dur]     "),
        ],
    }, {
        insta::assert_snapshot!("show_cancelled", out);
    });
}

fn show_json_and_missing_run(new_db: fn() -> Db) {
    let db = new_db();
    let json = db.json(&["show", DONE]);
    assert_eq!(json["run"]["status"], "completed");
    let versions: Vec<u64> = json["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, (0..versions.len() as u64).collect::<Vec<_>>());
    let states = json["states"].as_array().unwrap();
    assert_eq!(states.len(), versions.len());
    assert_eq!(states.last().unwrap()["state_name"], "Done");
    assert!(
        json["journal"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "decision" && e["output"]["decision"]["to"] == "Pay")
    );

    let missing = db.agentctl(&["show", "no-such-run"]);
    assert_eq!(code(&missing), 1);
    let err = stderr(&missing);
    assert!(err.contains("run `no-such-run` not found"), "{err}");
    assert!(err.contains("agentctl runs"), "{err}");
}

fn state_time_travel(new_db: fn() -> Db) {
    let db = new_db();
    let v0: Value = serde_json::from_str(&db.ok(&["state", DONE, "--at", "0"])).unwrap();
    assert_eq!(
        v0,
        serde_json::json!({ "Start": { "items": ["apple", "kiwi"] } })
    );
    let now: Value = serde_json::from_str(&db.ok(&["state", DONE])).unwrap();
    assert!(now["Done"]["payment_id"].is_string(), "{now}");
    let json = db.json(&["state", DONE, "--at", "1"]);
    assert_eq!(json["state_name"], "Decide");
    assert_eq!(json["version"], 1);
    let future = db.agentctl(&["state", DONE, "--at", "99"]);
    assert_eq!(code(&future), 1);
    assert!(
        stderr(&future).contains("it is at version 4"),
        "{}",
        stderr(&future)
    );
}

/// `export` prints the run whole, as the format says; `--out` writes a file and never
/// overwrites one; a missing run is exit code 1.
fn export_writes_the_whole_run(new_db: fn() -> Db) {
    let db = new_db();
    let printed: Value = serde_json::from_str(&db.ok(&["export", DONE])).unwrap();
    assert_eq!(printed["format"], "durable-agents/run-export/1");
    assert_eq!(printed["run"]["id"], DONE);
    assert_eq!(printed["run"]["version"], 4);
    let history = printed["history"].as_array().expect("history");
    assert_eq!(
        history.last().map(|t| t["version"].clone()),
        Some(serde_json::json!(4)),
        "{printed}"
    );
    assert!(
        printed["journal"]
            .as_array()
            .is_some_and(|j| j.iter().any(|e| e["kind"] == "tool")),
        "the journal's tool calls: {printed}"
    );
    assert_eq!(printed["graph"]["agent"], "Order", "{printed}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("done.json");
    let path = file.to_str().unwrap();
    assert!(
        db.ok(&["export", DONE, "--out", path])
            .contains("exported to")
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["run"], printed["run"]);
    let again = db.agentctl(&["export", DONE, "--out", path]);
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("cannot create"),
        "{}",
        stderr(&again)
    );
    let missing = db.agentctl(&["export", "nobody"]);
    assert_eq!(code(&missing), 1, "{}", stderr(&missing));
}

fn fork_starts_a_run_from_a_version(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["fork", DONE, "what-if", "--at", "1"]);
    assert!(out.contains("into run what-if"), "{out}");
    let forked = db.json(&["state", "what-if"]);
    let original = db.json(&["state", DONE, "--at", "1"]);
    assert_eq!(forked["state"], original["state"]);
    assert_eq!(forked["state_name"], "Decide");
    assert_eq!(forked["version"], 0);
    let record: Value = db.json(&["show", "what-if"]);
    assert_eq!(record["run"]["status"], "running", "{record}");
    assert_eq!(
        record["run"]["parent"],
        serde_json::json!([DONE, 1]),
        "{record}"
    );
    // The same fork again is the same run; a different one under that id is refused.
    db.ok(&["fork", DONE, "what-if", "--at", "1"]);
    let clash = db.agentctl(&["fork", DONE, "what-if", "--at", "0"]);
    assert_eq!(code(&clash), 1);
    assert!(
        stderr(&clash).contains("already exists"),
        "{}",
        stderr(&clash)
    );
    let future = db.agentctl(&["fork", DONE, "later", "--at", "99"]);
    assert_eq!(code(&future), 1);
    assert!(
        stderr(&future).contains("it is at version 4"),
        "{}",
        stderr(&future)
    );
    let json = db.json(&["fork", DONE, "from-now"]);
    // Forked from its final state: a worker's first step marks it completed.
    assert_eq!(json["forked_from"]["version"], 4, "{json}");
    assert_eq!(json["state"], "Done", "{json}");
    assert_eq!(json["status"], "running", "{json}");
}

fn graph_exports(new_db: fn() -> Db) {
    let db = new_db();
    let dot = db.ok(&["graph", "Order", "--format", "dot"]);
    assert!(dot.starts_with("digraph"), "{dot}");
    let overlaid = db.ok(&["graph", "Order", "--format", "dot", "--run", DECLINED]);
    assert!(
        overlaid.contains("color=red"),
        "the failed Pay state: {overlaid}"
    );
    assert!(
        overlaid.contains("xlabel=\"x1\""),
        "edges taken: {overlaid}"
    );
    assert_ne!(dot, overlaid);
    render_with_graphviz(&overlaid);

    let mermaid = db.ok(&["graph", "Order", "--format", "mermaid", "--run", DONE]);
    assert!(mermaid.starts_with("stateDiagram-v2"), "{mermaid}");
    assert!(
        mermaid.contains("class") && mermaid.contains("visited"),
        "{mermaid}"
    );

    let yaml = db.ok(&["graph", "Order", "--format", "yaml"]);
    let from_yaml = GraphDescription::from_yaml(&yaml).expect("yaml round-trips");
    let json = db.ok(&["graph", "Order", "--format", "json"]);
    let from_json = GraphDescription::from_json(&json).expect("json round-trips");
    assert_eq!(from_yaml, from_json);
    assert_eq!(from_yaml.agent, "Order");
    assert_eq!(
        from_yaml.fingerprint(),
        <agent_conformance::fixture::Order as agent_core::Agent>::graph().fingerprint()
    );

    // The agent is optional with --run.
    assert_eq!(db.ok(&["graph", "--run", DECLINED]), overlaid);
    let data = db.json(&["graph", "Order", "--run", DECLINED]);
    assert_eq!(data["overlay"]["current"], "Failed");
    assert!(
        data["overlay"]["failed"]
            .as_array()
            .unwrap()
            .contains(&Value::from("Pay"))
    );

    let unknown = db.agentctl(&["graph", "Nope"]);
    assert_eq!(code(&unknown), 1);
    assert!(
        stderr(&unknown).contains("registered agents: Order"),
        "{}",
        stderr(&unknown)
    );
    let wrong = db.agentctl(&["graph", "Other", "--run", DONE]);
    assert_eq!(code(&wrong), 2, "{}", stderr(&wrong));
    let format = db.agentctl(&["graph", "Order", "--format", "png"]);
    assert_eq!(code(&format), 2);
}

fn render_with_graphviz(dot: &str) {
    let child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        println!("skipped: Graphviz `dot` is not installed, the DOT output was not rendered");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dot.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "dot -Tsvg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

/// Coverage counts exactly the transitions the runs' histories hold, over every declared
/// edge, and names the ones no run took.
fn coverage_names_what_no_run_took(new_db: fn() -> Db) {
    let db = new_db();
    let coverage = db.json(&["coverage", "Order"]);
    let graph = GraphDescription::from_json(&db.ok(&["graph", "Order", "--format", "json"]))
        .expect("the graph");
    let edges = coverage["edges"].as_array().unwrap();
    assert_eq!(
        edges.len(),
        graph.edges().count(),
        "every declared edge: {coverage}"
    );
    let runs = db.json(&["runs", "--agent", "Order"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(coverage["runs"].as_u64().unwrap(), runs.len() as u64);
    // What the histories say, counted here from `show --json`.
    let mut expected = std::collections::BTreeMap::<(String, String), u64>::new();
    for run in runs {
        let shown = db.json(&["show", run["id"].as_str().unwrap()]);
        for t in shown["history"].as_array().unwrap() {
            if matches!(t["kind"].as_str(), Some("step" | "error")) {
                let key = (
                    t["from_state"].as_str().unwrap().to_owned(),
                    t["to_state"].as_str().unwrap().to_owned(),
                );
                *expected.entry(key).or_default() += 1;
            }
        }
    }
    assert!(!expected.is_empty(), "the fixture's runs took transitions");
    for e in edges {
        let key = (
            e["from"].as_str().unwrap().to_owned(),
            e["to"].as_str().unwrap().to_owned(),
        );
        assert_eq!(
            e["taken"].as_u64().unwrap(),
            expected.get(&key).copied().unwrap_or(0),
            "{key:?} in {coverage}"
        );
    }
    let text = db.ok(&["coverage", "Order"]);
    let (taken, total) = (
        edges
            .iter()
            .filter(|e| e["taken"].as_u64() > Some(0))
            .count(),
        edges.len(),
    );
    assert!(
        text.contains(&format!("edges: {taken} of {total} taken")),
        "{text}"
    );
    if taken < total {
        assert!(text.contains("never taken"), "{text}");
    }
    assert!(text.contains("tools: "), "{text}");

    let missing = db.agentctl(&["coverage", "Nobody"]);
    assert_ne!(code(&missing), 0);
    assert!(
        stderr(&missing).contains("no graph registered for agent `Nobody`"),
        "{}",
        stderr(&missing)
    );
}

fn tools_kill_switch(new_db: fn() -> Db) {
    let db = new_db();
    let list = db.ok(&["tools", "list"]);
    for tool in ["Lookup", "Reserve", "Release", "Charge"] {
        assert!(list.contains(tool), "{list}");
    }
    let out = db.ok(&["tools", "disable", "Charge", "--reason", "gateway incident"]);
    assert!(out.contains("disabled tool `Charge`"), "{out}");
    let list = db.ok(&["tools", "list"]);
    let charge = list.lines().find(|l| l.starts_with("Charge")).unwrap();
    assert!(
        charge.contains("no") && charge.contains("gateway incident"),
        "{charge}"
    );
    let json = db.json(&["tools", "list"]);
    let charge = json
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "Charge")
        .unwrap();
    assert_eq!(charge["enabled"], false);
    assert_eq!(charge["kind"], "write");

    // The runner sees the switch: a new run's charge fails fast with `tool.disabled`.
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let runner = common::runner(&store, &world, "Pay");
        runner
            .start(
                "order-killed",
                agent_conformance::fixture::initial(&["fig"]),
            )
            .await
            .unwrap();
        runner.run("order-killed").await.unwrap();
        assert!(
            world
                .state()
                .applied
                .iter()
                .all(|(tool, _)| tool != "Charge")
        );
    });
    let killed = db.ok(&["show", "order-killed"]);
    assert!(killed.contains("error tool.disabled"), "{killed}");

    db.ok(&["tools", "enable", "Charge"]);
    let json = db.json(&["tools", "list"]);
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .all(|t| t["enabled"] == true)
    );
    let typo = db.agentctl(&["tools", "disable", "Chrage"]);
    assert!(stderr(&typo).contains("no registered agent declares a tool `Chrage`"));
}

fn signal_resumes_a_waiting_run(new_db: fn() -> Db) {
    let db = new_db();
    // A name no state waits for is refused, naming the ones that are waited for, and nothing
    // is queued.
    let typo = db.agentctl(&["signal", PAID_WAITING, "confrim", "{}"]);
    assert_eq!(code(&typo), 1, "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("waits for a signal named `confrim`")
            && stderr(&typo).contains("`confirm`"),
        "{}",
        stderr(&typo)
    );
    assert!(!db.ok(&["show", PAID_WAITING]).contains("confrim"));
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let runner = common::runner(&store, &world, "Pay");
        let refused = runner
            .signal(PAID_WAITING, "confrim", serde_json::json!({}))
            .await;
        assert!(
            matches!(
                refused,
                Err(agent_core::runner::RunnerError::SignalRefused(
                    agent_core::signals::SignalRefusal::NotWaitedFor { .. }
                ))
            ),
            "{refused:?}"
        );
        // A payload the waiting state could not read (`Confirmation { ok: bool, .. }`), and
        // a run that has ended: refused by the same check as the CLI's.
        let refused = runner
            .signal(PAID_WAITING, "confirm", serde_json::json!({"ok": "yes"}))
            .await;
        assert!(
            matches!(
                &refused,
                Err(agent_core::runner::RunnerError::SignalRefused(
                    agent_core::signals::SignalRefusal::BadPayload { state, .. }
                )) if state == "Confirm"
            ),
            "{refused:?}"
        );
        let refused = runner
            .signal(DONE, "confirm", serde_json::json!({"ok": true}))
            .await;
        assert!(
            matches!(
                &refused,
                Err(agent_core::runner::RunnerError::SignalRefused(
                    agent_core::signals::SignalRefusal::RunEnded { .. }
                ))
            ),
            "{refused:?}"
        );
    });
    let unreadable = db.agentctl(&["signal", PAID_WAITING, "confirm", r#"{"ok": "yes"}"#]);
    assert_eq!(code(&unreadable), 1);
    assert!(
        stderr(&unreadable).contains("`wait_payload` type of state `Confirm`")
            && stderr(&unreadable).contains("/ok")
            && stderr(&unreadable).contains("agentctl graph Order"),
        "{}",
        stderr(&unreadable)
    );
    assert!(
        db.agentctl(&["signal", PAID_WAITING, "confirm", "{}"])
            .status
            .code()
            == Some(1)
    );
    assert!(!db.ok(&["show", PAID_WAITING]).contains("Pending signals"));
    let out = db.ok(&["signal", PAID_WAITING, "confirm", r#"{"ok": true}"#]);
    assert!(out.contains("a worker will resume it"), "{out}");
    let show = db.ok(&["show", PAID_WAITING]);
    assert!(
        show.contains("Pending signals") && show.contains(r#"{"ok":true}"#),
        "{show}"
    );

    // A payload holding a secret: refused without a sealing key, stored sealed with one.
    let secret = r#"{"ok": true, "password": "pw-cli-signal-41ab"}"#;
    let refused = db.agentctl(&["signal", PAID_WAITING, "confirm", secret]);
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("no sealing key"),
        "{}",
        stderr(&refused)
    );
    let key = agent_core::secrets::new_key_spec("k1");
    let sealed = db
        .command(&["signal", PAID_WAITING, "confirm", secret])
        .env(agent_core::secrets::SEAL_KEYS_ENV, &key)
        .output()
        .unwrap();
    assert_eq!(code(&sealed), 0, "{}", stderr(&sealed));
    db.runtime.block_on(async {
        let store = db.store().await;
        let pending = store.pending_signals(PAID_WAITING).await.unwrap();
        let stored = serde_json::to_string(&pending).unwrap();
        assert!(!stored.contains("pw-cli-signal-41ab"), "{stored}");
        let keys = agent_core::secrets::SealKeys::parse(&key).unwrap();
        let mut payload = pending.last().unwrap().payload.clone();
        keys.open_all(&mut payload).unwrap();
        assert_eq!(payload["password"], "pw-cli-signal-41ab");
    });

    // A worker picks the signal up.
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let runner = common::runner(&store, &world, "Pay");
        let done = runner.run(PAID_WAITING).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed);
    });

    let bad = db.agentctl(&["signal", PAID_WAITING, "confirm", "{oops"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("not valid JSON"), "{}", stderr(&bad));
    let finished = db.agentctl(&["signal", DONE, "confirm", "{}"]);
    assert_eq!(code(&finished), 1);
    let missing = db.agentctl(&["signal", "nope", "confirm", "{}"]);
    assert_eq!(code(&missing), 1);
}

fn stats_per_tool(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["stats", "--since", "1h"]);
    for needle in [
        "Lookup",
        "Reserve",
        "Charge",
        "Release",
        "router",
        "tool.permanent ×1",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    let json = db.json(&["stats", "--since", "7d", "--agent", "Order"]);
    let tools = json["tools"].as_array().unwrap();
    let charge = tools.iter().find(|t| t["tool"] == "Charge").unwrap();
    assert_eq!(charge["errors_by_code"]["tool.permanent"], 1);
    assert!(charge["calls"].as_u64().unwrap() >= 4, "{charge}");
    assert!(charge["p99_ms"].as_u64().unwrap() >= charge["p50_ms"].as_u64().unwrap());
    // What the runs spent, from the store's sums, against the runs' own spends.
    let days = json["spend"].as_array().unwrap();
    assert!(
        !days.is_empty() && days.iter().all(|d| d["agent"] == "Order"),
        "{json}"
    );
    let sum = |key: &str| -> u64 { days.iter().map(|d| d["spend"][key].as_u64().unwrap()).sum() };
    let runs = db.json(&["runs", "--agent", "Order", "--limit", "1000"]);
    let listed = runs.as_array().unwrap();
    let spent: u64 = (listed.iter())
        .map(|r| r["spend"]["tool_calls"].as_u64().unwrap_or(0))
        .sum();
    assert!(sum("tool_calls") > 0, "{json}");
    assert_eq!(sum("tool_calls"), spent, "{json}\n{runs}");
    assert_eq!(
        days.iter()
            .map(|d| d["runs"].as_u64().unwrap())
            .sum::<u64>(),
        listed.len() as u64
    );
    for needle in ["AGENT", "TOOL CALLS", "Order"] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    let by_day = db.ok(&["stats", "--by-day"]);
    assert!(by_day.contains("DAY (UTC)"), "{by_day}");
    let other = db.json(&["stats", "--agent", "Nobody"]);
    assert!(other["tools"].as_array().unwrap().is_empty());
    assert!(other["spend"].as_array().unwrap().is_empty());
    let bad = db.agentctl(&["stats", "--since", "3 years"]);
    assert_eq!(code(&bad), 2);
}

fn retry_and_resume_requeue(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["resume", STUCK]);
    assert!(
        out.contains("re-queued run order-stuck as running"),
        "{out}"
    );
    assert!(out.contains("crash_loop"), "{out}");
    let json = db.json(&["show", STUCK]);
    assert_eq!(json["run"]["status"], "running");
    assert_eq!(json["run"]["error"], Value::Null);

    // A saga whose compensation kept failing goes back to compensating.
    let json = db.json(&["retry", SAGA_STUCK]);
    assert_eq!(json["status"], "compensating");
    assert_eq!(json["previous_status"], "dead_lettered");

    let again = db.ok(&["retry", STUCK]);
    assert!(again.contains("already running"), "{again}");
    let done = db.agentctl(&["retry", DONE]);
    assert_eq!(code(&done), 1);
    assert!(
        stderr(&done).contains("nothing to re-run"),
        "{}",
        stderr(&done)
    );
    let waiting = db.agentctl(&["resume", PAID_WAITING]);
    assert_eq!(code(&waiting), 1);
    assert!(stderr(&waiting).contains("agentctl signal order-waiting confirm"));
}

fn prune_keeps_runs_verifiable(new_db: fn() -> Db) {
    let db = new_db();
    let json = db.json(&["prune", "--keep-last", "2", "--only-final"]);
    assert!(json["versions_removed"].as_u64().unwrap() > 0, "{json}");
    let history = db.json(&["show", DONE])["history"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(history, 2);
    // Not final: untouched.
    let waiting = db.json(&["show", PAID_WAITING])["history"]
        .as_array()
        .unwrap()
        .len();
    assert!(waiting > 2);
    let report = db.json(&["verify", DONE]);
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["anchored_at"].as_u64().is_some());
    let zero = db.agentctl(&["prune", "--keep-last", "0"]);
    assert_eq!(code(&zero), 2);
}

fn verify_passes_on_clean_runs(new_db: fn() -> Db) {
    let db = new_db();
    for id in [PAID_WAITING, DONE, CANCELLED, DECLINED, STUCK, SAGA_STUCK] {
        let out = db.ok(&["verify", id]);
        assert!(out.contains("hash chain intact"), "{id}: {out}");
    }
    let all = db.ok(&["verify", "--all"]);
    assert!(all.contains("6 of 6 runs verified intact"), "{all}");
    let json = db.json(&["verify", DONE]);
    assert_eq!(json["ok"], true);
    assert_eq!(json["head_hash"].as_str().unwrap().len(), 64);
    assert_eq!(json["verified"], json["run_version"].as_u64().unwrap() + 1);
    assert_eq!(json["legacy"], 0, "this build writes the full hash: {json}");
}

/// `verify RUN` must fail with this problem.
fn assert_tampered(db: &Db, run: &str, version: u64, kind: &str) {
    let out = db.agentctl(&["verify", run]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 1, "{stdout}{}", stderr(&out));
    assert!(
        stdout.contains(&format!("version {version} {kind}")),
        "{stdout}"
    );
    let json = db.agentctl(&["--json", "verify", run]);
    assert_eq!(code(&json), 1);
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["problem"]["kind"], kind, "{report}");
    assert_eq!(report["problem"]["version"], version, "{report}");
}

fn verify_detects_a_modified_row(new_db: fn() -> Db) {
    let db = new_db();
    db.sql(&[&format!(
        "UPDATE transitions SET to_state = 'Cancelled' WHERE run_id = '{DONE}' AND version = 3"
    )]);
    assert_tampered(&db, DONE, 3, "modified");
    // Other runs are untouched; `verify --all` names the one broken run.
    db.ok(&["verify", CANCELLED]);
    let all = db.agentctl(&["--json", "verify", "--all"]);
    assert_eq!(code(&all), 1);
    let reports: Value = serde_json::from_slice(&all.stdout).unwrap();
    let broken: Vec<&str> = reports
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ok"] == false)
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(broken, [DONE]);

    let db = new_db();
    db.sql(&[&format!(
        "UPDATE transitions SET hash = 'deadbeef' WHERE run_id = '{DONE}' AND version = 1"
    )]);
    assert_tampered(&db, DONE, 1, "modified");

    let db = new_db();
    db.sql(&[&format!(
        "UPDATE transitions SET from_state = 'Start' WHERE run_id = '{DONE}' AND version = 2"
    )]);
    assert_tampered(&db, DONE, 2, "modified");

    // What the chain covers besides the states: kind, status after the step, writer's epoch.
    for edit in ["kind = 'error'", "status = 'failed'", "epoch = epoch + 1"] {
        let db = new_db();
        db.sql(&[&format!(
            "UPDATE transitions SET {edit} WHERE run_id = '{DONE}' AND version = 2"
        )]);
        assert_tampered(&db, DONE, 2, "modified");
    }
}

fn verify_detects_a_deleted_row(new_db: fn() -> Db) {
    let db = new_db();
    db.sql(&[&format!(
        "DELETE FROM transitions WHERE run_id = '{DONE}' AND version = 2"
    )]);
    assert_tampered(&db, DONE, 2, "deleted");

    let db = new_db();
    let last = db.json(&["show", DONE])["run"]["version"].as_u64().unwrap();
    db.sql(&[&format!(
        "DELETE FROM transitions WHERE run_id = '{DONE}' AND version = {last}"
    )]);
    assert_tampered(&db, DONE, last, "deleted");
}

fn verify_detects_reordered_rows(new_db: fn() -> Db) {
    let db = new_db();
    // Swap versions 1 and 2 (through a free number: the key is (run_id, version)).
    db.sql(&[
        &format!("UPDATE transitions SET version = 1000 WHERE run_id = '{DONE}' AND version = 1"),
        &format!("UPDATE transitions SET version = 1 WHERE run_id = '{DONE}' AND version = 2"),
        &format!("UPDATE transitions SET version = 2 WHERE run_id = '{DONE}' AND version = 1000"),
    ]);
    assert_tampered(&db, DONE, 1, "reordered");
}

/// A reader that closes the pipe (`agentctl runs | head`, `graph … | dot` without Graphviz)
/// ends `agentctl` quietly, with status 0, not with a panic about a broken pipe.
#[test]
fn a_closed_pipe_ends_quietly() {
    let db = Db::sqlite();
    for args in [
        &["runs"][..],
        &["show", DONE],
        &["graph", "Order", "--format", "dot"],
        &["--json", "runs"],
    ] {
        let mut child = db
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentctl");
        // The reader goes away before agentctl has written anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for agentctl");
        let err = stderr(&out);
        assert!(
            out.status.success() && !err.contains("panicked") && !err.contains("Broken pipe"),
            "agentctl {args:?} with a closed pipe: {} {err}",
            out.status
        );
    }
}

#[test]
fn missing_database_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .arg("runs")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("AGENT_DB")
        .output()
        .unwrap();
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("no database at agent-runs.sqlite3"), "{err}");
    assert!(err.contains("cargo run --example checkout"), "{err}");
    assert!(
        !dir.path().join("agent-runs.sqlite3").exists(),
        "agentctl must not create an empty database"
    );
    let usage = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(code(&usage), 2);
}

/// Writes the fixture's runs to `$AGENTCTL_DEMO_DB`, to try the commands by hand:
/// `AGENTCTL_DEMO_DB=/tmp/demo.sqlite3 cargo test -p durable-agents-cli --test cli -- --ignored demo`.
#[test]
#[ignore = "writes a demo database for trying agentctl by hand"]
fn demo_database() {
    let path = std::env::var("AGENTCTL_DEMO_DB").expect("set AGENTCTL_DEMO_DB to a file path");
    Db::populate_file(std::path::Path::new(&path));
    println!("wrote {path}: try `agentctl --db {path} runs`");
}

fn colours_only_when_asked_or_on_a_terminal(new_db: fn() -> Db) {
    let db = new_db();
    // Piped (as here), output is plain.
    let plain = db.ok(&["runs"]);
    assert!(!plain.contains('\u{1b}'), "{plain}");
    let coloured = db.ok(&["--color", "always", "runs"]);
    assert!(coloured.contains("\u{1b}["), "{coloured}");
    let json = db.ok(&["--color", "always", "--json", "runs"]);
    assert!(!json.contains('\u{1b}'));
}

fn json_errors_are_json(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.agentctl(&["--json", "show", "no-such-run"]);
    assert_eq!(code(&out), 1);
    let err: Value = serde_json::from_slice(&out.stdout).expect("a JSON error on stdout");
    assert_eq!(err["error"], "run `no-such-run` not found");
    assert!(err["hint"].as_str().unwrap().contains("agentctl runs"));
}

fn cancel_compensates_a_waiting_run(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&[
        "cancel",
        PAID_WAITING,
        "--reason",
        "customer asked",
        "--by",
        "alice",
    ]);
    assert!(
        out.contains("cancelled run order-waiting at version 4 (by alice: customer asked)"),
        "{out}"
    );
    let show = db.ok(&["show", PAID_WAITING]);
    assert!(
        show.contains("cancel") && show.contains("by alice: customer asked"),
        "{show}"
    );
    let compensating = db.json(&["runs", "--status", "compensating"]);
    assert_eq!(compensating[0]["id"], PAID_WAITING, "{compensating}");
    assert_eq!(compensating[0]["error"]["code"], "cancelled");

    // A worker runs the compensations: the reservations are released, the run ends cancelled.
    let done = db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let done = common::runner(&store, &world, "Pay")
            .run(PAID_WAITING)
            .await
            .expect("compensate");
        (done, world.state().released.len())
    });
    assert_eq!((done.0.status, done.1), (RunStatus::Cancelled, 2));

    let again = db.json(&["cancel", PAID_WAITING, "--by", "alice"]);
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["status"], "cancelled");
    let refused = db.agentctl(&["terminate", PAID_WAITING, "--reason", "x", "--by", "bob"]);
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("run `order-waiting` is cancelled: it cannot be terminated"),
        "{}",
        stderr(&refused)
    );
    let completed = db.agentctl(&["cancel", DONE, "--by", "alice"]);
    assert_eq!(code(&completed), 1);
    assert!(
        stderr(&completed).contains("is completed: it cannot be cancelled"),
        "{}",
        stderr(&completed)
    );
    db.ok(&["verify", PAID_WAITING]);
}

fn terminate_stops_a_run_with_who_and_why(new_db: fn() -> Db) {
    let db = new_db();
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        common::runner(&store, &world, "Pay")
            .start("order-dup", agent_conformance::fixture::initial(&["a"]))
            .await
            .expect("start");
    });
    let json = db.json(&[
        "terminate",
        "order-dup",
        "--reason",
        "duplicate order",
        "--by",
        "bob",
    ]);
    assert_eq!(json["status"], "terminated", "{json}");
    assert_eq!(json["changed"], true);
    assert_eq!(json["version"], 1);
    let history = db.json(&["show", "order-dup"])["history"].clone();
    assert_eq!(history[1]["kind"], "terminate", "{history}");
    assert_eq!(history[1]["note"]["by"], "bob");
    assert_eq!(history[1]["note"]["reason"], "duplicate order");
    let show = db.ok(&["show", "order-dup"]);
    assert!(show.contains("by bob: duplicate order"), "{show}");
    let again = db.ok(&["terminate", "order-dup", "--reason", "again", "--by", "bob"]);
    assert!(again.contains("already terminated"), "{again}");
    let cancel = db.agentctl(&["cancel", "order-dup", "--by", "bob"]);
    assert_eq!(code(&cancel), 1);
    assert!(
        stderr(&cancel).contains("is terminated"),
        "{}",
        stderr(&cancel)
    );
    let no_reason = db.agentctl(&["terminate", "order-dup", "--by", "bob"]);
    assert_eq!(code(&no_reason), 2, "{}", stderr(&no_reason));
    db.ok(&["verify", "order-dup"]);
}

fn runs_filter_by_label(new_db: fn() -> Db) {
    let db = new_db();
    db.runtime.block_on(async {
        let store = db.store().await;
        for (id, tenant, region) in [
            ("order-eu", "acme", "eu"),
            ("order-us", "acme", "us"),
            ("order-other", "globex", "eu"),
        ] {
            store
                .create_run(
                    agent_core::store::NewRun::new(
                        id,
                        "Order",
                        "fp",
                        "Start",
                        serde_json::json!({}),
                    )
                    .with_label("tenant", tenant)
                    .with_label("region", region),
                )
                .await
                .expect("create a labelled run");
        }
    });
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["runs"];
        all.extend_from_slice(args);
        db.json(&all)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(&["--label", "tenant=acme", "--label", "region=eu"]),
        ["order-eu", PAID_WAITING]
    );
    assert_eq!(
        ids(&["--label", "tenant=globex", "--label", "region=eu"]),
        ["order-other"]
    );
    assert!(ids(&["--label", "tenant=initech"]).is_empty());
    let none = db.ok(&["runs", "--label", "tenant=initech"]);
    assert!(none.contains("no runs match"), "{none}");
    let fixture = ids(&["--label", "tenant=acme", "--agent", "Order"]);
    assert!(
        fixture.contains(&PAID_WAITING.to_owned()) && fixture.contains(&DONE.to_owned()),
        "runs started with labels by the runner: {fixture:?}"
    );
    let show = db.ok(&["show", "order-eu"]);
    assert!(
        show.contains("labels       region=eu tenant=acme"),
        "{show}"
    );
    let bad = db.agentctl(&["runs", "--label", "bad key=x"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("label key `bad key` holds ' '"),
        "{}",
        stderr(&bad)
    );
    let bare = db.agentctl(&["runs", "--label", "tenant"]);
    assert_eq!(code(&bare), 2);
    assert!(
        stderr(&bare).contains("`tenant` is not KEY=VALUE"),
        "{}",
        stderr(&bare)
    );
}

fn children_are_listed_and_named(new_db: fn() -> Db) {
    let db = new_db();
    db.runtime.block_on(async {
        let store = db.store().await;
        let new = |id: &str| {
            agent_core::store::NewRun::new(id, "Report", "fp", "Plan", serde_json::json!({}))
        };
        store.create_run(new("report-1")).await.expect("a parent");
        for i in 0..2 {
            let child = agent_core::store::NewRun::new(
                agent_core::runner::child_run_id("report-1", 0, i),
                "Research",
                "fp",
                "Searching",
                serde_json::json!({}),
            )
            .spawned_by("report-1", 0);
            store.create_run(child).await.expect("a child");
        }
        store
            .create_run(new("report-2"))
            .await
            .expect("another parent");
    });
    let mut ids: Vec<String> = db
        .json(&["runs", "--parent", "report-1"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["report-1/v0/0", "report-1/v0/1"]);
    let none = db.ok(&["runs", "--parent", "report-2"]);
    assert!(
        none.contains("run `report-2` started no child runs"),
        "{none}"
    );
    let child = db.ok(&["show", "report-1/v0/1"]);
    assert!(
        child.contains("parent       report-1 (started by its step at version 0)"),
        "{child}"
    );
    let parent = db.ok(&["show", "report-1"]);
    assert!(
        parent.contains("Children") && parent.contains("report-1/v0/0"),
        "{parent}"
    );
    let json = db.json(&["show", "report-1"]);
    assert_eq!(json["children"].as_array().map(Vec::len), Some(2));
}

/// Reads `child`'s stdout line by line on a thread, until it closes.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Lines from `rx` until one contains `needle` (all of them, that one last); panics
/// after 30 s.
fn until(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(e) => panic!("no line with {needle:?} ({e}); got {seen:#?}"),
        }
    }
}

/// `show RUN --follow` prints the timeline, then each event as the run commits it (here:
/// a signal, then the steps it resumes), and ends with the run; `runs --watch` prints the
/// events of every run as they come and ends quietly when its reader goes away. A final
/// run has nothing to follow.
fn follow_and_watch_print_events_as_they_come(new_db: fn() -> Db) {
    let db = new_db();
    let done = db.agentctl(&["show", DONE, "--follow"]);
    assert!(
        done.status.success() && stderr(&done).contains("nothing more will happen"),
        "{}",
        stderr(&done)
    );

    let mut show = db
        .command(&["show", PAID_WAITING, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentctl show --follow");
    let mut watch = db
        .command(&["--json", "runs", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentctl runs --watch");
    let shown = lines_of(&mut show);
    // Reads until the run's end, then closes its end of the pipe.
    let watched = {
        use std::io::BufRead as _;
        let out = watch.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let end = line.contains("run_finished");
                lines.push(line);
                if end {
                    break;
                }
            }
            lines
        })
    };
    until(&shown, "following");
    db.ok(&["signal", PAID_WAITING, "confirm", r#"{"ok": true}"#]);
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = Arc::new(fixture::World::default());
        let finished = common::runner(&store, &world, "Pay")
            .run(PAID_WAITING)
            .await
            .expect("resume after the signal");
        assert_eq!(finished.status, RunStatus::Completed);
    });
    let followed = until(&shown, "completed");
    let text = followed.join("\n");
    assert!(
        text.contains("signal") && text.contains("confirm") && text.contains("Done"),
        "show --follow printed: {text}"
    );
    let out = show.wait_with_output().expect("show --follow ends");
    assert!(out.status.success(), "show --follow: {}", stderr(&out));

    // After the list of runs, one JSON event per line, the run's end among them.
    let lines = watched.join().expect("the reader of runs --watch");
    let events: Vec<Value> = lines
        .iter()
        .filter(|l| l.starts_with("{\"cursor\""))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        events.len() >= 3 && events.iter().all(|e| e["run_id"] == PAID_WAITING),
        "runs --watch printed: {lines:#?}"
    );
    // Its reader is gone: the next event it writes ends it quietly.
    db.ok(&["retry", STUCK]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = watch.try_wait().expect("wait for runs --watch") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runs --watch still running 30 s after its reader left"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = watch.wait_with_output().expect("runs --watch output");
    assert!(
        status.success() && !stderr(&err).contains("panicked"),
        "runs --watch after its reader left: {status} {}",
        stderr(&err)
    );
}

/// Every test above runs on SQLite, and on PostgreSQL when one is configured.
/// `agentctl edit`: a waiting run's state patched, one audited `edited` transition the chain
/// verifies, the run waiting again in the edited state and completing; refusals with what to
/// do; and a state the agent's type does not read, which agentctl cannot check, held by the
/// worker before any handler runs (quarantined) and edited again.
fn edit_corrects_a_stopped_runs_state(new_db: fn() -> Db) {
    let db = new_db();
    // Refused, nothing written: an ended run, a state the graph does not lead to, a patch
    // that does not apply.
    for (args, says) in [
        (
            vec!["edit", DONE, "--state", r#"{"Pay": {"cents": 1}}"#],
            "fork it",
        ),
        (
            vec![
                "edit",
                PAID_WAITING,
                "--state",
                r#"{"Start": {"items": []}}"#,
            ],
            "--override-graph",
        ),
        (
            vec![
                "edit",
                PAID_WAITING,
                "--patch",
                r#"[{"op": "remove", "path": "/Nope"}]"#,
            ],
            "does not apply",
        ),
    ] {
        let mut all = args.clone();
        all.extend(["--reason", "test", "--by", "ops"]);
        let out = db.agentctl(&all);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    // `--state` or `--patch` is required.
    let neither = db.agentctl(&["edit", PAID_WAITING, "--reason", "r", "--by", "ops"]);
    assert_eq!(code(&neither), 2, "{}", stderr(&neither));

    let patch = r#"[{"op": "replace", "path": "/Confirm/payment_id", "value": "pay-corrected"}]"#;
    let out = db.ok(&[
        "edit",
        PAID_WAITING,
        "--patch",
        patch,
        "--reason",
        "wrong payment",
        "--by",
        "ops",
    ]);
    assert!(
        out.contains("edited run") && out.contains("`Confirm`"),
        "{out}"
    );
    let state = db.json(&["state", PAID_WAITING]);
    assert!(state.to_string().contains("pay-corrected"), "{state}");
    let shown = db.ok(&["show", PAID_WAITING]);
    assert!(
        shown.contains("edited") && shown.contains("wrong payment"),
        "{shown}"
    );
    db.ok(&["verify", PAID_WAITING]);
    // Now running: a worker drives it, so it is not edited.
    let running = db.agentctl(&[
        "edit",
        PAID_WAITING,
        "--patch",
        patch,
        "--reason",
        "r",
        "--by",
        "o",
    ]);
    assert!(
        stderr(&running).contains("is running"),
        "{}",
        stderr(&running)
    );

    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let runner = common::runner(&store, &world, "Pay");
        let waiting = runner.run(PAID_WAITING).await.expect("run the edited run");
        assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
        let versions = store.history(PAID_WAITING).await.unwrap();
        assert_eq!(
            versions
                .iter()
                .filter(|t| t.kind == TransitionKind::Edited)
                .count(),
            1
        );
    });

    // A state `agentctl` cannot check (it links no agent): the worker holds the run before
    // any handler runs, and an operator edits it again.
    db.ok(&[
        "edit",
        STUCK,
        "--state",
        r#"{"Confirm": {"payment_id": 42}}"#,
        "--reason",
        "typo",
        "--by",
        "ops",
    ]);
    db.runtime.block_on(async {
        let store = db.store().await;
        let world = std::sync::Arc::new(agent_conformance::fixture::World::default());
        let runner = common::runner(&store, &world, "Pay");
        let held = runner.run(STUCK).await.expect("run");
        assert_eq!(held.status, RunStatus::Quarantined, "{held:?}");
        assert!(
            world.state().applied.is_empty(),
            "a handler ran on the bad state"
        );
    });
    db.ok(&[
        "edit",
        STUCK,
        "--state",
        r#"{"Confirm": {"payment_id": "pay-1"}}"#,
        "--reason",
        "fixed",
        "--by",
        "ops",
    ]);
    let json = db.json(&["show", STUCK]);
    assert_eq!(json["run"]["status"], "running", "{json}");
    db.ok(&["verify", STUCK]);
}

/// `agentctl budget`: a run's budget set, shown and removed, its spend kept; limits that can
/// never be met and a missing limit refused.
fn budget_is_set_shown_and_removed(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["budget", PAID_WAITING, "--tokens", "5000", "--cost", "0.5"]);
    assert!(
        out.contains("budget at most 5000 tokens, cost 0.5 (was none)"),
        "{out}"
    );
    let shown = db.ok(&["show", PAID_WAITING]);
    assert!(shown.contains("at most 5000 tokens, cost 0.5"), "{shown}");
    let json = db.json(&["budget", PAID_WAITING, "--asks", "3"]);
    assert_eq!(json["budget"]["asks"], 3, "{json}");
    assert_eq!(json["previous_budget"]["cost_micros"], 500_000, "{json}");
    assert!(
        json["budget"].get("tokens").is_none(),
        "replaced, not merged: {json}"
    );
    let removed = db.ok(&["budget", PAID_WAITING, "--none"]);
    assert!(removed.contains("budget none"), "{removed}");
    for (args, says, exit) in [
        (
            vec!["budget", PAID_WAITING, "--asks", "0"],
            "can never be met",
            2,
        ),
        (
            vec!["budget", PAID_WAITING, "--cost=-1"],
            "positive amount",
            2,
        ),
        (vec!["budget", PAID_WAITING], "required", 2),
        (
            vec!["budget", "no-such-run", "--asks", "1"],
            "no-such-run",
            1,
        ),
    ] {
        let out = db.agentctl(&args);
        assert_eq!(code(&out), exit, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// `agentctl limits`: the shared rate limits, with their rate and how long a taker waits.
fn limits_are_listed(new_db: fn() -> Db) {
    let db = new_db();
    let out = db.ok(&["limits"]);
    assert!(
        out.contains("tool:ChargeCard") && out.contains("5.000/s"),
        "{out}"
    );
    let json = db.json(&["limits"]);
    let limit = &json[0];
    assert_eq!(limit["name"], "tool:ChargeCard", "{json}");
    let wait = limit["wait_ms"].as_u64().unwrap_or_default();
    assert!(wait > 3_000_000, "paused for an hour by the seed: {json}");
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Db::sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if !super::Db::postgres_available() {
                        println!(
                            "skipped on PostgreSQL: set DATABASE_URL or AGENTCTL_TEST_PG to a postgres:// URL"
                        );
                        return;
                    }
                    super::$name(super::Db::postgres);
                }
            )*
        }
    };
}

/// One run's row damaged (on SQLite its state is not JSON; on PostgreSQL, which refuses
/// that, its version is negative) next to healthy runs: listed as stored with why it does
/// not read, shown from what reads, quarantined in the store by the first claim while the
/// others go on, then repaired to its last version with a chain that verifies.
fn an_unreadable_run_is_diagnosed_quarantined_and_repaired(new_db: fn() -> Db) {
    let db = new_db();
    let before = db.json(&["show", PAID_WAITING]);
    let version = before["run"]["version"].as_u64().unwrap();
    let damage = if db.pg.is_some() {
        format!("UPDATE runs SET version = -1 WHERE id = '{PAID_WAITING}'")
    } else {
        format!("UPDATE runs SET state = '{{not json' WHERE id = '{PAID_WAITING}'")
    };
    db.sql(&[&damage]);

    let listed = db.json(&["runs"]);
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == PAID_WAITING)
        .expect("the damaged run is listed");
    assert_eq!(
        row["status"], "waiting",
        "the stored status, not a made-up one: {row}"
    );
    assert_eq!(row["error"]["code"], "row.unreadable", "{row}");
    assert_eq!(row["created_at"], before["run"]["created_at"], "{row}");
    let shown = db.ok(&["show", PAID_WAITING]);
    assert!(shown.contains("unreadable"), "{shown}");
    let state = db.agentctl(&["state", PAID_WAITING]);
    assert_eq!(code(&state), 1);
    assert!(
        stderr(&state).contains("agentctl repair"),
        "{}",
        stderr(&state)
    );

    // A worker claims it (the signal it waits for has come): the store quarantines it and
    // the runner reports it; a healthy run beside it runs.
    db.runtime.block_on(async {
        let store = db.store().await;
        store
            .send_signal(PAID_WAITING, "confirm", &json!({ "ok": true }))
            .await
            .unwrap();
        let r = common::runner(&store, &Arc::new(fixture::World::default()), "Pay");
        let bad = r
            .run(PAID_WAITING)
            .await
            .expect("an unreadable run is reported, not an error");
        assert_eq!(bad.status, RunStatus::Quarantined);
        assert_eq!(bad.error.unwrap().code, "row.unreadable");
        r.start("beside", fixture::initial(&["pear"]))
            .await
            .unwrap();
        let healthy = r.run("beside").await.unwrap();
        assert_eq!(healthy.status, RunStatus::Waiting, "{healthy:?}");
    });
    let quarantined = db.json(&["runs", "--status", "quarantined"]);
    assert!(
        quarantined
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == PAID_WAITING),
        "quarantined in the store: {quarantined}"
    );

    let refused = db.agentctl(&[
        "repair", DONE, "--to", "1", "--reason", "test", "--by", "ops",
    ]);
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("not quarantined"),
        "{}",
        stderr(&refused)
    );
    let repaired = db.ok(&[
        "repair",
        PAID_WAITING,
        "--to",
        &version.to_string(),
        "--reason",
        "the state column was damaged by hand",
        "--by",
        "ops",
    ]);
    assert!(repaired.contains("repaired run"), "{repaired}");
    db.ok(&["verify", PAID_WAITING]);
    let after = db.json(&["show", PAID_WAITING]);
    assert_eq!(after["run"]["status"], "running", "{after}");
    assert_eq!(after["run"]["version"], version + 1, "{after}");
    assert_eq!(
        after["history"].as_array().unwrap().last().unwrap()["kind"],
        "repair"
    );
}

/// `show --width N` fits every line in N columns: the details go under their rows, wrapped,
/// and long header values wrap under themselves; without a width (a pipe) nothing wraps.
#[test]
fn show_fits_the_width() {
    let db = Db::sqlite();
    for width in [60_usize, 100, 139] {
        let out = db.ok(&["--width", &width.to_string(), "show", DECLINED]);
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(
            widest <= width,
            "a line of {widest} columns at --width {width}:\n{out}"
        );
        assert!(out.contains("tool.permanent"), "details are kept: {out}");
    }
    let piped = db.ok(&["show", DECLINED]);
    assert!(
        piped.lines().map(|l| l.chars().count()).max().unwrap() > 100,
        "in a pipe, rows stay whole on one line"
    );
}

on_both_backends!(
    state_time_travel,
    export_writes_the_whole_run,
    fork_starts_a_run_from_a_version,
    runs_lists_and_filters,
    show_prints_the_timeline,
    show_snapshot,
    show_json_and_missing_run,
    graph_exports,
    coverage_names_what_no_run_took,
    tools_kill_switch,
    signal_resumes_a_waiting_run,
    stats_per_tool,
    retry_and_resume_requeue,
    prune_keeps_runs_verifiable,
    verify_passes_on_clean_runs,
    verify_detects_a_modified_row,
    verify_detects_a_deleted_row,
    verify_detects_reordered_rows,
    colours_only_when_asked_or_on_a_terminal,
    json_errors_are_json,
    an_unreadable_run_is_diagnosed_quarantined_and_repaired,
    cancel_compensates_a_waiting_run,
    terminate_stops_a_run_with_who_and_why,
    runs_filter_by_label,
    children_are_listed_and_named,
    follow_and_watch_print_events_as_they_come,
    edit_corrects_a_stopped_runs_state,
    budget_is_set_shown_and_removed,
    limits_are_listed,
);
