//! Test support: a fresh schema per test on the database named by `DATABASE_URL`.

#![allow(dead_code)]

use std::sync::Arc;

use agent_pg::PgStore;

/// `DATABASE_URL`, or `None` outside CI (with a loud message). Under `CI=true` a missing
/// `DATABASE_URL` fails the test: the PostgreSQL tests must never be skipped silently there.
pub(crate) fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
            assert!(
                !ci,
                "DATABASE_URL is not set under CI: run the tests through ./scripts/test, which \
                 starts a throwaway PostgreSQL (scripts/pg)"
            );
            eprintln!(
                "\n*** SKIPPED: agent-pg test without DATABASE_URL. Run ./scripts/test (starts a \
                 throwaway PostgreSQL) or set DATABASE_URL=postgres://... ***\n"
            );
            None
        }
    }
}

/// A migrated store in a schema of its own, or `None` when skipped.
pub(crate) async fn fresh_store() -> Option<Arc<PgStore>> {
    Some(fresh_store_at(&database_url()?).await)
}

/// A migrated store in a schema of its own at `url`.
pub(crate) async fn fresh_store_at(url: &str) -> Arc<PgStore> {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = PgStore::connect(url, &schema)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    store
        .migrate()
        .await
        .unwrap_or_else(|e| panic!("migrate: {e}"));
    Arc::new(store)
}

/// Drop the test's schema.
pub(crate) async fn drop_store(store: Arc<PgStore>) {
    if let Err(e) = store.drop_schema().await {
        eprintln!("could not drop schema {}: {e}", store.schema());
    }
}

/// Drop the test's schema through a new connection (the store's pool is closed).
pub(crate) async fn drop_store_after_close(store: Arc<PgStore>) {
    if let Some(url) = database_url()
        && let Ok(fresh) = PgStore::connect(&url, store.schema()).await
    {
        drop_store(Arc::new(fresh)).await;
    }
}
