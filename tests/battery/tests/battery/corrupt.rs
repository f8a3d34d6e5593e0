//! Item 5: corrupted rows, on PostgreSQL and on SQLite (the embedded default). Runs are
//! advanced to a mid-run version by the real runner, their rows are edited with SQL in the
//! test's own schema or file, then a worker resumes them next to healthy runs. Expected:
//! detection before any tool call, a final status with a typed error code (or a
//! `StoreError::Corrupt`), the healthy runs served, and no false positive over many clean
//! resumes. Each test runs once per backend (`postgres` and `sqlite` in its module); the
//! SQL edits are written to mean the same on both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_conformance::fixture::{self, World};
use agent_core::runner::{Worker, WorkerConfig};
use agent_core::store::{RunFilter, RunRecord, RunStatus, Store, StoreError};
use battery::backends::{Backend, Fresh};
use battery::order::{self, advance};
use battery::{CallLog, RandomCrash, pass, probe_all, size};
use serde_json::json;

const LEASE: Duration = Duration::from_millis(400);

/// One corruption: a run advanced `steps` steps, then `sql` applied with the run id as `$1`.
struct Case {
    id: &'static str,
    steps: usize,
    sql: &'static str,
    /// What must come out: a final status with this code.
    expect: Expect,
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Quarantined(&'static str),
    /// Any final status with a typed code, or a `StoreError::Corrupt` on load.
    Refused,
}

/// The store under test, with raw SQL access to its tables.
struct Db(Fresh);

impl Db {
    /// Run `sql` with `run_id` as `$1`; panics with the statement on error.
    async fn exec(&self, sql: &str, run_id: &str) {
        self.try_exec(sql, run_id)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Run `sql` with `run_id` as `$1`, returning the database's error if any.
    async fn try_exec(&self, sql: &str, run_id: &str) -> Result<(), sqlx::Error> {
        let q = sqlx::AssertSqlSafe(sql);
        match (self.0.postgres(), self.0.sqlite()) {
            (Some(s), _) => sqlx::query(q)
                .bind(run_id)
                .execute(s.pool())
                .await
                .map(drop),
            (_, Some(s)) => sqlx::query(q)
                .bind(run_id)
                .execute(s.pool())
                .await
                .map(drop),
            _ => unreachable!("a corrupted-row test runs on a SQL store"),
        }
    }

    /// A run row's status and error code, read with SQL (bypassing the store's decoding).
    async fn status_row(&self, run_id: &str) -> (String, Option<String>) {
        let sql = "SELECT status, error_code FROM runs WHERE id = $1";
        match (self.0.postgres(), self.0.sqlite()) {
            (Some(s), _) => sqlx::query_as(sql).bind(run_id).fetch_one(s.pool()).await,
            (_, Some(s)) => sqlx::query_as(sql).bind(run_id).fetch_one(s.pool()).await,
            _ => unreachable!("a corrupted-row test runs on a SQL store"),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn finish(self) {
        self.0.finish().await;
    }
}

struct Env {
    db: Db,
    dyn_store: Arc<dyn Store>,
    world: Arc<World>,
}

/// A fresh store of `backend` (PostgreSQL or SQLite); `None` (the test returns) when
/// PostgreSQL is not available outside CI (see `battery::pg`).
async fn env(backend: Backend) -> Option<Env> {
    let fresh = Fresh::open(backend).await?;
    Some(Env {
        dyn_store: Arc::clone(&fresh.store),
        db: Db(fresh),
        world: Arc::new(World::default()),
    })
}

/// Each test body once per backend: `name::postgres` and `name::sqlite`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::{Backend, env};

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(env) = env(Backend::Postgres).await {
                    super::$name(env).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(env(Backend::Sqlite).await.expect("SQLite needs no setup")).await;
            }
        }
    )*};
}

