//! The operator's verbs cannot trap a run or lose data: a signal no handler accepts is
//! dropped with who and why, any stopped run can be closed out, and the chains the framework
//! writes verify. Each case on SQLite, and on PostgreSQL when one is configured.

mod common;

use std::sync::Arc;

use agent_conformance::fixture::{self, Behaviour, Confirmation, Order, OrderHandlers, order};
use agent_core::runner::Runner;
use agent_core::store::RunStatus;
use agent_core::{Ctx, StepResult, Wake};
use common::{DONE, Db, STUCK};
use serde_json::{Value, json};

/// The fixture's handlers, but `confirm` reads its payload as a [`Confirmation`] and
/// fails the step when it is not one (as a handler of a real agent does).
#[derive(Debug, Clone, Copy)]
struct Strict;

impl OrderHandlers for Strict {
    async fn start(
        &self,
        ctx: Ctx<'_, order::Start>,
        state: order::Start,
    ) -> StepResult<order::Start> {
        Behaviour.start(ctx, state).await
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, order::Decide>,
        route: order::DecideRoute,
        state: order::Decide,
    ) -> StepResult<order::Decide> {
        Behaviour.decide(ctx, route, state).await
    }

    async fn pay(&self, ctx: Ctx<'_, order::Pay>, state: order::Pay) -> StepResult<order::Pay> {
        Behaviour.pay(ctx, state).await
    }

    async fn confirm(
        &self,
        ctx: Ctx<'_, order::Confirm>,
        wake: Wake,
        state: order::Confirm,
    ) -> StepResult<order::Confirm> {
        let _: Confirmation = wake.payload()?;
        Behaviour.confirm(ctx, wake, state).await
    }
}

/// The run each case drives into the trap.
const TRAPPED: &str = "order-trapped";

fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The ids of the run's pending signals, as `agentctl show --json` lists them.
fn pending(db: &Db, run: &str) -> Vec<i64> {
    db.json(&["show", run])["pending_signals"]
        .as_array()
        .expect("pending_signals")
        .iter()
        .map(|s| s["id"].as_i64().expect("id"))
        .collect()
}

fn strict_runner(db: &Db) -> Runner<Order, Strict> {
    let world = Arc::new(fixture::World::default());
    let store = db.runtime.block_on(db.store());
    Runner::builder(store, Strict, fixture::tools(&world))
        .router(Arc::new(fixture::router("Pay")))
        .build()
        .expect("runner")
}

/// Drive `run` with the strict runner until it waits or stops; its status after.
fn drive(db: &Db, run: &str) -> RunStatus {
    let r = strict_runner(db);
    db.runtime
        .block_on(async { r.run(run).await.expect("run").status })
}

/// A new order of nothing (so its failure has nothing to compensate: it ends failed),
/// waiting for its confirmation; with a signal sent to it, straight to the store (as one of
/// an older client, or one sent before the payload type changed, reaches it).
fn waiting_with_signal(db: &Db, run: &str, payload: &Value) -> i64 {
    let r = strict_runner(db);
    db.runtime.block_on(async {
        r.start(run, fixture::initial(&[])).await.expect("start");
        let waiting = r.run(run).await.expect("run");
        assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
        db.store()
            .await
            .send_signal(run, "confirm", payload)
            .await
            .expect("send")
    })
}

