//! Durable timers' accuracy (issue 41): how late a timer fires against its due time, with
//! few and with many other timers pending, on PostgreSQL and SQLite, the two sizes in the
//! same run.
//!
//! ```sh
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres' \
//!     cargo bench --workspace --bench timers
//! TIMERS_FULL=1 ...            # the issue's sizes: 1,000 and 1,000,000 pending
//! TIMERS_PENDING=1000,50000    # other sizes
//! ```
//!
//! For each size, that many runs wait for a timer due in a day (written in one statement,
//! copies of a real run's rows, then the store settled: vacuumed and checkpointed), and 100
//! sample runs wait for timers due 20 ms apart, starting once they are all written. One worker (16 runs at once) runs; each sample's handler notes how
//! late it started against its due time. The worker sleeps until the store's next due
//! time (`next_due`), so the delay is the store's claim and the worker's wake-up, not a
//! poll interval. Printed: min / p50 / p99 / max of the delay per size, and the ratio of
//! the largest size's p50 and p99 to the smallest's.

// Figures are durations turned into milliseconds: `as f64` loses nothing a printed figure shows.
#![allow(clippy::cast_precision_loss)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_core::runner::{Runner, RunnerConfig, Worker, WorkerConfig};
use agent_core::store::{Store, now_ms};
use agent_core::timer::Deadline;
use agent_core::{Ctx, StepResult, ToolBox};
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

const SAMPLES: usize = 100;
const SPACING_MS: i64 = 20;
const LEAD_MS: i64 = 3_000;

#[derive(Clone, Debug, Serialize, Deserialize, agent_core::Agent)]
enum Sleeper {
    #[agent(initial, timer = due, to(Woken))]
    Sleeping { due: Deadline },
    #[agent(terminal)]
    Woken,
}

/// Each sample's lateness, in microseconds.
#[derive(Debug, Clone, Default)]
struct Late(Arc<Mutex<Vec<i64>>>);

impl SleeperHandlers for Late {
    async fn sleeping(
        &self,
        ctx: Ctx<'_, sleeper::Sleeping>,
        sleeper::Sleeping { due }: sleeper::Sleeping,
    ) -> StepResult<sleeper::Sleeping> {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        // The pending runs are due in a day and never fire here; only samples do.
        self.0
            .lock()
            .unwrap()
            .push(now_us - due.unix_millis() * 1_000);
        Ok(ctx.to(sleeper::Woken))
    }
}

enum Opened {
    Pg(Arc<PgStore>),
    Sqlite(Arc<SqliteStore>, String),
}

impl Opened {
    fn label(&self) -> &'static str {
        match self {
            Self::Pg(_) => "PostgreSQL",
            Self::Sqlite(..) => "SQLite",
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Pg(s) => s.clone(),
            Self::Sqlite(s, _) => s.clone(),
        }
    }

    /// Copy the waiting run `t-model` into `n` runs `t-1`..`t-n`, waiting for the same
    /// timer, each with a start transition, in one statement.
    async fn copy_pending(&self, n: usize) {
        match self {
            Self::Pg(pg) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO runs (id, agent, fingerprint, state_name, state, version, \
                       status, waiting_for, wake_at, creation_hash, last_hash, snapshot_version) \
                     SELECT 't-' || g, agent, fingerprint, state_name, state, 0, 'waiting', \
                       waiting_for, wake_at, creation_hash, last_hash, 0 \
                     FROM runs, generate_series(1, {n}) g WHERE id = 't-model'; \
                     INSERT INTO transitions (run_id, version, from_state, to_state, kind, \
                       status, epoch, hash, payload_kind, payload) \
                     SELECT id, 0, state_name, state_name, 'start', 'waiting', 0, last_hash, \
                       'snapshot', state FROM runs WHERE id LIKE 't-%' AND id <> 't-model'; \
                     ANALYZE runs; ANALYZE transitions"
                )))
                .execute(pg.pool())
                .await
                .expect("pending timers");
                // A steady state, as a store that has held its timers a while is: the
                // vacuum autovacuum would otherwise run during the samples, and a
                // checkpoint of the load's writes.
                for settle in [
                    "VACUUM (ANALYZE) runs",
                    "VACUUM (ANALYZE) transitions",
                    "CHECKPOINT",
                ] {
                    sqlx::raw_sql(settle)
                        .execute(pg.pool())
                        .await
                        .expect("settle");
                }
            }
            Self::Sqlite(lite, _) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "BEGIN IMMEDIATE; \
                     WITH RECURSIVE g(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM g WHERE k < {n}) \
                     INSERT INTO runs (id, agent, fingerprint, state_name, state, version, \
                       status, waiting_for, wake_at, creation_hash, last_hash, snapshot_version, \
                       created_at, updated_at, seq, agent_version) \
                     SELECT 't-' || k, agent, fingerprint, state_name, state, 0, 'waiting', \
                       waiting_for, wake_at, creation_hash, last_hash, 0, created_at, \
                       updated_at, seq + k, agent_version \
                     FROM runs, g WHERE id = 't-model'; \
                     INSERT INTO transitions (run_id, version, from_state, to_state, kind, \
                       status, epoch, created_at, hash, payload_kind, payload) \
                     SELECT id, 0, state_name, state_name, 'start', 'waiting', 0, created_at, \
                       last_hash, 'snapshot', state FROM runs \
                     WHERE id LIKE 't-%' AND id <> 't-model'; COMMIT"
                )))
                .execute(lite.pool())
                .await
                .expect("pending timers");
                // The load's pages checkpointed out of the write-ahead log first.
                sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(lite.pool())
                    .await
                    .expect("checkpoint");
            }
        }
    }

    async fn remove(self) {
        match self {
            Self::Pg(s) => s.drop_schema().await.expect("drop schema"),
            Self::Sqlite(s, path) => {
                s.close().await;
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
            }
        }
    }
}

