//! The store through PgBouncer: the whole conformance suite through a transaction pooler
//! (polling for work) and through a session pooler, `LISTEN` on the direct address past a
//! transaction pooler, and the configuration that cannot work refused at start-up.
//!
//! `eval "$(scripts/pgbouncer)"` starts the poolers and sets `PGBOUNCER_URL` (transaction
//! mode) and `PGBOUNCER_SESSION_URL`; without them these tests say so and are skipped,
//! except under CI, where they fail.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{NewRun, RunStore};
use agent_pg::{PgSetupError, PgStore, Pooler};

/// `var`'s URL, or `None` outside CI (with a loud message); under CI a missing one fails.
fn pooler_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
            assert!(
                !ci,
                "{var} is not set under CI: run `eval \"$(scripts/pgbouncer)\"` first, which \
                 starts PgBouncer in front of the tests' PostgreSQL"
            );
            eprintln!(
                "\n*** SKIPPED: agent-pg test through PgBouncer without {var}. Run \
                 `eval \"$(scripts/pgbouncer)\"` (installs and starts PgBouncer) ***\n"
            );
            None
        }
    }
}

/// `url` with the store's settings `query` added.
fn with(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

/// Wake-ups by polling, short, so that the suite's waits for work end soon.
async fn through_transaction_pooler() -> Option<Arc<PgStore>> {
    let url = pooler_url("PGBOUNCER_URL")?;
    let store =
        common::fresh_store_at(&with(&url, "pooler=transaction&wake=poll&poll_ms=100")).await;
    assert_eq!(store.pooler(), Pooler::Transaction);
    Some(store)
}

async fn through_session_pooler() -> Option<Arc<PgStore>> {
    let url = pooler_url("PGBOUNCER_SESSION_URL")?;
    Some(common::fresh_store_at(&with(&url, "pooler=session")).await)
}

/// Break the latest transition of `run_id`: through the raw pool, so in a transaction
/// (see [`PgStore::pool`]) with the schema named.
async fn corrupt(store: Arc<PgStore>, run_id: String) {
    let mut tx = store.pool().begin().await.unwrap();
    let sql = format!(
        "UPDATE \"{0}\".transitions SET payload_kind = 'patch', payload = '\"garbage\"' \
         WHERE run_id = $1 AND version = \
         (SELECT max(version) FROM \"{0}\".transitions WHERE run_id = $1)",
        store.schema()
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&run_id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

mod transaction {
    agent_conformance::store_conformance!(
        setup = super::through_transaction_pooler,
        corrupt = super::corrupt,
        teardown = super::common::drop_store,
    );
}

mod session {
    agent_conformance::store_conformance!(
        setup = super::through_session_pooler,
        corrupt = super::corrupt,
        teardown = super::common::drop_store,
    );
}

/// `LISTEN` through a transaction pooler is refused before anything is opened, with what
/// to do instead; nothing needs to listen at the address for that.
#[tokio::test]
async fn listen_through_a_transaction_pooler_is_refused() {
    let url = "postgres://postgres@127.0.0.1:1/postgres?pooler=transaction";
    let e = PgStore::connect(url, "agents").await.unwrap_err();
    assert!(
        matches!(e, PgSetupError::ListenThroughPooler { .. }),
        "{e:?}"
    );
    let message = e.to_string();
    for says in [
        "LISTEN",
        "127.0.0.1:1/postgres",
        "direct=HOST:PORT",
        "wake=poll",
    ] {
        assert!(message.contains(says), "`{says}` missing from: {message}");
    }
}

/// A direct address that does not answer is refused at start-up too, naming it.
#[tokio::test]
async fn an_unreachable_direct_address_is_refused() {
    let Some(url) = pooler_url("PGBOUNCER_URL") else {
        return;
    };
    let e = PgStore::connect(
        &with(&url, "pooler=transaction&direct=127.0.0.1:1"),
        "agents",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, PgSetupError::Refused { address } if address == "127.0.0.1:1"),
        "{e:?}"
    );
}

/// Without `pooler=`, PgBouncer refuses the store's start-up option, and the error says
/// which setting is missing.
#[tokio::test]
async fn a_pooler_not_declared_is_named_in_the_error() {
    let Some(url) = pooler_url("PGBOUNCER_URL") else {
        return;
    };
    let message = PgStore::connect(&url, "agents")
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("pooler=transaction"), "{message}");
}

/// Past a transaction pooler with a direct address, an idle worker is woken by `LISTEN`
/// there: a wait of a minute ends soon after another process's store creates a run.
#[tokio::test]
async fn idle_workers_listen_on_the_direct_address() {
    let Some(url) = pooler_url("PGBOUNCER_URL") else {
        return;
    };
    // The server behind the pooler: what scripts/pgbouncer names, else DATABASE_URL's host
    // and port. Not DATABASE_URL's first: `scripts/test` may point it at a throwaway server
    // of its own, where nothing the pooler writes is notified.
    let from_database_url = || {
        let direct = common::database_url()?;
        direct
            .split_once("://")
            .map(|(_, rest)| rest.rsplit_once('@').map_or(rest, |(_, r)| r))
            .and_then(|rest| rest.split(['/', '?']).next())
            .map(str::to_owned)
    };
    let Some(host_port) = std::env::var("PGBOUNCER_DIRECT")
        .ok()
        .filter(|d| !d.is_empty())
        .or_else(from_database_url)
    else {
        return;
    };
    let url = with(&url, &format!("pooler=transaction&direct={host_port}"));
    let waiting = common::fresh_store_at(&url).await;
    let writer = PgStore::connect(&url, waiting.schema()).await.unwrap();
    // The listener starts with the first wait.
    waiting.wait_for_work(Duration::from_millis(300)).await;
    let sleeper = {
        let waiting = Arc::clone(&waiting);
        tokio::spawn(async move {
            let started = Instant::now();
            waiting.wait_for_work(Duration::from_mins(1)).await;
            started.elapsed()
        })
    };
    // A new run every 250 ms until the sleeper wakes: how soon the listener subscribes
    // depends on the machine's load (a loaded CI machine can take longer than any fixed
    // pause), and a write before it would be missed; one after it wakes the sleeper.
    let mut written = 0;
    let waited = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if sleeper.is_finished() {
            break sleeper.await.unwrap();
        }
        assert!(written < 40, "the wait did not end within 10 s of new runs");
        writer
            .create_run(NewRun::new(
                format!("woken-{written}"),
                "A",
                "f",
                "Start",
                serde_json::json!({}),
            ))
            .await
            .unwrap();
        written += 1;
    };
    assert!(waited < Duration::from_secs(15), "woken after {waited:?}");
    common::drop_store(waiting).await;
}
