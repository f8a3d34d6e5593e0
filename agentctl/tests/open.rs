//! Opening a store from `agentctl`: it never creates or migrates one by accident, it says
//! which database and schema it tried and why it refused, one rule decides what a URL
//! names, and `backup` makes one file that holds every run.

mod common;

use std::process::{Command, Output};

use agent_core::store::{NewRun, RunStore, Store};
use agent_sqlite::{Access, SqliteStore};
use common::{DONE, Db};
use sqlx::Connection;

fn code(out: &Output) -> i32 {
    out.status.code().expect("exit code")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `agentctl ARGS` with no database in the environment.
fn agentctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("AGENT_DB")
        .env_remove("AGENT_PG_SCHEMA")
        .env("NO_COLOR", "1")
        .output()
        .expect("run agentctl")
}

/// `agentctl --database-url URL --pg-schema SCHEMA ARGS`: its exit code and stderr.
fn on_pg(url: &str, schema: &str, args: &[&str]) -> (i32, String) {
    let mut all = vec!["--database-url", url, "--pg-schema", schema];
    all.extend_from_slice(args);
    let out = agentctl(&all);
    (code(&out), stderr(&out))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The PostgreSQL of the tests and a connection to it, or `None` (skipped) without one.
fn postgres(test: &str) -> Option<String> {
    let url = common::pg_url();
    if url.is_none() {
        println!("{test}: skipped: set DATABASE_URL or AGENTCTL_TEST_PG to a postgres:// URL");
    }
    url
}

fn unique_schema(what: &str) -> String {
    format!(
        "agentctl_open_{what}_{}_{}",
        std::process::id(),
        agent_core::store::now_ms()
    )
}

async fn schema_exists(url: &str, schema: &str) -> bool {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut conn)
            .await
            .expect("query");
    conn.close().await.expect("close");
    exists
}

async fn tables_in(url: &str, schema: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(schema)
    .fetch_one(&mut conn)
    .await
    .expect("query");
    conn.close().await.expect("close");
    n
}

async fn sql(url: &str, statement: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    conn.close().await.expect("close");
}

/// The database as the messages name it: `host:port/dbname` of the test server's URL (the
/// port is the one `scripts/pg` chose, or 5432 when the URL gives none).
fn shown(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.split('?').next().unwrap_or(rest);
    let (host, db) = rest.split_once('/').unwrap_or((rest, "postgres"));
    if host.contains(':') {
        format!("{host}/{db}")
    } else {
        format!("{host}:5432/{db}")
    }
}

#[test]
fn reading_a_missing_postgres_schema_creates_nothing() {
    let Some(url) = postgres("reading_a_missing_postgres_schema_creates_nothing") else {
        return;
    };
    let schema = unique_schema("missing");
    for args in [&["runs"][..], &["show", "x"], &["signal", "x", "go"]] {
        let (code, err) = on_pg(&url, &schema, args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "no schema `{schema}` in PostgreSQL database {}",
                shown(&url)
            )),
            "{err}"
        );
        assert!(err.contains("--pg-schema"), "{err}");
        assert!(!err.contains("no runs yet"), "{err}");
    }
    assert!(
        !runtime().block_on(schema_exists(&url, &schema)),
        "agentctl created schema {schema}"
    );
}

#[test]
fn a_postgres_schema_without_a_store_is_refused_and_left_alone() {
    let Some(url) = postgres("a_postgres_schema_without_a_store_is_refused_and_left_alone") else {
        return;
    };
    let schema = unique_schema("foreign");
    let rt = runtime();
    rt.block_on(sql(
        &url,
        &format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.invoices (id int)"),
    ));
    let (code, err) = on_pg(&url, &schema, &["runs"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "schema `{schema}` of PostgreSQL database {} holds no agent store",
            shown(&url)
        )),
        "{err}"
    );
    assert_eq!(
        rt.block_on(tables_in(&url, &schema)),
        1,
        "agentctl added tables"
    );
    rt.block_on(sql(&url, &format!("DROP SCHEMA {schema} CASCADE")));
}

