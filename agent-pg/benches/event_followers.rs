//! What following runs live costs the runs: 64 runs committing steps concurrently, with no
//! follower and with 100 followers (each following one run, so every run has one or two),
//! on PostgreSQL and on SQLite, in one process and one run of this program.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo bench -p durable-agents-pg --bench event_followers
//! ```
//!
//! Printed per store: commits per second without and with the followers (the best of
//! three rounds each, alternated), their ratio, and the delivery latency of each committed
//! transition from its commit (the record's time, written by the database) to the follower
//! that received it, p50 / p99 / max. Without `DATABASE_URL`, SQLite only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::events::{FollowConfig, Follower};
use agent_core::store::{
    Claimed, EventCursor, EventKind, EventScope, Lease, NewRun, RunStatus, StepCommit, Store,
    TransitionKind, now_ms,
};
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde_json::json;
use tokio::task::JoinSet;

const RUNS: u64 = 64;
const STEPS: u64 = 40;
const FOLLOWERS: u64 = 100;
const ROUNDS: usize = 3;

fn commit(expected: u64) -> StepCommit {
    StepCommit {
        expected_version: expected,
        from_state: "Ticking".into(),
        to_state: "Ticking".into(),
        state: json!({ "Ticking": { "cart": ["apple", "pear"], "step": expected + 1 } }),
        kind: TransitionKind::Step,
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    }
}

async fn create(store: &Arc<dyn Store>, tag: &str) -> Vec<Lease> {
    let mut leases = Vec::new();
    for r in 0..RUNS {
        let id = format!("{tag}-{r}");
        let initial = json!({ "Ticking": { "cart": [], "step": 0 } });
        store
            .create_run(NewRun::new(id.clone(), "Bench", "fp", "Ticking", initial))
            .await
            .expect("create");
        let Claimed { lease, .. } = store
            .claim_run(&id, "bench", Duration::from_hours(1))
            .await
            .expect("claim")
            .expect("free run");
        leases.push(lease);
    }
    leases
}

/// Commits `STEPS` steps of every run at once; returns commits per second.
async fn drive(store: &Arc<dyn Store>, leases: Vec<Lease>) -> f64 {
    let started = Instant::now();
    let mut set = JoinSet::new();
    for lease in leases {
        let store = store.clone();
        set.spawn(async move {
            for v in 0..STEPS {
                store
                    .commit_step(&lease, &commit(v), &[])
                    .await
                    .expect("commit");
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.expect("runner task");
    }
    count(RUNS * STEPS) / started.elapsed().as_secs_f64()
}

#[allow(clippy::cast_precision_loss)]
fn count(n: u64) -> f64 {
    n as f64
}

/// One round with followers: returns commits per second and every delivery latency (ms).
async fn followed(store: &Arc<dyn Store>, tag: &str) -> (f64, Vec<i64>) {
    let leases = create(store, tag).await;
    let mut followers = JoinSet::new();
    for f in 0..FOLLOWERS {
        let scope = EventScope::Run(format!("{tag}-{}", f % RUNS));
        let config = FollowConfig {
            poll: Duration::from_millis(500),
            ..FollowConfig::default()
        };
        let mut follower = Follower::with_config(store.clone(), scope, EventCursor::START, config)
            .await
            .expect("follower");
        followers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let event = follower.next().await.expect("follow");
                if let EventKind::TransitionCommitted { version, .. } = event.kind {
                    latencies.push(now_ms() - event.at);
                    if version == STEPS {
                        return latencies;
                    }
                }
            }
        });
    }
    let rate = drive(store, leases).await;
    let mut latencies = Vec::new();
    while let Some(done) = followers.join_next().await {
        latencies.extend(done.expect("follower task"));
    }
    (rate, latencies)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn bench(name: &str, store: Arc<dyn Store>) {
    // Warm-up: connections, plans, caches.
    let warm = create(&store, "warm").await;
    drive(&store, warm).await;
    let (mut alone, mut with) = (0.0_f64, 0.0_f64);
    let mut latencies = Vec::new();
    for round in 0..ROUNDS {
        let leases = create(&store, &format!("alone{round}")).await;
        alone = alone.max(drive(&store, leases).await);
        let (rate, l) = followed(&store, &format!("followed{round}")).await;
        with = with.max(rate);
        latencies.extend(l);
    }
    latencies.sort_unstable();
    println!(
        "{name}: {RUNS} runs x {STEPS} steps, best of {ROUNDS}: {alone:.0} commits/s alone, \
         {with:.0} with {FOLLOWERS} followers (ratio {:.2}); delivery latency p50 {} ms, \
         p99 {} ms, max {} ms over {} deliveries",
        with / alone,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        latencies.len(),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lite = SqliteStore::open(dir.path().join("events.db"))
        .await
        .expect("open SQLite");
    bench("SQLite", Arc::new(lite)).await;
    match std::env::var("DATABASE_URL") {
        Ok(url) => {
            let schema = format!("bench_events_{}", std::process::id());
            let pg = PgStore::connect(&url, &schema).await.expect("connect");
            pg.migrate().await.expect("migrate");
            let pool = pg.pool().clone();
            bench("PostgreSQL", Arc::new(pg)).await;
            // The schema name is this program's own (`bench_events_` and a process id).
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&pool)
                .await
                .expect("drop the bench schema");
        }
        Err(_) => eprintln!("PostgreSQL skipped: set DATABASE_URL=postgres://... to measure it"),
    }
}
