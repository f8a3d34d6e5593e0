//! The checkout and triage agents on a real SQLite file, including a crash mid-run.

use std::sync::Arc;

use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::store::{CallStatus, EntryKind, RunStatus, Store};
use examples::checkout::{self, Checkout, Handlers};
use examples::shop::Shop;
use examples::triage::{self, Desk, RefundRequest, Ticket, Triage};

mod common;
use common::{shop, sqlite};

fn runner(store: &Arc<dyn Store>, shop: &Arc<Shop>, worker: &str) -> Runner<Checkout, Handlers> {
    runner_with(store, shop, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    shop: &Arc<Shop>,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Runner<Checkout, Handlers> {
    Runner::builder(Arc::clone(store), Handlers, checkout::tools(shop))
        .router(Arc::new(checkout::scripted_reviewer()))
        .config(RunnerConfig {
            worker_id: worker.into(),
            ..RunnerConfig::default()
        })
        .faults(faults)
        .build()
        .unwrap()
}

#[tokio::test]
async fn checkout_proves_its_guarantees() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let shop = shop();
    let r = runner(&store, &shop, "w");
    let [alice, bob] = checkout::demo_customers();
    r.start("alice", checkout::start(alice)).await.unwrap();
    r.start("bob", checkout::start(bob)).await.unwrap();
    let paid = r.run("alice").await.unwrap();
    let failed = r.run("bob").await.unwrap();
    assert_eq!(
        (paid.status, paid.state_name.as_str()),
        (RunStatus::Completed, "Done")
    );
    assert_eq!(
        (failed.status, failed.state_name.as_str()),
        (RunStatus::Compensated, "Failed")
    );

    let s = shop.snapshot();
    // The removed mug is never recommended: the recommender reads the typed cart.
    let journal = store.journal("alice", None).await.unwrap();
    let rec = journal.iter().find(|e| e.name == "Recommend").unwrap();
    let recommended = rec.output.as_ref().unwrap().to_string();
    assert!(!recommended.contains("\"mug\""), "{recommended}");
    assert_eq!(rec.input["exclude"], serde_json::json!(["mug"]));
    // The gateway timed out once; the retry reused the key; charged once; LLM asked once.
    let charge = journal.iter().find(|e| e.name == "ChargePayment").unwrap();
    assert_eq!((charge.status, charge.attempts), (CallStatus::Succeeded, 2));
    let key = charge.idempotency_key.clone().unwrap();
    assert_eq!(s.effects.iter().filter(|e| e.key == key).count(), 1);
    assert_eq!(s.requests[&key], 2);
    assert_eq!(
        journal
            .iter()
            .filter(|e| e.kind == EntryKind::Decision)
            .count(),
        1
    );
    assert_eq!(s.payments.len(), 1);
    // Bob's reservations were released, last first; stock is whole again for his items.
    let bob = store.journal("bob", None).await.unwrap();
    let released: Vec<_> = bob
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation)
        .map(|e| e.input["reservation_id"].clone())
        .collect();
    let reserved: Vec<_> = bob
        .iter()
        .filter(|e| e.name == "ReserveInventory")
        .map(|e| e.output.clone().unwrap())
        .collect();
    assert_eq!(released, reserved.into_iter().rev().collect::<Vec<_>>());
    assert_eq!(
        s.stock["tea"], 24,
        "alice's tea stays reserved-and-sold, bob's is back"
    );
}

#[tokio::test]
async fn checkout_resumes_after_a_crash_at_every_commit() {
    // Alice's run commits five versions (v1..=v5).
    for nth in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir).await;
        let shop = shop();
        let hook = Arc::new(CrashAt::new(FaultPoint::CommitApplied, nth));
        let crashy = runner_with(&store, &shop, "same-worker", hook.clone());
        let [alice, _] = checkout::demo_customers();
        crashy.start("alice", checkout::start(alice)).await.unwrap();
        match crashy.run("alice").await {
            Err(RunnerError::Crashed(_)) => assert!(hook.fired()),
            other => panic!("expected a crash at commit {nth}: {other:?}"),
        }
        // The restarted process uses the same worker name and takes its lease back at once.
        let record = runner(&store, &shop, "same-worker")
            .run("alice")
            .await
            .unwrap();
        assert_eq!(record.status, RunStatus::Completed, "crash at commit {nth}");
        let s = shop.snapshot();
        let mut keys: Vec<_> = s.effects.iter().map(|e| e.key.clone()).collect();
        keys.dedup();
        assert_eq!(
            keys.len(),
            s.effects.len(),
            "an effect applied twice after a crash at commit {nth}"
        );
        assert_eq!(s.payments.len(), 1);
        assert_eq!(s.receipts.len(), 1);
    }
}

