//! Issue 20, "end to end with real processes": a rolling deploy of the shop's version 2
//! under `kill -9`. Runs are started on version 1 and worked by a version 1 process; a
//! version 2 process starts beside it and migrates every run it claims; the version 1
//! process is killed (its runs are taken over mid-step and migrated with their interrupted
//! step carried over); the version 2 process is then killed at random moments while
//! migrations are under way, and restarted each time; then everything finishes on version 2.
//! Once, after a kill of version 2 that left migrated runs behind (and once the runs the
//! first version 1 process held have been taken over), a version 1 process runs alone until
//! those runs' leases have expired and a while more (a rollback drill: it must leave them
//! alone), and is stopped before version 2 comes back.
//!
//! Pass: every run completed (or compensated, where the shop's router cancels) exactly
//! once; every effect applied once, every compensation once ([`check`]); no version 2 run
//! claimed, committed or touched by a version 1 process, each run migrated at most once,
//! every run done on version 2 shipped once ([`check_versions`]); the hash chains verify
//! across the `migrated` transitions.
//!
//! Reduced size here (150 runs); `E2E_SCALE=full` (scripts/reliability) runs 1,000.
//! `E2E_VERSIONS_RUNS` and `E2E_VERSIONS_KILLS` override.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, wait_all_final};
use e2e::versions::{check_versions, record_claims};
use e2e::{full_scale, now_ms, size};
use rand::Rng;
use sqlx::Row;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

/// The worker incarnations of version 1 are named `v1-N`.
fn is_v1(worker: &str) -> bool {
    worker.starts_with("v1-")
}

fn opts(url: &str, schema: &str, version: u32, incarnation: u32) -> WorkerOpts {
    let mut o = WorkerOpts::new(url, schema, &format!("v{version}-{incarnation}"));
    o.agent_version = version;
    o.lease_ms = 1_500;
    o.poll_ms = 100;
    // Slow enough that the migrations spread over seconds: the kills land among them.
    o.concurrency = 8;
    o.tool_latency = (5, 40);
    o.llm_latency = (5, 40);
    // The machine's PostgreSQL is shared (100 connections): stay small.
    o.store_pool = 4;
    o.service_pool = 2;
    o
}

/// A count from the test's schema.
async fn count(db: &TestDb, sql: &'static str) -> u64 {
    let (n,): (i64,) = sqlx::query_as(sql)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    u64::try_from(n).unwrap_or(0)
}

const FINAL_RUNS: &str = "SELECT count(*) FROM runs WHERE status IN ('completed', \
     'compensated', 'failed', 'quarantined', 'dead_lettered', 'cancelled', 'terminated')";
const MIGRATED: &str = "SELECT count(*) FROM transitions WHERE kind = 'migrated'";
/// Runs still on version 1 that a version 2 worker would migrate (not in a compensation
/// round, not final).
const TO_MIGRATE: &str =
    "SELECT count(*) FROM runs WHERE agent_version = 1 AND status IN ('running', 'waiting')";

/// Runs a version 1 process left under its lease (taken over by nobody yet).
const HELD_BY_V1: &str = "SELECT count(*) FROM runs WHERE lease_owner LIKE 'v1-%' AND status \
     IN ('running', 'waiting', 'compensating')";

/// Runs on version 2, not final, that nobody holds: what a version 1 process would take if
/// its claims did not filter by version.
const V2_CLAIMABLE: &str = "SELECT count(*) FROM runs WHERE agent_version = 2 AND status \
     IN ('running', 'compensating') AND (lease_owner IS NULL OR lease_expires_at <= now())";