on_both_backends!(
    corrupt_state_rows_are_quarantined_before_any_tool_call,
    version_regression_is_refused,
    version_gap_is_refused,
    duplicate_versions_are_refused_by_the_schema,
    unreadable_row_does_not_starve_the_worker,
    no_false_positives_over_clean_resumes,
    listing_survives_an_unreadable_row,
);

/// Start `n` healthy runs whose confirmation is already sent (they complete).
async fn healthy(env: &Env, prefix: &str, n: usize) -> Vec<String> {
    let r = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("starter", LEASE),
    );
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        r.start(&id, fixture::initial(&["a", "bb"])).await.unwrap();
        r.signal(&id, "confirm", json!({"ok": true})).await.unwrap();
        ids.push(id);
    }
    ids
}

/// Advance each case's run with a runner of its own, corrupt it, then let one worker
/// resume everything. Returns the log of the worker's tool executions.
async fn corrupt_and_resume(env: &Env, cases: &[Case], healthy_ids: &[String]) -> Arc<CallLog> {
    let setup = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("setup", LEASE),
    );
    for case in cases {
        setup
            .start(case.id, fixture::initial(&["a", "bb"]))
            .await
            .unwrap();
        let r = advance(&setup, case.id, case.steps).await.unwrap();
        assert_eq!(r.status, RunStatus::Running, "{}: {r:?}", case.id);
        env.db.exec(case.sql, case.id).await;
    }
    let log = CallLog::new();
    let runner = order::runner(
        &env.dyn_store,
        probe_all(&order::tools(&env.world), &log, &pass()),
        Arc::new(fixture::router("Pay")),
        order::config("resumer", LEASE),
    );
    let worker = Worker::new(
        runner,
        WorkerConfig {
            concurrency: 8,
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        },
    );
    let stats = tokio::time::timeout(Duration::from_mins(1), worker.run_until_idle())
        .await
        .expect("the worker went idle");
    eprintln!("worker: {stats:?}");
    // A detected corruption ends in a quarantine under the worker's lease, at the first
    // claim: no failed round, no run claimed again.
    assert_eq!(stats.errors, 0, "worker errors while resuming: {stats:?}");
    for id in healthy_ids {
        let r = env.dyn_store.load_run(id).await.unwrap().unwrap();
        assert_eq!(
            r.status,
            RunStatus::Completed,
            "healthy run {id} was not served: {r:?}"
        );
    }
    log
}

/// Check each case's outcome; returns the failures (empty when all detected).
async fn verdicts(env: &Env, cases: &[Case], log: &CallLog) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        let calls = log.calls_of(case.id);
        let outcome = env.dyn_store.load_run(case.id).await;
        let line = match (&outcome, case.expect) {
            (Ok(Some(r)), Expect::Quarantined(code)) => (r.status == RunStatus::Quarantined
                && r.error.as_ref().is_some_and(|e| e.code == code))
            .then_some(())
            .ok_or_else(|| describe(r)),
            (Ok(Some(r)), Expect::Refused) => {
                (r.status.is_final() && r.status != RunStatus::Completed && r.error.is_some())
                    .then_some(())
                    .ok_or_else(|| describe(r))
            }
            (Err(StoreError::Corrupt { .. }), Expect::Refused) => Ok(()),
            (other, _) => Err(format!("{other:?}")),
        };
        eprintln!(
            "{:<22} {:?}: {} ; tool calls after corruption: {}",
            case.id,
            case.expect,
            match &line {
                Ok(()) => format!(
                    "detected ({})",
                    outcome
                        .as_ref()
                        .ok()
                        .and_then(Option::as_ref)
                        .and_then(|r| r.error.as_ref())
                        .map_or_else(|| "StoreError::Corrupt".to_owned(), |e| e.code.to_string())
                ),
                Err(e) => format!("NOT detected: {e}"),
            },
            calls.len()
        );
        if let Err(e) = line {
            failures.push(format!("{}: {e}", case.id));
        }
        if !calls.is_empty() {
            failures.push(format!(
                "{}: {} tool call(s) after the corruption: {:?}",
                case.id,
                calls.len(),
                calls.iter().map(|c| &c.tool).collect::<Vec<_>>()
            ));
        }
    }
    failures
}

