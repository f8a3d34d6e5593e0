//! The runner's invariants on SQLite: the conformance fixture agent driven through the
//! runner, with crashes injected at every fault point, each check in its own file.

mod common;

use std::sync::Arc;

use agent_sqlite::SqliteStore;

async fn fresh_store() -> Arc<SqliteStore> {
    let path = common::new_db_path("runner-");
    Arc::new(SqliteStore::open(&path).await.unwrap())
}

agent_conformance::runner_conformance!(setup = fresh_store);
