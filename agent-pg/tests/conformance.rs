//! The whole store conformance suite on PostgreSQL, each test in its own schema.

mod common;

use std::sync::Arc;

use agent_pg::PgStore;

agent_conformance::store_conformance!(
    setup = common::fresh_store,
    corrupt = |store: Arc<PgStore>, run_id: String| async move {
        sqlx::query(
            "UPDATE transitions SET payload_kind = 'patch', payload = '\"garbage\"' \
             WHERE run_id = $1 AND version = (SELECT max(version) FROM transitions WHERE run_id = $1)",
        )
        .bind(&run_id)
        .execute(store.pool())
        .await
        .unwrap();
    },
    teardown = common::drop_store,
);