fn describe(r: &RunRecord) -> String {
    format!(
        "status {} at v{} in `{}`, error {:?}",
        r.status, r.version, r.state_name, r.error
    )
}

/// Garbage state JSON and unknown state names: quarantined with `state.corrupt` or
/// `graph.incompatible` before any tool call; healthy runs next to them complete.
async fn corrupt_state_rows_are_quarantined_before_any_tool_call(env: Env) {
    let cases = [
        Case {
            id: "wrong-shape",
            steps: 1,
            sql: r#"UPDATE runs SET state = '{"Decide": {"items": 5}}' WHERE id = $1"#,
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "scalar-state",
            steps: 2,
            sql: r#"UPDATE runs SET state = '"garbage"' WHERE id = $1"#,
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "null-state",
            steps: 0,
            sql: "UPDATE runs SET state = 'null' WHERE id = $1",
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "extra-variant",
            steps: 2,
            sql: r#"UPDATE runs SET state = '{"Pay": {"cents": 1}, "Done": {"payment_id": "x"}}' WHERE id = $1"#,
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "unknown-name",
            steps: 1,
            sql: "UPDATE runs SET state_name = 'Bogus' WHERE id = $1",
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "unknown-name-data",
            steps: 1,
            sql: r#"UPDATE runs SET state_name = 'Bogus', state = '{"Bogus": {}}' WHERE id = $1"#,
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "name-disagrees",
            steps: 1,
            sql: "UPDATE runs SET state_name = 'Pay' WHERE id = $1",
            expect: Expect::Quarantined("state.corrupt"),
        },
        Case {
            id: "gone-state-old-graph",
            steps: 1,
            sql: r#"UPDATE runs SET state_name = 'Review', state = '{"Review": {}}', fingerprint = 'old' WHERE id = $1"#,
            expect: Expect::Quarantined("graph.incompatible"),
        },
    ];
    let healthy_ids = healthy(&env, "healthy", size(20, 200)).await;
    let log = corrupt_and_resume(&env, &cases, &healthy_ids).await;
    let failures = verdicts(&env, &cases, &log).await;
    env.db.finish().await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `runs.version` moved back below the last committed transition (a restored backup, a
/// careless edit). Expected: refused before any tool call.
async fn version_regression_is_refused(env: Env) {
    let cases = [
        Case {
            id: "regressed-by-one",
            steps: 2,
            sql: "UPDATE runs SET version = version - 1 WHERE id = $1",
            expect: Expect::Refused,
        },
        Case {
            id: "regressed-to-zero",
            steps: 2,
            sql: "UPDATE runs SET version = 0 WHERE id = $1",
            expect: Expect::Refused,
        },
    ];
    let healthy_ids = healthy(&env, "healthy", 10).await;
    let log = corrupt_and_resume(&env, &cases, &healthy_ids).await;
    let failures = verdicts(&env, &cases, &log).await;
    // What a direct resume says, for the report.
    let direct = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("direct", LEASE),
    );
    tokio::time::sleep(LEASE).await;
    eprintln!("direct resume: {:?}", direct.run("regressed-by-one").await);
    env.db.finish().await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A gap in the version chain: `runs.version` ahead of the last transition, or a
/// transition row deleted. Expected: refused before any tool call.
async fn version_gap_is_refused(env: Env) {
    let cases = [
        Case {
            id: "version-jumped",
            steps: 2,
            sql: "UPDATE runs SET version = version + 5 WHERE id = $1",
            expect: Expect::Refused,
        },
        Case {
            id: "transition-deleted",
            steps: 2,
            sql: "DELETE FROM transitions WHERE run_id = $1 AND version = 1",
            expect: Expect::Refused,
        },
    ];
    let healthy_ids = healthy(&env, "healthy", 10).await;
    let log = corrupt_and_resume(&env, &cases, &healthy_ids).await;
    let failures = verdicts(&env, &cases, &log).await;
    env.db.finish().await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A duplicate version cannot be written: the primary keys of `transitions` and `journal`
/// refuse it (unique violation), whatever the writer.
async fn duplicate_versions_are_refused_by_the_schema(env: Env) {
    let r = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("setup", LEASE),
    );
    r.start("dup", fixture::initial(&["a"])).await.unwrap();
    advance(&r, "dup", 2).await.unwrap();
    let dup_transition = env
        .db
        .try_exec(
            "INSERT INTO transitions SELECT * FROM transitions WHERE run_id = $1 AND version = 1",
            "dup",
        )
        .await;
    let dup_entry = env
        .db
        .try_exec(
            "INSERT INTO journal (run_id, version, seq, kind, state, name, tool_kind, input_hash, \
         input, idempotency_key, status, output, output_external, output_summary, output_bytes, \
         error_class, error_code, error_message, attempts, duration_ms, started_at, finished_at) \
         SELECT run_id, version, seq, kind, state, name, tool_kind, input_hash, input, \
         idempotency_key, status, output, output_external, output_summary, output_bytes, \
         error_class, error_code, error_message, attempts, duration_ms, started_at, finished_at \
         FROM journal WHERE run_id = $1 AND version = 0 AND seq = 0",
            "dup",
        )
        .await;
    env.db.finish().await;
    for (what, result) in [("transition", dup_transition), ("journal entry", dup_entry)] {
        match result {
            Err(sqlx::Error::Database(db)) => assert_eq!(
                db.kind(),
                sqlx::error::ErrorKind::UniqueViolation,
                "duplicate {what}: {db}"
            ),
            other => panic!("duplicate {what} was not refused: {other:?}"),
        }
    }
}

/// A row the store cannot even read (a negative version) at the head of the queue: it
/// surfaces as `StoreError::Corrupt` and must not keep the worker from the other runs.
async fn unreadable_row_does_not_starve_the_worker(env: Env) {
    let setup = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("setup", LEASE),
    );
    setup
        .start("unreadable", fixture::initial(&["a"]))
        .await
        .unwrap();
    advance(&setup, "unreadable", 1).await.unwrap();
    env.db
        .exec("UPDATE runs SET version = -1 WHERE id = $1", "unreadable")
        .await;
    let load = env.dyn_store.load_run("unreadable").await;
    assert!(
        matches!(load, Err(StoreError::Corrupt { .. })),
        "load of an unreadable row: {load:?}"
    );
    let healthy_ids = healthy(&env, "healthy", 10).await;
    // One claim of a batch holding the unreadable row (the oldest run).
    let batch = env
        .dyn_store
        .claim_next(&["Order".to_owned()], "prober", LEASE, 4)
        .await;
    let batch_ok = batch.is_ok();
    eprintln!(
        "claim_next with the unreadable row in the batch: {}",
        match &batch {
            Ok(b) => format!("{} runs claimed", b.len()),
            Err(e) => format!("error {e}"),
        }
    );
    tokio::time::sleep(LEASE).await;
    let runner = order::runner(
        &env.dyn_store,
        order::tools(&env.world),
        Arc::new(fixture::router("Pay")),
        order::config("resumer", LEASE),
    );
    let worker = Worker::new(
        runner,
        WorkerConfig {
            concurrency: 8,
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        },
    );
    let shutdown = tokio::time::sleep(Duration::from_secs(5));
    let stats = worker.run_until(shutdown).await;
    let mut served = 0;
    for id in &healthy_ids {
        if env.dyn_store.load_run(id).await.unwrap().unwrap().status == RunStatus::Completed {
            served += 1;
        }
    }
    let listing = env.dyn_store.list_runs(&RunFilter::default()).await;
    let row = env.db.status_row("unreadable").await;
    eprintln!("the unreadable row: status {}, code {:?}", row.0, row.1);
    env.db.finish().await;
    eprintln!(
        "worker {stats:?}; healthy runs served {served}/{}; list_runs: {}",
        healthy_ids.len(),
        match &listing {
            Ok(l) => format!("{} runs", l.len()),
            Err(e) => format!("error {e}"),
        }
    );
    assert!(
        batch_ok,
        "one unreadable row failed the whole claim_next batch"
    );
    assert_eq!(served, healthy_ids.len(), "healthy runs starved");
}

/// Zero false positives: many runs of the three scenarios resumed step by step (a claim,
/// one step, a release), with crashes injected at random fault points so resumes also
/// replay half-done steps. No run may end quarantined or dead-lettered.
async fn no_false_positives_over_clean_resumes(env: Env) {
    let runs = size(120, 1500);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let lanes = 8;
    for lane in 0..lanes {
        let store = Arc::clone(&env.dyn_store);
        tasks.spawn(async move {
            let mut resumes = 0u64;
            let mut crashes = 0u64;
            let mut bad = Vec::new();
            for i in (lane..runs).step_by(lanes) {
                let world = Arc::new(World::default());
                let choice = match i % 3 {
                    0 => "Pay",
                    1 => "Cancelled",
                    _ => {
                        world.configure(|w| w.fail_charges = true);
                        "Pay"
                    }
                };
                let hook = Arc::new(RandomCrash::new(0.04, i as u64));
                let r = order::runner_with(
                    &store,
                    order::tools(&world),
                    Arc::new(fixture::router(choice)),
                    agent_core::runner::RunnerConfig {
                        max_claims_without_progress: 1_000,
                        ..order::config(&format!("lane-{lane}"), LEASE)
                    },
                    hook.clone(),
                );
                let id = format!("clean-{i}");
                r.start(&id, fixture::initial(&["a", "bb", "ccc"]))
                    .await
                    .unwrap();
                r.signal(&id, "confirm", json!({"ok": true})).await.unwrap();
                let record = loop {
                    resumes += 1;
                    match advance(&r, &id, 1).await {
                        Ok(rec) if rec.status.is_final() => break rec,
                        Ok(_) => {}
                        Err(e) if e.contains("crash injected") => {}
                        Err(e) => panic!("{id}: {e}"),
                    }
                    assert!(resumes < 1_000_000, "{id} does not finish");
                };
                crashes += hook.fired();
                let expected = if choice == "Pay" && i % 3 == 0 {
                    RunStatus::Completed
                } else {
                    RunStatus::Compensated
                };
                if record.status != expected {
                    bad.push(format!("{id}: {}", describe(&record)));
                }
            }
            (resumes, crashes, bad)
        });
    }
    let (mut resumes, mut crashes, mut bad) = (0, 0, Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (r, c, b) = done.unwrap();
        resumes += r;
        crashes += c;
        bad.extend(b);
    }
    let quarantined = env
        .dyn_store
        .list_runs(&RunFilter {
            statuses: vec![RunStatus::Quarantined, RunStatus::DeadLettered],
            ..RunFilter::default()
        })
        .await
        .unwrap()
        .len();
    env.db.finish().await;
    eprintln!(
        "FIGURE item5 clean resumes: runs={runs} resumes={resumes} injected_crashes={crashes} \
         false_positives={quarantined} wrong_outcomes={} elapsed={:.1}s",
        bad.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(quarantined, 0, "false positives");
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Listing runs with one undecodable row among them: the other runs are listed (the bad
/// one reported or skipped), not an error for the whole listing (`agentctl` lists break).
async fn listing_survives_an_unreadable_row(env: Env) {
    healthy(&env, "listed", 3).await;
    env.db
        .exec("UPDATE runs SET version = -1 WHERE id = $1", "listed-0")
        .await;
    let listing = env.dyn_store.list_runs(&RunFilter::default()).await;
    env.db.finish().await;
    let listed = listing.expect("list_runs with one unreadable row");
    assert!(listed.len() >= 2, "{listed:?}");
}
