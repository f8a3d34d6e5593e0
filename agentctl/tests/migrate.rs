//! `agentctl migrate` moving runs of an older version, from a control binary that registers
//! the agent: this test binary is one (`--as-ctl`, `agentctl::Ctl` with the conformance
//! fixture's version 2 registered), and runs its checks against itself and the stock
//! `agentctl`, on SQLite and on PostgreSQL when one is configured.
//!
//! It has its own `main` (`harness = false`): a control binary is a program, and a test
//! binary run as one must print nothing but the program's output.

mod common;

use std::ffi::OsString;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Duration;

use agent_conformance::fixture::{self, Behaviour, World};
use agent_conformance::version_checks::OrderV2;
use agent_core::agent::Agent;
use agent_core::runner::{CrashAt, FaultPoint, Runner, RunnerConfig};
use agent_core::store::{Claimed, RunFilter, RunStatus, TransitionKind};
use common::{Db, PAID_WAITING};
use serde_json::{Value, json};

/// The run left running at its first state, never stepped.
const FRESH: &str = "mig-fresh";
/// The run whose first step crashed after its reservations, before its commit.
const INTERRUPTED: &str = "mig-interrupted";
/// The run that crashed during its compensations.
const COMPENSATING: &str = "mig-compensating";
/// The run whose stored state does not read as version 1.
const UNREADABLE: &str = "mig-unreadable";
/// The run on a version no chain leads from.
const NO_CHAIN: &str = "mig-no-chain";

/// A test, given how to make its database.
type Test = fn(fn() -> Db);

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "--as-ctl") {
        let program = std::iter::once(OsString::from("order-ctl"));
        return agentctl::Ctl::new()
            .agent::<OrderV2>()
            .run_from(program.chain(args[2..].iter().cloned()));
    }
    let filter: Vec<String> = args[1..]
        .iter()
        .filter_map(|a| a.to_str())
        .filter(|a| !a.starts_with('-'))
        .map(str::to_owned)
        .collect();
    let tests: [(&str, Test); 3] = [
        ("dry_run_changes_nothing", dry_run_changes_nothing),
        ("apply_migrates_each_run_once", apply_migrates_each_run_once),
        (
            "the_stock_binary_has_no_code_but_migrates_the_schema",
            the_stock_binary_has_no_code_but_migrates_the_schema,
        ),
    ];
    let mut failed = Vec::new();
    let mut ran = 0;
    for (backend, new_db) in [
        ("sqlite", Db::sqlite as fn() -> Db),
        ("postgres", Db::postgres),
    ] {
        for (name, test) in tests {
            let full = format!("{backend}::{name}");
            if !filter.is_empty() && !filter.iter().any(|f| full.contains(f.as_str())) {
                continue;
            }
            if backend == "postgres" && !Db::postgres_available() {
                println!(
                    "test {full} ... skipped: set DATABASE_URL or AGENTCTL_TEST_PG to a postgres:// URL"
                );
                continue;
            }
            ran += 1;
            let outcome = std::panic::catch_unwind(|| test(new_db));
            println!(
                "test {full} ... {}",
                if outcome.is_ok() { "ok" } else { "FAILED" }
            );
            if outcome.is_err() {
                failed.push(full);
            }
        }
    }
    println!("\n{ran} run, {} failed {failed:?}", failed.len());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `order-ctl ARGS` against the test database: this binary as the control binary.