#[test]
fn a_postgres_store_behind_or_ahead_of_the_binary_is_refused_until_migrated() {
    let Some(url) = postgres("a_postgres_store_behind_or_ahead_of_the_binary") else {
        return;
    };
    let schema = unique_schema("level");
    let rt = runtime();
    let (code, err) = on_pg(&url, &schema, &["migrate"]);
    assert_eq!(code, 0, "{err}");
    let (code, err) = on_pg(&url, &schema, &["runs"]);
    assert_eq!(code, 0, "{err}");

    // An older store: its last migration is not applied yet.
    let table = format!("{schema}._sqlx_migrations");
    rt.block_on(sql(
        &url,
        &format!("CREATE TABLE {schema}.kept AS SELECT * FROM {table} WHERE version = (SELECT max(version) FROM {table}); DELETE FROM {table} WHERE version = (SELECT max(version) FROM {table})"),
    ));
    let (code, err) = on_pg(&url, &schema, &["runs"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("it is behind this binary: migrations"),
        "{err}"
    );
    assert!(err.contains("agentctl migrate"), "{err}");

    // A newer store: a migration this binary does not know.
    rt.block_on(sql(
        &url,
        &format!(
            "INSERT INTO {table} SELECT * FROM {schema}.kept; \
             INSERT INTO {table} (version, description, success, checksum, execution_time) \
             VALUES (99991231000000, 'from the future', true, '\\x00', 0)"
        ),
    ));
    let (code, err) = on_pg(&url, &schema, &["runs"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "it is ahead of this binary: migrations 99991231000000 come from a newer version"
        ),
        "{err}"
    );
    rt.block_on(sql(&url, &format!("DROP SCHEMA {schema} CASCADE")));
}

#[test]
fn connection_refused_is_said_at_once_with_the_address() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let out = agentctl(&["--database-url", &url, "runs"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(
        err.contains(&format!("connection refused at 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!err.contains("pool timed out"), "{err}");
}

#[test]
fn an_authentication_failure_does_not_ask_whether_the_server_runs() {
    let Some(url) = postgres("an_authentication_failure_does_not_ask_whether_the_server_runs")
    else {
        return;
    };
    let Some(rest) = url.split_once("://").map(|(_, r)| r) else {
        return;
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let url = format!("postgres://no_such_role_agentctl@{host}");
    let out = agentctl(&["--database-url", &url, "runs"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(err.contains("no_such_role_agentctl"), "{err}");
    assert!(!err.contains("running"), "{err}");
    assert!(!err.contains(" at line "), "{err}");
}

#[test]
fn urls_of_other_databases_are_refused_by_name() {
    for args in [
        &["--database-url", "mysql://root@localhost/agents", "runs"][..],
        &["--db", "http://example.com/runs.db", "runs"],
    ] {
        let out = agentctl(args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{err}");
        assert!(err.contains("unsupported database URL scheme"), "{err}");
    }
    let out = agentctl(&["--database-url", "mysql://root@localhost/agents", "runs"]);
    assert!(
        stderr(&out)
            .contains("unsupported database URL scheme `mysql`: use postgres://… or a SQLite path"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_sqlite_file_that_is_not_a_store_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.sqlite3");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let rt = runtime();
    let tables = || {
        rt.block_on(async {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
            names
        })
    };
    rt.block_on(async {
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE invoices (id INTEGER)")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    });
    for args in [&["runs"][..], &["signal", "x", "go"]] {
        let mut all = vec!["--db", path.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = agentctl(&all);
        let err = stderr(&out);
        assert_eq!(code(&out), 1, "{err}");
        assert!(
            err.contains(&format!("{} is not an agent store", path.display())),
            "{err}"
        );
    }
    assert_eq!(tables(), ["invoices"]);

    let garbage = dir.path().join("notes.txt");
    std::fs::write(
        &garbage,
        "not a database at all, but long enough to look like a file\n",
    )
    .unwrap();
    let out = agentctl(&["--db", garbage.to_str().unwrap(), "runs"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("is not an agent store"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn reading_commands_read_while_a_worker_has_the_file_open() {
    let db = Db::sqlite();
    // A worker of this process holds the file (and its lock); agentctl reads beside it.
    let worker = db
        .runtime
        .block_on(SqliteStore::open(&db.path))
        .expect("worker open");
    let runs = db.ok(&["runs"]);
    assert!(runs.contains(DONE), "{runs}");
    db.ok(&["tools", "disable", "Charge", "--reason", "test"]);
    db.runtime.block_on(worker.close());
}

#[test]
fn backup_while_open_holds_every_run_in_one_file() {
    let db = Db::sqlite();
    let rt = &db.runtime;
    let worker = rt
        .block_on(SqliteStore::open(&db.path))
        .expect("worker open");
    // A run committed just now sits in the write-ahead log, not yet in the file itself.
    rt.block_on(worker.create_run(NewRun::new(
        "fresh-run",
        "Order",
        "fp",
        "Start",
        serde_json::json!({}),
    )))
    .expect("create a run");
    let mut wal = db.path.clone().into_os_string();
    wal.push("-wal");
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "the run should be in the -wal file"
    );
    let listed = |store: &dyn Store| {
        let mut ids: Vec<String> = rt
            .block_on(store.list_runs(&agent_core::store::RunFilter::default()))
            .expect("list runs")
            .into_iter()
            .map(|r| r.id)
            .collect();
        ids.sort();
        ids
    };
    let expected = listed(&worker);
    assert_eq!(expected.len(), 7, "{expected:?}");

    let dest = db.path.with_file_name("backup.sqlite3");
    let out = db.ok(&["backup", dest.to_str().unwrap()]);
    assert!(out.contains("backed up 7 runs"), "{out}");

    // The backup file alone, in a directory of its own: no -wal, no -shm.
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("copy.sqlite3");
    std::fs::copy(&dest, &copy).unwrap();
    let restored = rt
        .block_on(SqliteStore::open_existing(&copy, Access::ReadOnly))
        .expect("the copy opens alone");
    assert_eq!(listed(&restored), expected);
    rt.block_on(restored.close());

    // An existing destination is refused unless --force.
    let again = db.agentctl(&["backup", dest.to_str().unwrap()]);
    assert_eq!(code(&again), 1);
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    let forced = db.ok(&["backup", dest.to_str().unwrap(), "--force"]);
    assert!(forced.contains("backed up 7 runs"), "{forced}");
    rt.block_on(worker.close());
}

#[test]
fn backup_of_postgres_names_the_pg_dump_command() {
    let out = agentctl(&[
        "--database-url",
        "postgres://app:s3cret@db.example:5432/shop",
        "--pg-schema",
        "agents",
        "backup",
        "shop.dump",
    ]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains(
            "pg_dump --schema=agents --format=custom --file=shop.dump 'postgres://app@db.example:5432/shop'"
        ),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn migrate_creates_a_sqlite_store_but_never_beside_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.sqlite3");
    let db = path.to_str().unwrap();
    let runs = agentctl(&["--db", db, "runs"]);
    assert_eq!(code(&runs), 1, "{}", stderr(&runs));
    assert!(!path.exists(), "a reading command created the file");

    let migrated = agentctl(&["--db", db, "migrate"]);
    assert_eq!(code(&migrated), 0, "{}", stderr(&migrated));
    let runs = agentctl(&["--db", db, "runs"]);
    assert_eq!(code(&runs), 0, "{}", stderr(&runs));

    let rt = runtime();
    let worker = rt.block_on(SqliteStore::open(&path)).expect("worker open");
    let beside = agentctl(&["--db", db, "migrate"]);
    let err = stderr(&beside);
    assert_eq!(code(&beside), 1, "{err}");
    assert!(
        err.contains("SQLite serves one process; use PostgreSQL for several"),
        "{err}"
    );
    rt.block_on(worker.close());
}