/// Poll until `sql` counts at least `at_least`, or `timeout`.
async fn wait_count(db: &TestDb, sql: &'static str, at_least: u64, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        let n = count(db, sql).await;
        if n >= at_least || Instant::now() >= deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a killed worker held, by how far each run had got with its migration.
#[derive(Debug, Default, Clone, Copy)]
struct AtKill {
    /// Runs still on version 1 (a version 2 holder had claimed it, not yet migrated it).
    unmigrated: u64,
    /// Runs migrated whose first step on version 2 had not committed.
    migrated_step_pending: u64,
    /// Runs further on.
    other: u64,
}

async fn held_at_kill(db: &TestDb, worker: &str) -> AtKill {
    let rows = sqlx::query(
        "SELECT r.agent_version, r.version, (SELECT max(t.version) FROM transitions t \
         WHERE t.run_id = r.id AND t.kind = 'migrated') AS migrated_at FROM runs r \
         WHERE r.lease_owner = $1 AND r.status IN ('running', 'waiting', 'compensating')",
    )
    .bind(worker)
    .fetch_all(&db.pool)
    .await
    .unwrap_or_else(|e| panic!("held runs: {e}"));
    let mut at = AtKill::default();
    for r in rows {
        let agent_version: i32 = r.get("agent_version");
        let version: i64 = r.get("version");
        let migrated_at: Option<i64> = r.get("migrated_at");
        if agent_version == 1 {
            at.unmigrated += 1;
        } else if migrated_at == Some(version) {
            at.migrated_step_pending += 1;
        } else {
            at.other += 1;
        }
    }
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn rolling_deploy_under_kill9_migrates_every_run_once() {
    let Some(url) = database_url("versions").await else {
        return;
    };
    let runs = size("E2E_VERSIONS_RUNS", 150, 1_000);
    let kills_wanted = size("E2E_VERSIONS_KILLS", 6, 12);
    // Long enough for a worker to get a connection from a busy shared server.
    let phase = Duration::from_mins(3);
    let db = TestDb::create(&url, "versions").await;
    record_claims(&db).await;
    create_runs(&db, 0, runs).await;
    let bin = Path::new(BIN);
    let started = Instant::now();
    let mut crashed: HashSet<String> = HashSet::new();

    // Version 1 alone, until a tenth of the runs are done on it.
    let mut v1 = WorkerProc::spawn(bin, &opts(&url, &db.schema, 1, 0));
    let done_on_v1_alone = wait_count(&db, FINAL_RUNS, runs / 10, phase).await;
    assert!(
        done_on_v1_alone >= runs / 10,
        "version 1 finished {done_on_v1_alone} runs in {phase:?} (PostgreSQL out of connections?)"
    );

    // Version 2 beside it, until it has migrated a twentieth of them.
    let mut v2_gen = 0;
    let mut v2 = WorkerProc::spawn(bin, &opts(&url, &db.schema, 2, v2_gen));
    let migrated_beside_v1 = wait_count(&db, MIGRATED, (runs / 20).max(1), phase).await;
    assert!(
        migrated_beside_v1 > 0 && count(&db, TO_MIGRATE).await > 0,
        "version 2 migrated {migrated_beside_v1} runs in {phase:?} beside version 1, which left \
         none to migrate after it (PostgreSQL out of connections?)"
    );

    // The version 1 process dies with runs in hand: they are taken over and migrated.
    let v1_held = held_at_kill(&db, &v1.opts.worker_id).await;
    v1.kill9();
    crashed.insert(v1.opts.worker_id.clone());
    let v1_killed_ms = started.elapsed().as_millis();

    // kill -9 the version 2 process at random moments while runs are left to migrate.
    let mut v2_kills = Vec::new();
    let mut drill = None;
    let deadline = Instant::now() + Duration::from_secs(if full_scale() { 1_200 } else { 120 });
    // Past the kills wanted, killing goes on until the rollback drill has happened (a
    // loaded machine may let every kill land where the drill cannot run) or nothing is
    // left to migrate.
    while ((v2_kills.len() as u64) < kills_wanted || drill.is_none()) && Instant::now() < deadline {
        // Spread over the migrations: they take longer with more runs, and about two
        // seconds for the reduced size on an idle machine, where longer pauses let them
        // all land before the second kill.
        let pause = rand::rng().random_range(100..(600 * runs / 150).max(600));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if count(&db, TO_MIGRATE).await == 0 {
            break;
        }
        let id = v2.opts.worker_id.clone();
        let at = held_at_kill(&db, &id).await;
        v2.kill9();
        crashed.insert(id);
        v2_kills.push((now_ms(), at));
        // Not before the runs the first version 1 process held are taken over: the drill's
        // version 1 process would resume them, and they are the migrations that carry an
        // interrupted step over.
        if drill.is_none()
            && at.migrated_step_pending + at.other > 0
            && count(&db, HELD_BY_V1).await == 0
        {
            // Rollback drill: version 1 alone while the runs version 2 held are claimable.
            let old = WorkerProc::spawn(bin, &opts(&url, &db.schema, 1, 1));
            let lease = Duration::from_millis(old.opts.lease_ms);
            tokio::time::sleep(lease + Duration::from_secs(1)).await;
            let claimable = count(&db, V2_CLAIMABLE).await;
            let (code, report) = old.stop(Duration::from_secs(30));
            assert_eq!(
                code,
                Some(0),
                "the rollback drill's version 1 worker exited badly"
            );
            // The runs the killed process held may all have had their last commit land
            // after the kill (none left to claim): then the drill is tried at a later kill.
            if claimable > 0 {
                drill = Some((claimable, report));
            }
        }
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(0..300))).await;
        v2_gen += 1;
        v2 = WorkerProc::spawn(bin, &opts(&url, &db.schema, 2, v2_gen));
    }
    let left_to_migrate_after_kills = count(&db, TO_MIGRATE).await;
    let all_final = wait_all_final(
        &db,
        runs,
        Duration::from_secs(if full_scale() { 900 } else { 120 }),
    )
    .await;
    let wall = started.elapsed();
    let (code, v2_report) = v2.stop(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the last version 2 worker exited badly");
    assert!(all_final, "runs still open at the deadline");
    let (drill_claimable, drill_report) = drill.unwrap_or_default();

    let report = check(
        &db.pool,
        &Expect {
            runs,
            crashed_workers: crashed.clone(),
            ..Expect::default()
        },
    )
    .await;
    let versions = check_versions(&db.pool, is_v1).await;
    let window: (Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT ts_to_ms(min(created_at)), ts_to_ms(max(created_at)) FROM transitions \
         WHERE kind = 'migrated'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("migration window");
    let (first, last) = (window.0.unwrap_or(0), window.1.unwrap_or(0));
    let kills_in_window = v2_kills
        .iter()
        .filter(|(t, _)| *t >= first && *t <= last)
        .count();
    let mut held = AtKill::default();
    for (_, at) in &v2_kills {
        held.unmigrated += at.unmigrated;
        held.migrated_step_pending += at.migrated_step_pending;
        held.other += at.other;
    }
    let by_status: BTreeMap<&String, &u64> = report.statuses.iter().collect();
    println!(
        "versions: {runs} runs started on version 1, wall {:.1} s; {done_on_v1_alone} done by \
         version 1 alone, {migrated_beside_v1} migrated while version 1 ran beside version 2; \
         version 1 killed at {:.1} s holding {v1_held:?}; version 2 killed {} times ({} inside \
         the migration window of {:.1} s), holding in all {held:?}; runs left to migrate after \
         the kills {left_to_migrate_after_kills}; statuses {by_status:?}",
        wall.as_secs_f64(),
        f64::from(u32::try_from(v1_killed_ms).unwrap_or(u32::MAX)) / 1000.0,
        v2_kills.len(),
        kills_in_window,
        f64::from(u32::try_from(last - first).unwrap_or(0)) / 1000.0,
    );
    println!(
        "  migrations {} (carrying an interrupted step over: {}), runs by final version {:?}, \
         version 1 runs finished by version 2 (compensation rounds) {}, claims by version 1 \
         workers {:?} and by version 2 workers {:?} (all, of version 1 runs), version 1 tool \
         executions on later-migrated runs {}, shipments {}",
        versions.migrated,
        versions.carried_over,
        versions.runs_by_version,
        versions.v1_finished_by_v2,
        versions.claims_by_v1,
        versions.claims_by_v2,
        versions.v1_calls_before_migration,
        versions.shipped,
    );
    println!(
        "  check: reasked {}, steps taken over {}, executions deduplicated by key {}, \
         effects {}, violations {} + {}",
        report.reasked,
        report.steps_taken_over,
        report.deduplicated,
        report.effects,
        report.violations.len(),
        versions.violations.len(),
    );
    println!(
        "  rollback drill: {drill_claimable} version 2 runs claimable while the version 1 \
         process ran alone; it drove {:?}; the last version 2 process drove {:?}",
        drill_report.map(|r| (r.runs_driven, r.errors)),
        v2_report.map(|r| (r.runs_driven, r.errors)),
    );
    report.assert_clean();
    versions.assert_clean();
    // The scenario happened: runs finished on both versions, migrations landed (some with
    // a step carried over), and the version 2 process was killed at least once.
    assert!(
        versions.runs_by_version.get(&1).is_some_and(|n| *n > 0)
            && versions.runs_by_version.get(&2).is_some_and(|n| *n > 0),
        "runs on both versions: {:?}",
        versions.runs_by_version
    );
    assert!(versions.migrated > 0, "no run migrated");
    assert!(
        !v2_kills.is_empty(),
        "the version 2 process was never killed"
    );
    assert!(
        drill_claimable > 0,
        "the rollback drill did not happen, or left the version 1 process no version 2 run to \
         refuse"
    );
    assert!(
        versions.claims_by_v1.0 > 0 && versions.claims_by_v2.1 > 0,
        "both versions claimed runs: {:?} {:?}",
        versions.claims_by_v1,
        versions.claims_by_v2
    );
    db.drop().await;
}
