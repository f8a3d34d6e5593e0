//! Opening a store: a refused connection is reported at once with its address, server
//! errors read as the server's message (no source position), and the open of an existing
//! store refuses a missing schema without creating it.

mod common;

use agent_core::store::{Store, StoreError};
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
        Err(StoreError::Backend(message)) => {
            assert_eq!(message, "relation \"runs\" does not exist");
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