fn ctl(db: &Db, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.arg("--as-ctl");
    db.command_of(cmd, args)
        .output()
        .expect("run the control binary")
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn ctl_ok(db: &Db, args: &[&str]) -> String {
    ok(&ctl(db, args), &format!("order-ctl {args:?}"))
}

fn ctl_json(db: &Db, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ctl_ok(db, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: Duration::from_millis(150),
        ..RunnerConfig::default()
    }
}

/// Beside the common runs (one of them, `order-waiting`, waiting for its signal on version
/// 1), version 1 runs in every situation a migration must handle. The fixture's world of
/// the interrupted run, to check its effects afterwards.
fn old_runs(db: &Db) -> Arc<World> {
    let world = Arc::new(World::default());
    db.runtime.block_on(async {
        let store = store_of(db).await;
        let v1 = common::runner_builder(&store, &world, "Pay")
            .config(config("v1"))
            .build()
            .unwrap();
        v1.start(FRESH, fixture::initial(&["fig"])).await.unwrap();
        for id in [UNREADABLE, NO_CHAIN] {
            v1.start(id, fixture::initial(&["fig"])).await.unwrap();
        }
        let crash = Arc::new(CrashAt::new(FaultPoint::CommitSent, 0));
        let crashing = common::runner_builder(&store, &world, "Pay")
            .config(config("v1-crash"))
            .faults(crash.clone())
            .build()
            .unwrap();
        crashing
            .start(INTERRUPTED, fixture::initial(&["a", "bb"]))
            .await
            .unwrap();
        assert!(crashing.run(INTERRUPTED).await.is_err() && crash.fired());
        let crash = Arc::new(CrashAt::new(FaultPoint::CompensationRegistered, 0));
        let compensating = common::runner_builder(&store, &Arc::new(World::default()), "Cancelled")
            .config(config("v1-comp"))
            .faults(crash.clone())
            .build()
            .unwrap();
        compensating
            .start(COMPENSATING, fixture::initial(&["c"]))
            .await
            .unwrap();
        assert!(compensating.run(COMPENSATING).await.is_err() && crash.fired());
        // The crashed workers' leases run out.
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    db.sql(&[
        &format!(
            "UPDATE runs SET state = '{{\"Start\": {{\"wrong\": 1}}}}' WHERE id = '{UNREADABLE}'"
        ),
        &format!("UPDATE runs SET agent_version = 0 WHERE id = '{NO_CHAIN}'"),
    ]);
    world
}

/// The test's store: on PostgreSQL one pool for the whole test (connections are scarce on
/// a shared server); on SQLite opened for each use, since an open store holds the file's
/// worker lock, which `migrate` takes.
async fn store_of(db: &Db) -> Arc<dyn agent_core::store::Store> {
    static PG: std::sync::Mutex<Option<(String, Arc<dyn agent_core::store::Store>)>> =
        std::sync::Mutex::new(None);
    let Some((_, schema)) = &db.pg else {
        return db.store().await;
    };
    if let Some((s, store)) = PG.lock().unwrap().as_ref()
        && s == schema
    {
        return Arc::clone(store);
    }
    let store = db.store().await;
    *PG.lock().unwrap() = Some((schema.clone(), Arc::clone(&store)));
    store
}

/// Per run: version, agent version, status, and how many transitions its history holds.
fn census(db: &Db) -> Vec<(String, u64, u32, RunStatus, usize)> {
    db.runtime.block_on(async {
        let store = store_of(db).await;
        let mut runs = store.list_runs(&RunFilter::default()).await.unwrap();
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        let mut out = Vec::new();
        for r in runs {
            let history = store.history(&r.id).await.unwrap();
            out.push((r.id, r.version, r.agent_version, r.status, history.len()));
        }
        out
    })
}

fn row<'a>(json: &'a Value, run: &str) -> &'a Value {
    json["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["run"] == run)
        .unwrap_or_else(|| panic!("no row for {run} in {json:#}"))
}

fn dry_run_changes_nothing(new_db: fn() -> Db) {
    let db = new_db();
    old_runs(&db);
    let before = census(&db);

    let table = ctl_ok(&db, &["migrate", "--dry-run"]);
    insta::with_settings!({
        prepend_module_to_snapshot => false,
        filters => vec![(r"(?m)^the (SQLite|PostgreSQL) store at .*$", "the [store] at [where]: [schema]")],
    }, {
        insta::assert_snapshot!("migrate_dry_run", table);
    });

    let json = ctl_json(&db, &["migrate", "--dry-run"]);
    assert_eq!(json["dry_run"], true);
    assert_eq!(json["schema_pending"], Value::Null, "{json:#}");
    assert_eq!(json["runs"].as_array().unwrap().len(), 6, "{json:#}");
    let waiting = row(&json, PAID_WAITING);
    assert_eq!(waiting["action"], "migrate");
    assert_eq!(
        (
            waiting["from_version"].as_u64(),
            waiting["to_version"].as_u64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(waiting["to_state"], "Confirm");
    assert_eq!(waiting["to_status"], "waiting");
    assert_eq!(waiting["waiting_for"], "confirm");
    let stored = db.runtime.block_on(async {
        store_of(&db)
            .await
            .load_run(PAID_WAITING)
            .await
            .unwrap()
            .unwrap()
            .state
    });
    assert_eq!(
        waiting["mapped_state"], stored,
        "version 2 maps every state to itself"
    );
    assert!(waiting["mapped_state"]["Confirm"]["payment_id"].is_string());
    let fresh = row(&json, FRESH);
    assert_eq!(
        (&fresh["action"], &fresh["to_state"], &fresh["resume_base"]),
        (&json!("migrate"), &json!("Start"), &Value::Null)
    );
    let interrupted = row(&json, INTERRUPTED);
    assert_eq!(interrupted["action"], "migrate");
    assert_eq!(interrupted["resume_base"], 0, "{interrupted:#}");
    let compensating = row(&json, COMPENSATING);
    assert_eq!(compensating["action"], "leave");
    assert!(
        compensating["reason"]
            .as_str()
            .unwrap()
            .contains("compensating"),
        "{compensating:#}"
    );
    let unreadable = row(&json, UNREADABLE);
    assert_eq!(unreadable["action"], "quarantine");
    assert_eq!(unreadable["code"], "migration.failed");
    assert!(
        unreadable["reason"]
            .as_str()
            .unwrap()
            .contains("does not read as `Order` version 1"),
        "{unreadable:#}"
    );
    let no_chain = row(&json, NO_CHAIN);
    assert_eq!(no_chain["action"], "leave");
    assert!(
        no_chain["reason"]
            .as_str()
            .unwrap()
            .contains("no migration chain from version 0"),
        "{no_chain:#}"
    );

    assert_eq!(census(&db), before, "a dry run changed the store");
}

fn apply_migrates_each_run_once(new_db: fn() -> Db) {
    let db = new_db();
    let world = old_runs(&db);
    let before = census(&db);
    // A worker holds one run: the migration is fenced against it and leaves it.
    let lease = db.runtime.block_on(async {
        let store = store_of(&db).await;
        let Claimed { lease, .. } = store
            .claim_run(FRESH, "busy-worker", Duration::from_mins(1))
            .await
            .unwrap()
            .expect("claim");
        lease
    });

    let json = ctl_json(&db, &["migrate"]);
    assert_eq!(json["migrated"], true, "the schema part: {json:#}");
    let action = |run: &str| row(&json, run)["action"].as_str().unwrap().to_owned();
    assert_eq!(action(PAID_WAITING), "migrated");
    assert_eq!(action(INTERRUPTED), "migrated");
    assert_eq!(action(FRESH), "held");
    assert_eq!(action(COMPENSATING), "leave");
    assert_eq!(action(UNREADABLE), "quarantine");
    assert_eq!(action(NO_CHAIN), "leave");
    assert_eq!(row(&json, INTERRUPTED)["resume_base"], 0);

    db.runtime.block_on(async {
        let store = store_of(&db).await;
        store.release_lease(&lease).await.unwrap();
    });
    let again = ctl_ok(&db, &["migrate"]);
    assert!(again.contains("mig-fresh"), "{again}");
    assert!(
        again.contains("1 migrated, 2 left, 1 a worker would quarantine"),
        "{again}"
    );
    let third = ctl_json(&db, &["migrate"]);
    assert!(
        third["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["action"] != "migrated"),
        "a second migration of the same runs: {third:#}"
    );

    let after = census(&db);
    db.runtime.block_on(async {
        let store = store_of(&db).await;
        for (id, version, agent_version, status, transitions) in &before {
            let now = after.iter().find(|r| &r.0 == id).unwrap();
            let history = store.history(id).await.unwrap();
            let migrated = history
                .iter()
                .filter(|t| t.kind == TransitionKind::Migrated)
                .count();
            if [PAID_WAITING, INTERRUPTED, FRESH].contains(&id.as_str()) {
                assert_eq!(migrated, 1, "{id}: {history:#?}");
                assert_eq!(
                    (now.1, now.2, now.4),
                    (version + 1, 2, transitions + 1),
                    "{id}"
                );
                let record = store.load_run(id).await.unwrap().unwrap();
                let report = agent_core::store::verify::verify_run(store.as_ref(), &record)
                    .await
                    .unwrap();
                assert!(report.problem.is_none(), "{id}: {:?}", report.problem);
            } else {
                assert_eq!(migrated, 0, "{id}");
                assert_eq!(
                    (now.1, now.2, now.3, now.4),
                    (*version, *agent_version, *status, *transitions),
                    "{id} was touched"
                );
            }
        }
        let waiting = store.load_run(PAID_WAITING).await.unwrap().unwrap();
        assert_eq!(waiting.status, RunStatus::Waiting);
        assert_eq!(
            waiting.waiting_for,
            Some(agent_core::store::WaitingFor::signal("confirm"))
        );

        // The interrupted run goes on on version 2 from its carried-over journal: its
        // reservations are not made again.
        let v2 = Runner::<OrderV2, Behaviour>::builder(
            Arc::clone(&store),
            Behaviour,
            fixture::tools(&world),
        )
        .router(Arc::new(fixture::router("Pay")))
        .config(config("v2"))
        .build()
        .unwrap();
        let reserved = world.state().reserved.len();
        let record = v2.run(INTERRUPTED).await.unwrap();
        assert_eq!(
            (record.status, record.agent_version),
            (RunStatus::Waiting, OrderV2::VERSION)
        );
        assert_eq!(world.state().reserved.len(), reserved, "reserved again");
        assert!(world.state().executions.values().all(|n| *n == 1));
    });
    // The stock binary verifies the chains across the migrations.
    for id in [PAID_WAITING, INTERRUPTED, FRESH] {
        db.ok(&["verify", id]);
    }
}

fn the_stock_binary_has_no_code_but_migrates_the_schema(new_db: fn() -> Db) {
    let db = new_db();
    old_runs(&db);
    // A version 2 worker has registered its graph: version 1 runs are old.
    db.runtime.block_on(async {
        let store = store_of(&db).await;
        store.register_agent(OrderV2::graph()).await.unwrap();
    });
    let before = census(&db);
    for args in [&["migrate", "--dry-run"][..], &["migrate"]] {
        let out = db.agentctl(args);
        let text = ok(&out, &format!("agentctl {args:?}"));
        assert!(
            text.contains("is at this version's migrations"),
            "the schema part: {text}"
        );
        assert!(
            text.contains(
                "this binary has no code for agent `Order`: build a control binary with your \
                 agents (docs/versions.md)"
            ),
            "{text}"
        );
        assert!(text.contains("6 without code in this binary"), "{text}");
    }
    let json = db.json(&["migrate"]);
    assert!(
        json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["action"] == "no_code" && r["to_version"] == 2),
        "{json:#}"
    );
    assert_eq!(census(&db), before, "the stock binary changed runs");
}
