//! Issue 17, part 4: the kill -9 soak of child agents. 200 [`Fanout`] parents each start
//! five [`Leaf`] children and wait for them in the store; three worker processes (each a
//! worker for parents and one for children, on the same store) drive the trees while a
//! chaos driver sends SIGKILL to a random process every 0.3–1.5 s and restarts it as a new
//! incarnation, until every run is final.
//!
//! Pass: every parent completed with its five answers in creation order; exactly five
//! children per parent, with the derived ids, all completed, none orphaned; every run's
//! versions one chain (a parent's: start, [wait,] one step, so it was resumed and committed
//! once after its join); one child-start entry per parent naming the same five children;
//! every effect (each leaf's, each parent's publication) applied exactly once under the key
//! of its succeeded call, re-executions after a kill deduplicated by key and counted.
//!
//! `E2E_TREE_PARENTS` (200; 1,000 under `E2E_SCALE=full`) and `E2E_TREE_WORKERS` (3)
//! override the sizes.
//!
//! [`Fanout`]: e2e::tree::Fanout
//! [`Leaf`]: e2e::tree::Leaf

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::db::{TestDb, database_url};
use e2e::procs::{
    Agents, Held, WorkerOpts, WorkerProc, recovery_times, run_worker, wait_all_final,
};
use e2e::stats::Summary;
use e2e::tree::{CHILDREN, check_tree, create_parents};
use e2e::{full_scale, now_ms, size};
use rand::Rng;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn children_kill9_soak() {
    let Some(url) = database_url("children_kill9_soak").await else {
        return;
    };
    let parents = size("E2E_TREE_PARENTS", 200, 1_000);
    let workers = usize::try_from(size("E2E_TREE_WORKERS", 3, 3)).unwrap_or(3);
    let runs = parents * (1 + u64::from(CHILDREN));
    let lease_ms = 1_000;
    let poll_ms = 100;
    let db = TestDb::create(&url, "tree").await;
    create_parents(&db, 0, parents).await;

    let opts = |slot: usize, incarnation: u32| {
        let mut o = WorkerOpts::new(&url, &db.schema, &format!("tree-{slot}-{incarnation}"));
        o.agents = Agents::Tree;
        o.lease_ms = lease_ms;
        o.poll_ms = poll_ms;
        o.concurrency = 16;
        o.tool_latency = (0, 10);
        // Two workers (parents, children) share the store's pool.
        o.store_pool = 8;
        o
    };
    let mut gens = vec![0_u32; workers];
    let mut procs: Vec<WorkerProc> = (0..workers)
        .map(|s| WorkerProc::spawn(Path::new(BIN), &opts(s, 0)))
        .collect();
    let mut kills = Vec::new();
    let mut held_parents = 0;
    let mut held_children = 0;
    let mut held_waiting = 0;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(if full_scale() { 1_800 } else { 300 });
    let mut all_final = false;
    while Instant::now() < deadline {
        let pause = rand::rng().random_range(300..1_500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if wait_all_final(&db, runs, Duration::ZERO).await {
            all_final = true;
            break;
        }
        let slot = rand::rng().random_range(0..workers);
        let id = procs[slot].opts.worker_id.clone();
        procs[slot].kill9();
        let at = now_ms();
        // The runs it held, in one read: a parent that committed its wait but had not
        // released its lease yet is not being driven (its next commit waits for its
        // children, not for a takeover), so it is counted apart.
        let rows: Vec<(String, i64, String, Option<i64>)> = sqlx::query_as(
            "SELECT id, version, status, ts_to_ms(lease_expires_at) FROM runs \
             WHERE lease_owner = $1 AND status IN ('running', 'compensating', 'waiting')",
        )
        .bind(&id)
        .fetch_all(&db.pool)
        .await
        .expect("held runs");
        let mut held = Vec::new();
        for (run_id, version, status, exp) in rows {
            if status == "waiting" {
                held_waiting += 1;
            } else {
                held.push(Held {
                    run_id,
                    version,
                    lease_expires_ms: exp.unwrap_or(0),
                });
            }
        }
        for h in &held {
            if h.run_id.contains("/v") {
                held_children += 1;
            } else {
                held_parents += 1;
            }
        }
        kills.push((at, held));
        let restart = rand::rng().random_range(0..300);
        tokio::time::sleep(Duration::from_millis(restart)).await;
        gens[slot] += 1;
        procs[slot] = WorkerProc::spawn(Path::new(BIN), &opts(slot, gens[slot]));
    }
    if !all_final {
        all_final = wait_all_final(&db, runs, Duration::from_mins(1)).await;
    }
    let wall = started.elapsed();
    let mut lost = 0;
    for p in procs {
        let (code, report) = p.stop(Duration::from_secs(30));
        assert_eq!(code, Some(0), "a worker exited badly");
        lost += report.map_or(0, |r| r.leases_lost);
    }
    // Recovery: from the kill to the next commit of a run the killed incarnation held (a
    // commit it had in flight may land just after the kill: not counted).
    let mut recoveries = Vec::new();
    let mut slowest = Vec::new();
    for (at, held) in &kills {
        for h in held {
            if let Some(r) = recovery_times(&db.pool, *at, std::slice::from_ref(h))
                .await
                .pop()
                .filter(|r| *r >= 0)
            {
                recoveries.push(r);
                slowest.push((r, h.run_id.clone(), h.version));
            }
        }
    }
    slowest.sort_unstable_by(|a, b| b.cmp(a));
    slowest.truncate(5);
    let report = check_tree(&db.pool, db.store.as_ref(), parents).await;
    // Claims beyond the fewest possible (a leaf's one, a parent's two: its step, its wake).
    let (extra_claims,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(sum(epoch - CASE agent WHEN 'Leaf' THEN 1 ELSE 2 END), 0)::bigint \
         FROM runs",
    )
    .fetch_one(&db.pool)
    .await
    .expect("claims");
    println!(
        "children kill -9 soak: {parents} parents x {CHILDREN} children ({runs} runs), \
         {workers} worker processes (a parent and a child worker each), lease {lease_ms} ms, \
         poll {poll_ms} ms: {} kills in {:.1} s; runs held at a kill: {held_parents} parents, \
         {held_children} children (and {held_waiting} parents already waiting, lease not yet \
         released: excluded); recovery (kill -> next commit) {}; parents joined \
         {}/{parents}, children completed {}/{}; parents whose join held before they waited \
         {}; effects {}, tool executions {}, executions deduplicated by key {} ({:?}); steps \
         re-executed after a kill {}; claims beyond one per step {extra_claims}; leases lost \
         (survivors) {lost}",
        kills.len(),
        wall.as_secs_f64(),
        Summary::of(&recoveries),
        report.parents_joined,
        report.children_ok,
        parents * u64::from(CHILDREN),
        report.joined_without_waiting,
        report.effects,
        report.executions,
        report.deduplicated_total(),
        report.deduplicated,
        report.steps_taken_over,
    );
    println!("  statuses: {:?}", report.statuses);
    println!("  slowest recoveries (ms, run, version held): {slowest:?}");
    assert!(
        all_final,
        "runs still open at the deadline: {:?}",
        report.statuses
    );
    report.assert_clean();
    assert_eq!(report.parents_joined, parents);
    assert_eq!(report.children_ok, parents * u64::from(CHILDREN));
    assert_eq!(report.effects, runs, "one effect per run");
    assert!(!kills.is_empty(), "the chaos driver killed nobody");
    db.drop().await;
}

async fn exec(db: &TestDb, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The tree's checker checks: clean after a run without faults, and each kind of damage
/// the soak asserts the absence of is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_checker_reports_each_kind_of_damage() {
    let Some(url) = database_url("tree_checker").await else {
        return;
    };
    let parents = 8;
    let runs = parents * (1 + u64::from(CHILDREN));
    let db = TestDb::create(&url, "tree_checker").await;
    create_parents(&db, 0, parents).await;
    let mut o = WorkerOpts::new(&url, &db.schema, "w");
    o.agents = Agents::Tree;
    o.poll_ms = 50;
    o.exit_when_done = runs;
    let report = run_worker(&o, std::future::pending()).await;
    assert!(wait_all_final(&db, runs, Duration::from_secs(30)).await);
    // Each child once; each parent twice (its wait, its join).
    assert_eq!(report.runs_driven, parents * (2 + u64::from(CHILDREN)));
    let clean = check_tree(&db.pool, db.store.as_ref(), parents).await;
    clean.assert_clean();
    assert_eq!(clean.parents_joined, parents);
    assert_eq!(clean.joined_without_waiting, 0);

    let copy_run = |id: &str, from: &str, spawned_by: &str| {
        format!(
            "INSERT INTO runs (id, agent, fingerprint, state_name, state, version, status, \
             creation_hash, last_hash, spawned_by, spawned_at_version) SELECT '{id}', agent, \
             fingerprint, state_name, state, 0, status, creation_hash, last_hash, {spawned_by}, \
             spawned_at_version FROM runs WHERE id = '{from}'"
        )
    };
    let damages: Vec<(String, &str)> = vec![
        // A child started again by a later version of its parent.
        (
            copy_run("fanout-00000/v2/0", "fanout-00000/v0/0", "spawned_by"),
            "has children",
        ),
        // A child nobody owns.
        (
            copy_run("stray/v0/0", "fanout-00000/v0/1", "NULL"),
            "orphan run stray/v0/0",
        ),
        // A child left unfinished under a completed parent.
        (
            "UPDATE runs SET status = 'running' WHERE id = 'fanout-00001/v0/4'".into(),
            "child fanout-00001/v0/4",
        ),
        // A leaf's effect lost.
        (
            "DELETE FROM e2e_effects WHERE key = 'fanout-00002/v0/0:0:0'".into(),
            "lost effect",
        ),
        // A leaf's effect applied again under another key.
        (
            "INSERT INTO e2e_effects (key, tool, run_id, target, first_worker) SELECT \
             'fanout-00003/v0/0:0:9', tool, run_id, target, 'x' FROM e2e_effects \
             WHERE key = 'fanout-00003/v0/0:0:0'"
                .into(),
            "effects [\"Work\", \"Work\"]",
        ),
        // A parent committed its step twice (resumed twice).
        (
            "UPDATE transitions SET kind = 'step' WHERE run_id = 'fanout-00004' AND version = 1"
                .into(),
            "is not start, [wait,] one step",
        ),
        // A parent's children started twice.
        (
            "INSERT INTO journal (run_id, version, seq, kind, state, name, tool_kind, \
             input_hash, input, idempotency_key, status, output, attempts, duration_ms, \
             started_at) SELECT run_id, 1, seq, kind, state, name, tool_kind, input_hash, \
             input, idempotency_key, status, output, attempts, duration_ms, started_at \
             FROM journal WHERE run_id = 'fanout-00005' AND kind = 'child'"
                .into(),
            "v1#0 child Leaf",
        ),
        // Two workers' executions of one step interleaved.
        (
            "INSERT INTO e2e_calls (id, run_id, version, seq, tool, key, worker, started_ms) \
             SELECT 'x1', run_id, version, seq, tool, key, 'other', started_ms + 1 FROM e2e_calls \
             WHERE run_id = 'fanout-00006/v0/0'; \
             INSERT INTO e2e_calls (id, run_id, version, seq, tool, key, worker, started_ms) \
             SELECT 'x2', run_id, version, seq, tool, key, 'w', started_ms + 2 FROM e2e_calls \
             WHERE run_id = 'fanout-00006/v0/0' AND id = 'x1'"
                .into(),
            "interleaved",
        ),
    ];
    for (sql, _) in &damages {
        exec(&db, sql).await;
    }
    let report = check_tree(&db.pool, db.store.as_ref(), parents).await;
    for (sql, words) in &damages {
        assert!(
            report.violations.iter().any(|v| v.contains(words)),
            "damage not reported ({words}): {sql}\nviolations: {:#?}",
            report.violations
        );
    }
    db.drop().await;
}