/// The trap: a signal whose payload the handler rejects fails the run, and `retry` reads
/// the same signal and fails again. Dropping it (audited, in the history and the verified
/// chain) and retrying puts the run back to waiting, and a correct signal completes it.
fn a_rejected_signal_is_dropped_and_the_run_resumes(new_db: fn() -> Db) {
    let db = new_db();
    let bad = waiting_with_signal(&db, TRAPPED, &json!({ "ok": "not a bool" }));
    assert_eq!(drive(&db, TRAPPED), RunStatus::Failed);
    db.ok(&["retry", TRAPPED]);
    assert_eq!(
        drive(&db, TRAPPED),
        RunStatus::Failed,
        "retrying reads the same signal"
    );
    assert_eq!(pending(&db, TRAPPED), vec![bad]);
    let shown = db.ok(&["show", TRAPPED]);
    assert!(shown.contains("agentctl drop-signal"), "{shown}");

    let missing = db.agentctl(&[
        "drop-signal",
        TRAPPED,
        "999999",
        "--reason",
        "x",
        "--by",
        "ops",
    ]);
    assert_eq!(code(&missing), 1);
    assert!(
        stderr(&missing).contains("no pending signal #999999"),
        "{}",
        stderr(&missing)
    );
    let no_reason = db.agentctl(&["drop-signal", TRAPPED, &bad.to_string(), "--by", "ops"]);
    assert_eq!(code(&no_reason), 2, "{}", stderr(&no_reason));

    let before = db.json(&["show", TRAPPED])["run"]["version"]
        .as_u64()
        .unwrap();
    let dropped = db.json(&[
        "drop-signal",
        TRAPPED,
        &bad.to_string(),
        "--reason",
        "ok must be a bool",
        "--by",
        "ops",
    ]);
    assert_eq!(dropped["status"], "failed", "{dropped}");
    assert_eq!(dropped["version"], before + 1, "{dropped}");
    assert!(pending(&db, TRAPPED).is_empty());
    let shown = db.json(&["show", TRAPPED]);
    let last = shown["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "signal_dropped", "{last}");
    assert_eq!(last["note"]["by"], "ops");
    assert_eq!(
        last["note"]["reason"],
        format!("dropped signal #{bad} `confirm`: ok must be a bool")
    );
    let text = db.ok(&["show", TRAPPED]);
    assert!(text.contains("signal_dropped"), "{text}");
    db.ok(&["verify", TRAPPED]);

    db.ok(&["retry", TRAPPED]);
    assert_eq!(drive(&db, TRAPPED), RunStatus::Waiting);
    db.ok(&["signal", TRAPPED, "confirm", r#"{"ok": true}"#]);
    assert_eq!(drive(&db, TRAPPED), RunStatus::Completed);
    db.ok(&["verify", TRAPPED]);
}

/// A failed run is closed out by `terminate` (`cancel` refuses it, saying so), as a
/// dead-lettered one is; a completed run is still refused.
fn a_failed_run_is_closed_out(new_db: fn() -> Db) {
    let db = new_db();
    waiting_with_signal(&db, TRAPPED, &json!({ "ok": 3 }));
    assert_eq!(drive(&db, TRAPPED), RunStatus::Failed);
    let cancel = db.agentctl(&["cancel", TRAPPED, "--by", "ops"]);
    assert_eq!(code(&cancel), 1);
    assert!(
        stderr(&cancel).contains("agentctl terminate order-trapped"),
        "{}",
        stderr(&cancel)
    );
    for run in [TRAPPED, STUCK] {
        let closed = db.json(&["terminate", run, "--reason", "give up", "--by", "ops"]);
        assert_eq!(closed["status"], "terminated", "{closed}");
        assert_eq!(closed["changed"], true, "{closed}");
        let history = db.json(&["show", run])["history"].clone();
        let last = history.as_array().unwrap().last().unwrap();
        assert_eq!(last["kind"], "terminate", "{last}");
        assert_eq!(last["note"]["reason"], "give up", "{last}");
        db.ok(&["verify", run]);
        let again = db.ok(&["terminate", run, "--reason", "again", "--by", "ops"]);
        assert!(again.contains("already terminated"), "{again}");
    }
    let done = db.agentctl(&["terminate", DONE, "--reason", "x", "--by", "ops"]);
    assert_eq!(code(&done), 1);
    assert!(stderr(&done).contains("is completed"), "{}", stderr(&done));
    let shown: Value = db.json(&["show", DONE]);
    assert_eq!(shown["run"]["status"], "completed");
}

/// A run whose stored state is valid JSON of the wrong shape (a hand edit of the run row)
/// is quarantined by the framework without a version of its own: `verify` then blames the
/// edited row, not a version of the chain, and once `repair` puts the row back the chain
/// verifies, as it does after the run completes.
fn a_quarantine_for_a_wrong_shape_verifies(new_db: fn() -> Db) {
    let db = new_db();
    let r = strict_runner(&db);
    db.runtime.block_on(async {
        r.start(TRAPPED, fixture::initial(&[]))
            .await
            .expect("start");
        let waiting = r.run(TRAPPED).await.expect("run");
        assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
    });
    let version = db.json(&["show", TRAPPED])["run"]["version"]
        .as_u64()
        .unwrap();
    db.ok(&["verify", TRAPPED]);
    let wrong = if db.pg.is_some() {
        r#"'{"Confirm": {"payment_id": 7}}'::jsonb"#
    } else {
        r#"'{"Confirm": {"payment_id": 7}}'"#
    };
    db.sql(&[&format!(
        "UPDATE runs SET state = {wrong} WHERE id = '{TRAPPED}'"
    )]);
    db.ok(&["signal", TRAPPED, "confirm", r#"{"ok": true}"#]);
    assert_eq!(drive(&db, TRAPPED), RunStatus::Quarantined);
    let shown = db.json(&["show", TRAPPED]);
    assert_eq!(shown["run"]["error"]["code"], "state.corrupt", "{shown}");
    assert_eq!(
        shown["run"]["version"], version,
        "no version for the quarantine"
    );
    let verified = db.agentctl(&["verify", TRAPPED]);
    let said = String::from_utf8_lossy(&verified.stdout).into_owned() + &stderr(&verified);
    assert_eq!(code(&verified), 1, "{said}");
    assert!(
        said.contains("the run row's current state differs from the state committed at version"),
        "verify must blame the edited row:\n{said}"
    );
    db.ok(&[
        "repair",
        TRAPPED,
        "--to",
        &version.to_string(),
        "--reason",
        "hand edit",
        "--by",
        "ops",
    ]);
    db.ok(&["verify", TRAPPED]);
    assert_eq!(drive(&db, TRAPPED), RunStatus::Completed);
    db.ok(&["verify", TRAPPED]);
}

/// The number of runs the store holds, read through the CLI.
fn run_count(db: &Db) -> usize {
    db.json(&["runs"]).as_array().expect("runs").len()
}

/// `backup --force` never replaces the store itself, by any name, nor a database another
/// process has open; the store is untouched after each refusal, and an unrelated file is
/// still replaced. On PostgreSQL, `backup` only names the `pg_dump` command and writes
/// nothing.
fn backup_refuses_the_store_and_files_in_use(new_db: fn() -> Db) {
    let db = new_db();
    let runs = run_count(&db);
    let dir = db.path.parent().unwrap().to_owned();
    let outside = tempfile::tempdir().unwrap();
    let plain = outside.path().join("old-backup.sqlite3");
    std::fs::write(&plain, b"an old backup").unwrap();
    if db.pg.is_some() {
        let out = db.agentctl(&["backup", plain.to_str().unwrap(), "--force"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(stderr(&out).contains("pg_dump"), "{}", stderr(&out));
        assert_eq!(std::fs::read(&plain).unwrap(), b"an old backup");
        assert_eq!(run_count(&db), runs);
        return;
    }
    // A worker has the store open while the operator types the wrong destination.
    let worker = db
        .runtime
        .block_on(agent_sqlite::SqliteStore::open(&db.path))
        .expect("worker open");
    let name = db.path.file_name().unwrap().to_str().unwrap().to_owned();
    let symlink = outside.path().join("link.sqlite3");
    std::os::unix::fs::symlink(&db.path, &symlink).unwrap();
    let hard = dir.join("hard.sqlite3");
    std::fs::hard_link(&db.path, &hard).unwrap();
    let dotted = dir.join(".").join(&name);
    let wal = dir.join(format!("{name}-wal"));
    let shm = dir.join(format!("{name}-shm"));
    let lock = dir.join(format!("{name}.lock"));
    for (dest, said) in [
        (&db.path, "the database file"),
        (&dotted, "the database file"),
        (&symlink, "the database file"),
        (&hard, "the database file"),
        (&wal, "the write-ahead log"),
        (&shm, "the shared-memory file"),
        (&lock, "the lock file"),
    ] {
        for force in [false, true] {
            let mut args = vec!["backup", dest.to_str().unwrap()];
            if force {
                args.push("--force");
            }
            let out = db.agentctl(&args);
            assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(&format!("is {said} of the store being backed up")),
                "{args:?}: {}",
                stderr(&out)
            );
        }
    }
    db.runtime.block_on(worker.close());
    std::fs::remove_file(&hard).unwrap();
    assert_eq!(run_count(&db), runs, "the store is untouched");
    db.ok(&["verify", "--all"]);

    // Another store a worker has open, and a database with a log beside it.
    let other = outside.path().join("other.sqlite3");
    let other_worker = db
        .runtime
        .block_on(agent_sqlite::SqliteStore::open(&other))
        .expect("open another store");
    let out = db.agentctl(&["backup", other.to_str().unwrap(), "--force"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a running worker has open"),
        "{}",
        stderr(&out)
    );
    db.runtime.block_on(other_worker.close());
    let logged = outside.path().join("logged.sqlite3");
    std::fs::write(&logged, b"a database").unwrap();
    std::fs::write(outside.path().join("logged.sqlite3-wal"), b"its log").unwrap();
    let out = db.agentctl(&["backup", logged.to_str().unwrap(), "--force"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("in use"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&logged).unwrap(), b"a database");

    // An unrelated file is replaced, as before.
    let out = db.ok(&["backup", plain.to_str().unwrap(), "--force"]);
    assert!(out.contains(&format!("backed up {runs} runs")), "{out}");
}

/// `agentctl migrate` into a database that already holds another application's table
/// under a name the store's first migration creates: it fails, and leaves the database as
/// it found it (no migrations table, none of the tables created before the failure).
fn a_failed_migrate_leaves_nothing_behind(new_db: fn() -> Db) {
    use sqlx::Connection;
    let db = new_db();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentctl"));
    cmd.env_remove("DATABASE_URL")
        .env_remove("AGENT_DB")
        .env_remove("AGENT_PG_SCHEMA")
        .env("NO_COLOR", "1");
    let objects = if let Some((url, schema)) = &db.pg {
        let theirs = format!("{schema}_theirs");
        let list = format!(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n \
             ON n.oid = c.relnamespace WHERE n.nspname = '{theirs}' ORDER BY 1"
        );
        db.runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            for s in [
                format!("CREATE SCHEMA {theirs}"),
                format!("CREATE TABLE {theirs}.transitions (theirs int)"),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(s))
                    .execute(&mut conn)
                    .await
                    .expect("their schema");
            }
        });
        cmd.args(["--database-url", url, "--pg-schema", &theirs, "migrate"]);
        let out = cmd.output().expect("run agentctl");
        assert_ne!(code(&out), 0, "{}", stderr(&out));
        let objects = db.runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            let objects: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(list))
                .fetch_all(&mut conn)
                .await
                .expect("list");
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {theirs} CASCADE")))
                .execute(&mut conn)
                .await
                .expect("drop");
            objects
        });
        (objects, stderr(&out))
    } else {
        let theirs = db.path.with_file_name("theirs.sqlite3");
        let url = format!("sqlite://{}?mode=rwc", theirs.display());
        let list = "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 1";
        db.runtime.block_on(async {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("create");
            sqlx::query("CREATE TABLE transitions (theirs int)")
                .execute(&mut conn)
                .await
                .expect("their table");
            conn.close().await.expect("close");
        });
        cmd.args(["--db", theirs.to_str().unwrap(), "migrate"]);
        let out = cmd.output().expect("run agentctl");
        assert_ne!(code(&out), 0, "{}", stderr(&out));
        let objects = db.runtime.block_on(async {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
            let objects: Vec<String> = sqlx::query_scalar(list)
                .fetch_all(&mut conn)
                .await
                .expect("list");
            conn.close().await.expect("close");
            objects
        });
        (objects, stderr(&out))
    };
    let (objects, said) = objects;
    assert!(said.contains("transitions"), "{said}");
    assert_eq!(objects, ["transitions"], "a failed migrate wrote: {said}");
}

/// Holds the first tool call of run `run` until released: a child mid-step.
#[derive(Debug)]
struct Gate {
    run: String,
    entered: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl agent_core::runner::FaultHook for Gate {
    fn check(
        &self,
        point: agent_core::runner::FaultPoint,
        run_id: &str,
        _: u64,
    ) -> Result<(), agent_core::runner::Crash> {
        if point == agent_core::runner::FaultPoint::ToolSent && run_id == self.run {
            let _ = self.entered.lock().unwrap().send(());
            // Held once: the next calls (the compensation) go through.
            let _ = self.release.lock().unwrap().recv();
        }
        Ok(())
    }
}

/// Cancelling a parent that waits for its children stops a child that is in the middle of
/// a step: the cancel reaches the child in the same write, so the child's step is never
/// committed (its reservation is compensated) and it ends cancelled, its cancel naming
/// the parent.
fn cancelling_a_parent_stops_its_running_child(new_db: fn() -> Db) {
    use agent_conformance::fixture::{Batch, BatchBehaviour, Fanout, FanoutBehaviour};
    let db = new_db();
    let world = Arc::new(fixture::World::default());
    let parent = "batch-1";
    let child = agent_core::runner::child_run_id(parent, 0, 0);
    let store = db.runtime.block_on(db.store());
    let parents = Runner::<Batch, BatchBehaviour>::new(
        Arc::clone(&store),
        BatchBehaviour,
        fixture::tools(&world),
    )
    .expect("runner");
    db.runtime.block_on(async {
        parents
            .start(
                parent,
                Batch::Splitting {
                    orders: vec![vec!["apple".to_owned()]],
                    first: false,
                },
            )
            .await
            .expect("start");
        let waiting = parents.run(parent).await.expect("run the parent");
        assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
    });
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let gate = Arc::new(Gate {
        run: child.clone(),
        entered: std::sync::Mutex::new(entered_tx),
        release: std::sync::Mutex::new(release_rx),
    });
    let children = Runner::<Fanout, FanoutBehaviour>::builder(
        Arc::clone(&store),
        FanoutBehaviour,
        fixture::tools(&world),
    )
    .faults(gate)
    .build()
    .expect("runner");
    let child_id = child.clone();
    let child_runner = children.clone();
    // The child's worker, on a thread of its own: the gate blocks it mid-step. It drives
    // its future on the test's runtime (not a runtime of its own), because the store's
    // pooled connections belong to the runtime that opened them: one opened on a runtime
    // dropped with this thread would fail the next use with "runtime is being shutdown".
    let handle = db.runtime.handle().clone();
    let worker = std::thread::spawn(move || {
        handle.block_on(async { child_runner.run(&child_id).await.map(|r| r.status) })
    });
    entered.recv().expect("the child reaches its tool call");
    db.ok(&["cancel", parent, "--reason", "customer left", "--by", "ops"]);
    release.send(()).expect("release the child");
    let _ = worker.join().expect("the child's worker");
    // Whatever the worker did (took the cancel, or was fenced out), a worker finishes it.
    let ended = db
        .runtime
        .block_on(async { children.run(&child).await.expect("finish the child") });
    assert_eq!(ended.status, RunStatus::Cancelled, "{ended:?}");
    let shown = db.json(&["show", &child]);
    let history = shown["history"].as_array().unwrap();
    assert!(
        history.iter().all(|t| t["to_state"] != "Reserved"),
        "the child committed its step after its parent's cancel: {history:?}"
    );
    let cancel = history
        .iter()
        .find(|t| t["kind"] == "cancel")
        .expect("a cancel transition");
    assert_eq!(cancel["note"]["by"], "ops", "{cancel}");
    assert_eq!(
        cancel["note"]["reason"],
        format!("its parent `{parent}` was cancelled: customer left"),
        "{cancel}"
    );
    let state = world.state();
    assert_eq!(
        state.released, state.reserved,
        "the child's reservation is compensated"
    );
    db.ok(&["verify", &child]);
    let finished = db
        .runtime
        .block_on(async { parents.run(parent).await.expect("parent") });
    assert_eq!(finished.status, RunStatus::Cancelled, "{finished:?}");
    db.ok(&["verify", parent]);
}

/// Every test above runs on SQLite, and on PostgreSQL when one is configured.
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

on_both_backends!(
    a_rejected_signal_is_dropped_and_the_run_resumes,
    a_failed_run_is_closed_out,
    a_quarantine_for_a_wrong_shape_verifies,
    backup_refuses_the_store_and_files_in_use,
    a_failed_migrate_leaves_nothing_behind,
    cancelling_a_parent_stops_its_running_child,
);
