//! The runner's invariants on SQLite: the conformance fixture agent driven through the
//! runner, with crashes injected at every fault point, each check in its own file.

use std::sync::Arc;

use agent_sqlite::SqliteStore;

async fn fresh_store() -> Arc<SqliteStore> {
    let dir = std::env::temp_dir().join("agent-sqlite-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("runner-{}.db", uuid::Uuid::new_v4().simple()));
    Arc::new(SqliteStore::open(&path).await.unwrap())
}

agent_core::runner_conformance!(setup = fresh_store);
