//! The whole store conformance suite on SQLite, each test in its own database file.

mod common;

use std::sync::Arc;

use agent_sqlite::SqliteStore;

async fn fresh_store() -> Arc<SqliteStore> {
    let path = common::new_db_path("");
    Arc::new(SqliteStore::open(&path).await.unwrap())
}

async fn remove(store: Arc<SqliteStore>) {
    store.close().await;
    if let Some(path) = store.path() {
        common::remove_db_files(path);
    }
}

agent_conformance::store_conformance!(
    setup = fresh_store,
    corrupt = |store: Arc<SqliteStore>, run_id: String| async move {
        sqlx::query("UPDATE runs SET state = '{not json' WHERE id = $1")
            .bind(&run_id)
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query(
            "UPDATE transitions SET payload_kind = 'patch', payload = '\"garbage\"' \
             WHERE run_id = $1 AND version = (SELECT max(version) FROM transitions WHERE run_id = $1)",
        )
        .bind(&run_id)
        .execute(store.pool())
        .await
        .unwrap();
    },
    teardown = remove,
);
