//! Opening a store: a refused connection is reported at once with its address, server
//! errors read as the server's message (no source position), and the open of an existing
//! store refuses a missing schema without creating it.

mod common;

use agent_core::store::{HistoryStore, StoreError};
use agent_pg::{PgSetupError, PgStore};

#[tokio::test]
async fn a_refused_connection_names_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let err = PgStore::connect(&url, "agents").await.unwrap_err();
    assert!(
        matches!(&err, PgSetupError::Refused { address } if *address == format!("127.0.0.1:{port}")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("connection refused at 127.0.0.1:{port}: is PostgreSQL running there?")
    );
}

#[tokio::test]
async fn server_errors_read_without_their_source_position() {
    let Some(url) = common::database_url() else {
        return;
    };
    // Connected (not migrated) into a schema that does not exist: no table resolves.
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = PgStore::connect(&url, &schema).await.expect("connect");
    match store.load_run("r").await {
        Err(StoreError::Backend(e)) => {
            assert_eq!(e.message(), "relation \"runs\" does not exist");
            // The driver's error travels with it, for a caller to inspect.
            let source = std::error::Error::source(&e).expect("the driver's error");
            assert!(
                matches!(
                    source.downcast_ref::<sqlx::Error>(),
                    Some(sqlx::Error::Database(_))
                ),
                "{source:?}"
            );
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn opening_an_existing_store_refuses_a_missing_schema_and_creates_nothing() {
    let Some(url) = common::database_url() else {
        return;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let err = PgStore::open_existing(&url, &schema).await.unwrap_err();
    assert!(
        matches!(&err, PgSetupError::NoSchema { schema: s, .. } if *s == schema),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with(&format!("no schema `{schema}` in PostgreSQL database ")),
        "{err}"
    );
    let probe = PgStore::connect(&url, &schema).await.expect("connect");
    assert!(matches!(
        probe.check_schema().await,
        Err(PgSetupError::NoSchema { .. })
    ));

    // Once a worker has migrated it, it opens.
    probe.migrate().await.expect("migrate");
    let opened = PgStore::open_existing(&url, &schema)
        .await
        .expect("a migrated store opens");
    assert_eq!(
        opened
            .database()
            .rsplit_once('/')
            .map(|(_, db)| db.is_empty()),
        Some(false)
    );
    probe.drop_schema().await.expect("drop the schema");
}

/// The names of the relations (tables, sequences, indexes) and functions in `schema`.
async fn objects_in(url: &str, schema: &str) -> Vec<String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 \
         UNION ALL SELECT p.proname::text FROM pg_proc p \
         JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&mut conn)
    .await
    .expect("list the schema");
    conn.close().await.expect("close");
    names
}

/// A start whose migrations fail part-way (the schema already holds a table of another
/// application under a name a later statement of the first migration creates) leaves the
/// schema as it found it: no migrations table, none of the tables created before the
/// failure. Once the conflict is gone, the next start migrates it whole.
#[tokio::test]
async fn a_failed_migration_leaves_nothing_behind() {
    let Some(url) = common::database_url() else {
        return;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = PgStore::connect(&url, &schema).await.expect("connect");
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
        for s in [
            format!("CREATE SCHEMA {schema}"),
            format!("CREATE TABLE {schema}.transitions (theirs int)"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(s))
                .execute(&mut conn)
                .await
                .expect("set up the other application's schema");
        }
        conn.close().await.expect("close");
    }
    let before = objects_in(&url, &schema).await;
    assert_eq!(before, ["transitions"], "{before:?}");
    let err = store.migrate().await.unwrap_err();
    assert!(matches!(err, PgSetupError::Migrate(_)), "{err:?}");
    assert!(err.to_string().contains("transitions"), "{err}");
    assert_eq!(
        objects_in(&url, &schema).await,
        before,
        "a failed start wrote into the schema"
    );
    // Nor does it hold a lock that keeps the next start waiting.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE {schema}.transitions"
    )))
    .execute(store.pool())
    .await
    .expect("drop the conflict");
    store
        .migrate()
        .await
        .expect("migrate once the conflict is gone");
    store.check_schema().await.expect("a whole store");
    store.drop_schema().await.expect("drop");
}

/// A start that cannot create its schema (a role without the right to) creates nothing,
/// and says why.
#[tokio::test]
async fn a_role_without_rights_creates_nothing() {
    let Some(url) = common::database_url() else {
        return;
    };
    let role = format!("r_{}", uuid::Uuid::new_v4().simple());
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = PgStore::connect(&url, "public").await.expect("connect");
    // The role logs in as the test's user does (trust or the same password).
    let Some((protocol, rest)) = url.split_once("://") else {
        return;
    };
    let Some((_, host)) = rest.split_once('@') else {
        return;
    };
    let as_role = format!("{protocol}://{role}@{host}");
    let exec = |s: String| {
        let pool = admin.pool().clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(s))
                .execute(&pool)
                .await
                .expect("admin statement");
        }
    };
    exec(format!("CREATE ROLE {role} LOGIN")).await;
    let store = PgStore::connect(&as_role, &schema)
        .await
        .expect("connect as the role");
    assert!(
        store.migrate().await.is_err(),
        "the role cannot create a schema"
    );
    assert!(objects_in(&url, &schema).await.is_empty());
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(&schema)
            .fetch_one(admin.pool())
            .await
            .expect("query");
    assert!(!exists, "the schema was created");
    drop(store);
    exec(format!("DROP ROLE {role}")).await;
}
