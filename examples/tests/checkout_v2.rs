//! Version 2 of the checkout taking over version 1's runs on a real SQLite file: runs
//! interrupted mid-step on version 1 finish on version 2 with every effect applied once, and
//! `migrate_runs` moves waiting-to-run old runs across eagerly, once.

use std::sync::Arc;

use durable_agents::runner::{
    CrashAt, FaultHook, FaultPoint, NoFaults, Runner, RunnerConfig, RunnerError,
};
use durable_agents::store::verify::verify_run;
use durable_agents::store::{RunStatus, Store, TransitionKind};
use durable_agents::versions::migrate_runs;
use examples::checkout::{self as v1};
use examples::checkout_v2 as v2;
use examples::shop::Shop;
use examples::stores;

async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    stores::open(None, &dir.path().join("runs.sqlite3"))
        .await
        .expect("open sqlite")
        .store
}

fn config() -> RunnerConfig {
    // One stable worker id for both versions: the version 2 process is the version 1
    // process restarted with the new code, and takes its own leases back at once.
    RunnerConfig {
        worker_id: "checkout".into(),
        ..RunnerConfig::default()
    }
}

fn runner_v1(store: &Arc<dyn Store>, shop: &Arc<Shop>) -> Runner<v1::Checkout, v1::Handlers> {
    runner_v1_with(store, shop, Arc::new(NoFaults))
}

fn runner_v1_with(
    store: &Arc<dyn Store>,
    shop: &Arc<Shop>,
    faults: Arc<dyn FaultHook>,
) -> Runner<v1::Checkout, v1::Handlers> {
    Runner::builder(Arc::clone(store), v1::Handlers, v1::checkout_tools(shop))
        .router(Arc::new(v1::scripted_reviewer()))
        .config(config())
        .faults(faults)
        .build()
        .unwrap()
}

fn runner_v2(store: &Arc<dyn Store>, shop: &Arc<Shop>) -> Runner<v2::Checkout, v2::Handlers> {
    Runner::builder(Arc::clone(store), v2::Handlers, v2::checkout_tools(shop))
        .router(Arc::new(v1::scripted_reviewer()))
        .config(config())
        .build()
        .unwrap()
}

/// How many effects of `op` the shop applied for this run (each key applies once).
fn applied(shop: &Shop, run_id: &str, op: &str) -> usize {
    shop.snapshot()
        .effects
        .iter()
        .filter(|e| e.op == op && e.key.starts_with(run_id))
        .count()
}

/// Alice's version 1 run answers 10 tool calls, the receipt last. Crash after each one's
/// effect applied, before its result is journaled, then let version 2 take the run over.
#[tokio::test]
async fn a_step_interrupted_on_v1_finishes_on_v2_with_each_effect_once() {
    const CALLS: u32 = 10;
    for nth in 1..=CALLS {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir).await;
        let shop = Arc::new(Shop::demo());
        let [alice, _] = v1::demo_customers();
        let id = format!("alice-{nth}");
        let crashing = runner_v1_with(
            &store,
            &shop,
            Arc::new(CrashAt::new(FaultPoint::ToolAnswered, nth)),
        );
        crashing.start(&id, v1::start(alice)).await.unwrap();
        let crashed = crashing.run(&id).await;
        assert!(
            matches!(crashed, Err(RunnerError::Crashed(_))),
            "crash {nth}: {crashed:?}"
        );

        let run = runner_v2(&store, &shop).run(&id).await.unwrap();
        let history = store.history(&id).await.unwrap();
        let migrations = history
            .iter()
            .filter(|t| t.kind == TransitionKind::Migrated)
            .count();
        assert_eq!(migrations, 1, "crash {nth}: one migration");
        assert!(
            verify_run(store.as_ref(), &run).await.unwrap().ok,
            "crash {nth}"
        );
        assert_eq!(run.agent_version, 2, "crash {nth}");
        // Never an effect applied twice: a second application would have another key.
        for (op, most) in [
            ("add_to_cart", 3),
            ("remove_from_cart", 1),
            ("reserve", 2),
            ("charge", 1),
            ("book_shipment", 1),
            ("send_receipt", 1),
        ] {
            let n = applied(&shop, &id, op);
            assert!(n <= most, "crash {nth}: {op} applied {n} times");
        }
        if nth < CALLS {
            assert_eq!(run.status, RunStatus::Completed, "crash {nth}: {run:?}");
            assert_eq!(applied(&shop, &id, "reserve"), 2, "crash {nth}");
            assert_eq!(applied(&shop, &id, "charge"), 1, "crash {nth}");
            assert_eq!(applied(&shop, &id, "book_shipment"), 1, "crash {nth}");
            assert_eq!(applied(&shop, &id, "send_receipt"), 1, "crash {nth}");
        } else {
            // Interrupted in `Receipt`, which version 2 maps to `Shipping`: the receipt may
            // have gone out, and the new step calls another tool at its index. The run
            // fails (and compensates) with a code rather than send a second receipt or skip
            // the call.
            assert_eq!(run.status, RunStatus::Compensated, "crash {nth}: {run:?}");
            let error = run.error.expect("the failure");
            assert!(error.message.contains("nondeterministic"), "{error:?}");
            assert_eq!(applied(&shop, &id, "send_receipt"), 1, "crash {nth}");
            assert_eq!(applied(&shop, &id, "book_shipment"), 0, "crash {nth}");
        }
    }
}

#[tokio::test]
async fn migrate_runs_moves_every_old_run_across_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let shop = Arc::new(Shop::demo());
    let old = runner_v1(&store, &shop);
    let mut ids = Vec::new();
    for (i, customer) in v1::demo_customers().into_iter().enumerate() {
        let id = format!("run-{i}");
        old.start(&id, v1::start(customer)).await.unwrap();
        ids.push(id);
    }
    let new = runner_v2(&store, &shop);
    let report = migrate_runs(&new).await.unwrap();
    assert_eq!(report.migrated.get(&1), Some(&2), "{report:?}");
    assert!(report.quarantined.is_empty(), "{report:?}");
    for id in &ids {
        let run = store.load_run(id).await.unwrap().unwrap();
        assert_eq!(run.agent_version, 2);
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.lease_owner, None, "the lease is given back");
        let kinds: Vec<_> = store
            .history(id)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect();
        assert_eq!(kinds, [TransitionKind::Start, TransitionKind::Migrated]);
    }
    // Nothing is left to migrate, and nothing ran: no effect was applied.
    let again = migrate_runs(&new).await.unwrap();
    assert!(again.migrated.is_empty(), "{again:?}");
    assert!(shop.snapshot().effects.is_empty());
    // The migrated runs then finish on version 2.
    for id in &ids {
        let run = new.run(id).await.unwrap();
        assert!(run.status.is_final(), "{run:?}");
    }
}