#[tokio::test]
async fn triage_approval_is_bound_to_the_exact_refund_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let desk = Arc::new(Desk::with_orders(&[("big", 50_000), ("other", 20_000)]));
    let make = || {
        Runner::<Triage, triage::Handlers>::builder(
            Arc::clone(&store),
            triage::Handlers,
            triage::tools(&desk),
        )
        .router(Arc::new(triage::scripted_classifier()))
        .build()
        .unwrap()
    };
    let first = make();
    for (id, order) in [("a", "big"), ("b", "other")] {
        let ticket = Ticket {
            customer: "c".into(),
            order_id: order.into(),
            text: "refund please".into(),
        };
        first.start(id, Triage::Received { ticket }).await.unwrap();
        assert_eq!(first.run(id).await.unwrap().status, RunStatus::Waiting);
    }
    drop(first);
    let second = make();
    // Run b's approval replayed on run a: refused.
    let b_refund = RefundRequest {
        run_id: "b".into(),
        order_id: "other".into(),
        amount_cents: 20_000,
    };
    second
        .signal("a", "approval", triage::approve(&b_refund, "x"))
        .await
        .unwrap();
    assert_eq!(second.run("a").await.unwrap().status, RunStatus::Waiting);
    // A wrong amount for the right run: refused.
    let wrong = RefundRequest {
        run_id: "a".into(),
        order_id: "big".into(),
        amount_cents: 1,
    };
    second
        .signal("a", "approval", triage::approve(&wrong, "x"))
        .await
        .unwrap();
    assert_eq!(second.run("a").await.unwrap().status, RunStatus::Waiting);
    assert!(desk.refunds().is_empty());
    // The exact refund: approved once, refunded once.
    let right = RefundRequest {
        run_id: "a".into(),
        order_id: "big".into(),
        amount_cents: 50_000,
    };
    second
        .signal("a", "approval", triage::approve(&right, "dana"))
        .await
        .unwrap();
    assert_eq!(second.run("a").await.unwrap().status, RunStatus::Completed);
    assert_eq!(desk.refunds().len(), 1);
    assert_eq!(second.run("b").await.unwrap().status, RunStatus::Waiting);

    // By hand (`--manual`): the printed `agentctl signal` command carries a payload bound to
    // the waiting run's exact refund, read from its stored state; sent as agentctl sends it,
    // it releases that refund.
    let waiting = store.load_run("b").await.unwrap().unwrap();
    let refund: RefundRequest =
        serde_json::from_value(waiting.state["AwaitApproval"]["refund"].clone()).unwrap();
    let command = triage::approval_command("b", &refund, "you");
    assert!(
        command.starts_with("cargo run --bin agentctl -- signal b approval '"),
        "{command}"
    );
    let payload: serde_json::Value =
        serde_json::from_str(command.split('\'').nth(1).unwrap()).unwrap();
    store.send_signal("b", "approval", &payload).await.unwrap();
    assert_eq!(second.run("b").await.unwrap().status, RunStatus::Completed);
    assert_eq!(desk.refunds().len(), 2);
}

#[test]
fn checkout_graph_exports_render_and_round_trip() {
    use durable_agents::Agent;
    use durable_agents::graph::GraphDescription;
    let graph = Checkout::graph();
    assert_eq!(
        GraphDescription::from_yaml(&graph.to_yaml()).unwrap(),
        *graph
    );
    assert_eq!(
        GraphDescription::from_json(&graph.to_json()).unwrap(),
        *graph
    );
    let mermaid = graph.to_mermaid();
    assert!(
        mermaid.starts_with("stateDiagram-v2\n")
            && mermaid.contains("Payment --> Failed : on error")
    );
    let dot = graph.to_dot();
    match std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(dot.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "dot rejected the export: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
        }
        Err(_) => eprintln!(
            "graphviz `dot` is not installed: DOT rendering not checked (apt-get install graphviz)"
        ),
    }
}

/// The fingerprint is a pure function of the declared graph: the same on every build and
/// machine. This golden value changes only when the checkout agent's graph changes (states,
/// edges, tools, kinds or state data); update it then, on purpose.
#[test]
fn checkout_fingerprint_is_stable_across_builds() {
    use durable_agents::Agent;
    assert_eq!(Checkout::graph().fingerprint(), GOLDEN_FINGERPRINT);
}

const GOLDEN_FINGERPRINT: &str = "5c193f286eecad18da009e74d78fb0c0563cf421cefc297530ccdc0ef57fb9c9";
