//! What versions cost, in one run on the same database: the migrating commit against an
//! ordinary step's commit, and claims filtered by version (`Agent@N`) against claims by
//! agent alone, over stored runs of mixed versions.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo bench --workspace --bench versions
//! VERSIONS_BENCH_RUNS=100000 cargo bench --workspace --bench versions   # the issue's size
//! VERSIONS_BENCH_ONLY=postgres cargo bench --workspace --bench versions  # or `sqlite`
//! ```
//!
//! SQLite (a file in a temporary directory), and PostgreSQL when `DATABASE_URL` is set
//! (a schema of its own, dropped at the end); `VERSIONS_BENCH_ONLY` runs one of them.
//! Printed: p50 and p99 of each, and the ratio of the p50s (machines here are noisy: the
//! ratio is measured within one run, interleaved).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{
    Claimed, MigrationCommit, MigrationNote, NewRun, RunStatus, StepCommit, Store, TransitionKind,
};
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde_json::json;

const AGENT: &str = "Bench";
const TTL: Duration = Duration::from_mins(1);

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `pct`th percentile (nearest rank below).
fn percentile(samples: &mut [Duration], pct: usize) -> Duration {
    samples.sort();
    samples[(samples.len() - 1) * pct / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn state(step: u64) -> serde_json::Value {
    json!({"Working": {"cart": ["apple", "pear", "plum"], "step": step}})
}

fn step_commit(expected: u64) -> StepCommit {
    StepCommit {
        expected_version: expected,
        from_state: "Working".into(),
        to_state: "Working".into(),
        state: state(expected + 1),
        kind: TransitionKind::Step,
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
        spend: None,
    }
}

fn migration(expected: u64) -> MigrationCommit {
    MigrationCommit {
        expected_version: expected,
        from_agent_version: 1,
        to_agent_version: 2,
        fingerprint: "fingerprint-v2".into(),
        from_state: "Working".into(),
        to_state: "Working".into(),
        state: state(expected),
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        resume_base: None,
        note: MigrationNote {
            agent: AGENT.into(),
            from_version: 1,
            from_fingerprint: "fingerprint-v1".into(),
            to_version: 2,
            to_fingerprint: "fingerprint-v2".into(),
            resume_base: None,
        },
    }
}

/// Per run: claim, one ordinary commit, one migrating commit, in an order that alternates
/// from run to run.
async fn migration_cost(store: &dyn Store, name: &str, runs: usize) {
    let mut steps = Vec::new();
    let mut migrations = Vec::new();
    for i in 0..runs {
        let id = format!("mig-{i}");
        store
            .create_run(NewRun::new(
                &id,
                AGENT,
                "fingerprint-v1",
                "Working",
                state(0),
            ))
            .await
            .expect("create");
        let Claimed { lease, .. } = store
            .claim_run(&id, "bench", TTL)
            .await
            .expect("claim")
            .expect("free");
        let (first_step, then_migrate) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
        if first_step == 0 {
            let t = Instant::now();
            store
                .commit_step(&lease, &step_commit(0), &[])
                .await
                .expect("step");
            steps.push(t.elapsed());
            let t = Instant::now();
            store
                .migrate_run(&lease, &migration(then_migrate))
                .await
                .expect("migrate");
            migrations.push(t.elapsed());
        } else {
            let t = Instant::now();
            store
                .migrate_run(&lease, &migration(0))
                .await
                .expect("migrate");
            migrations.push(t.elapsed());
            let t = Instant::now();
            store
                .commit_step(&lease, &step_commit(1), &[])
                .await
                .expect("step");
            steps.push(t.elapsed());
        }
    }
    let (s50, s99) = (percentile(&mut steps, 50), percentile(&mut steps, 99));
    let (m50, m99) = (
        percentile(&mut migrations, 50),
        percentile(&mut migrations, 99),
    );
    println!(
        "{name}: migrating commit p50 {:.2} ms p99 {:.2} ms · ordinary step p50 {:.2} ms p99 {:.2} ms · ratio of p50s {:.2} ({runs} runs)",
        ms(m50),
        ms(m99),
        ms(s50),
        ms(s99),
        m50.as_secs_f64() / s50.as_secs_f64()
    );
}

/// `stored` runs, half on version 1 and half on version 2, then claims of one run at a
/// time by `Bench` and by `Bench@2`, interleaved, each released again.
/// `pg`: the PostgreSQL store's pool, to refresh the planner's statistics after the runs
/// are created, as autovacuum would in a while (it is off on some servers, this project's
/// test server among them: without statistics the planner takes the claim's index for
/// nearly empty and reads every run).
async fn claim_cost(
    store: &dyn Store,
    name: &str,
    stored: usize,
    claims: usize,
    pg: Option<&sqlx::PgPool>,
) {
    let started = Instant::now();
    for i in 0..stored {
        let version = if i % 2 == 0 { 1 } else { 2 };
        store
            .create_run(
                NewRun::new(format!("mixed-{i}"), AGENT, "f", "Working", state(0))
                    .with_agent_version(version),
            )
            .await
            .expect("create");
    }
    let created = started.elapsed();
    if let Some(pool) = pg {
        sqlx::raw_sql("ANALYZE runs")
            .execute(pool)
            .await
            .expect("ANALYZE");
    }
    let any = vec![AGENT.to_owned()];
    let v2 = vec![format!("{AGENT}@2")];
    let mut by_agent = Vec::new();
    let mut by_version = Vec::new();
    for i in 0..claims * 2 {
        let (entries, samples) = if i % 2 == 0 {
            (&any, &mut by_agent)
        } else {
            (&v2, &mut by_version)
        };
        let t = Instant::now();
        let claimed = store
            .claim_next(entries, "bench", TTL, 1)
            .await
            .expect("claim");
        samples.push(t.elapsed());
        let Claimed { lease, record, .. } = claimed.into_iter().next().expect("a claimable run");
        if entries == &v2 {
            assert_eq!(
                record.agent_version, 2,
                "the filter let another version through"
            );
        }
        store.release_lease(&lease).await.expect("release");
    }
    let (a50, a99) = (percentile(&mut by_agent, 50), percentile(&mut by_agent, 99));
    let (v50, v99) = (
        percentile(&mut by_version, 50),
        percentile(&mut by_version, 99),
    );
    println!(
        "{name}: claim over {stored} runs of versions 1 and 2 (created in {:.1} s): by `Bench@2` p50 {:.2} ms p99 {:.2} ms · by `Bench` p50 {:.2} ms p99 {:.2} ms · ratio of p50s {:.2}",
        created.as_secs_f64(),
        ms(v50),
        ms(v99),
        ms(a50),
        ms(a99),
        v50.as_secs_f64() / a50.as_secs_f64()
    );
}

async fn bench(store: &dyn Store, name: &str, stored: usize, pg: Option<&sqlx::PgPool>) {
    migration_cost(store, name, size("VERSIONS_BENCH_MIGRATIONS", 300)).await;
    claim_cost(store, name, stored, size("VERSIONS_BENCH_CLAIMS", 300), pg).await;
}

#[tokio::main]
async fn main() {
    let stored = size("VERSIONS_BENCH_RUNS", 10_000);
    let only = std::env::var("VERSIONS_BENCH_ONLY").ok();
    assert!(
        only.as_deref()
            .is_none_or(|o| o == "sqlite" || o == "postgres"),
        "VERSIONS_BENCH_ONLY is `sqlite` or `postgres`, not {only:?}"
    );
    if only.as_deref().is_none_or(|o| o == "sqlite") {
        let dir = tempfile::tempdir().expect("temporary directory");
        let sqlite = SqliteStore::open(dir.path().join("versions.db"))
            .await
            .expect("open SQLite");
        bench(&sqlite, "SQLite", stored, None).await;
        sqlite.close().await;
    }
    if only.as_deref() == Some("sqlite") {
        return;
    }
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let schema = format!("bench_versions_{}", std::process::id());
        let pg = Arc::new(PgStore::connect(&url, &schema).await.expect("connect"));
        pg.migrate().await.expect("migrate");
        bench(pg.as_ref(), "PostgreSQL", stored, Some(pg.pool())).await;
        pg.drop_schema().await.expect("drop the bench's schema");
    } else {
        println!("PostgreSQL: skipped (set DATABASE_URL)");
    }
}