async fn open(pg_url: Option<&str>, tag: &str) -> Opened {
    if let Some(url) = pg_url {
        let schema = format!("bench_timers_{}_{tag}", std::process::id());
        let store = PgStore::connect(url, &schema).await.expect("connect");
        store.migrate().await.expect("migrate");
        return Opened::Pg(Arc::new(store));
    }
    let path = std::env::temp_dir()
        .join(format!("timers-{}-{tag}.db", std::process::id()))
        .display()
        .to_string();
    Opened::Sqlite(
        Arc::new(SqliteStore::open(&path).await.expect("open")),
        path,
    )
}

fn runner(store: Arc<dyn Store>, late: &Late) -> Runner<Sleeper, Late> {
    Runner::builder(store, late.clone(), ToolBox::new())
        .config(RunnerConfig {
            worker_id: "timers".to_owned(),
            lease_ttl: Duration::from_secs(30),
            ..RunnerConfig::default()
        })
        .build()
        .expect("runner")
}

/// The lateness of the samples with `pending` other timers waiting (microseconds, sorted).
async fn measure(opened: &Opened, pending: usize) -> Vec<i64> {
    let late = Late::default();
    let r = runner(opened.store(), &late);
    let in_a_day = Deadline::after(Duration::from_hours(24));
    r.start("t-model", Sleeper::Sleeping { due: in_a_day })
        .await
        .expect("start");
    r.run("t-model").await.expect("wait");
    let loaded = Instant::now();
    opened.copy_pending(pending).await;
    println!(
        "  {pending} pending timers written in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );
    // The samples are written before the worker starts, so their first timer is due once
    // they all are: a lead of twice what writing them is expected to take (timed on three
    // probes due in a day), and at least `LEAD_MS`.
    let probing = Instant::now();
    for k in 0..3 {
        let id = format!("probe-{k}");
        r.start(&id, Sleeper::Sleeping { due: in_a_day })
            .await
            .expect("start");
        r.run(&id).await.expect("wait");
    }
    let per_sample = probing.elapsed().as_millis() / 3;
    let lead = LEAD_MS.max(i64::try_from(per_sample * 2 * SAMPLES as u128).unwrap_or(LEAD_MS));
    let first = now_ms() + lead;
    for k in 0..SAMPLES {
        let due = Deadline::from_unix_millis(first + SPACING_MS * i64::try_from(k).unwrap_or(0));
        let id = format!("sample-{k}");
        r.start(&id, Sleeper::Sleeping { due })
            .await
            .expect("start");
        r.run(&id).await.expect("wait");
    }
    assert!(
        now_ms() < first,
        "the samples took longer than {lead} ms to write: their timers are already due"
    );
    let worker = Arc::new(Worker::new(
        r,
        WorkerConfig {
            concurrency: 16,
            poll_interval: Duration::from_millis(500),
            expire_own_leases_at_start: false,
            retention: None,
        },
    ));
    let stop = Arc::new(tokio::sync::Notify::new());
    let working = {
        let (worker, stop) = (worker.clone(), stop.clone());
        tokio::spawn(async move { worker.run_until(stop.notified()).await })
    };
    let deadline = Instant::now() + Duration::from_mins(1);
    while late.0.lock().unwrap().len() < SAMPLES {
        assert!(
            Instant::now() < deadline,
            "the samples' timers did not all fire"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.notify_one();
    working.await.expect("worker");
    let mut got = late.0.lock().unwrap().clone();
    got.sort_unstable();
    got
}

/// The `permille`-th of the sorted lateness, in milliseconds.
fn pct(sorted: &[i64], permille: usize) -> f64 {
    sorted[(sorted.len() - 1) * permille / 1_000] as f64 / 1_000.0
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = match std::env::var("TIMERS_PENDING") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .replace('_', "")
                    .parse()
                    .expect("TIMERS_PENDING: numbers")
            })
            .collect(),
        Err(_) if std::env::var("TIMERS_FULL").is_ok_and(|v| v == "1") => vec![1_000, 1_000_000],
        Err(_) => vec![1_000, 100_000],
    };
    let pg = std::env::var("DATABASE_URL").ok();
    if pg.is_none() {
        eprintln!("DATABASE_URL is not set: SQLite only");
    }
    println!("timers: fire delay against the due time, {SAMPLES} samples {SPACING_MS} ms apart");
    // PostgreSQL when configured, then SQLite.
    let places = pg.as_deref().map(Some).into_iter().chain([None]);
    for url in places {
        let mut by_size = Vec::new();
        for &pending in &sizes {
            let opened = open(url, &pending.to_string()).await;
            println!("\n## {}, {pending} other timers pending", opened.label());
            let late = measure(&opened, pending).await;
            println!(
                "  fire delay: min {:.2} / p50 {:.2} / p99 {:.2} / max {:.2} ms",
                pct(&late, 0),
                pct(&late, 500),
                pct(&late, 990),
                pct(&late, 1_000)
            );
            by_size.push((pending, pct(&late, 500), pct(&late, 990)));
            opened.remove().await;
        }
        if let (Some(small), Some(large)) = (by_size.first(), by_size.last())
            && by_size.len() > 1
        {
            println!(
                "  ratio {} / {} pending: p50 {:.2}, p99 {:.2}",
                large.0,
                small.0,
                large.1 / small.1,
                large.2 / small.2
            );
        }
    }
}
