//! Item 6: poison runs. A tool that panics every time (in process, `MemoryStore`) and one
//! that aborts its worker process (child processes on PostgreSQL) must end dead-lettered
//! after `RunnerConfig::max_claims_without_progress` attempts, while healthy runs keep
//! flowing: their throughput next to poison runs is compared with a baseline measured in
//! the same test (printed; asserted only against a generous bound).

use std::collections::HashSet;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use agent_conformance::fixture::{self, World};
use agent_core::runner::{RunnerConfig, Worker, WorkerConfig};
use agent_core::store::memory::MemoryStore;
use agent_core::store::{RunFilter, RunStatus, Store};
use battery::order;
use battery::{Action, Behaviour, CallLog, probe_all, size};
use serde_json::{Value, json};

/// Attempts before a poison run is dead-lettered.
const MAX_CLAIMS: u32 = 3;
const LEASE: Duration = Duration::from_millis(150);
/// The lease of the child workers (process start and a debug build on busy cores).
const CHILD_LEASE: Duration = Duration::from_millis(400);

fn poison(action: Action) -> Behaviour {
    Arc::new(move |tool: &str, input: &Value| {
        let poisoned = tool == "Lookup"
            && input
                .get("sku")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("poison"));
        if poisoned { action } else { Action::Pass }
    })
}

/// Keep the expected panics of poison tools out of the test output.
fn quiet_poison_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or_default();
            if !msg.starts_with("poison tool") {
                default(info);
            }
        }));
    });
}

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        max_claims_without_progress: MAX_CLAIMS,
        ..order::config(worker, LEASE)
    }
}

/// Whether every run of `ids` is final. One query for the runs not final yet, so that the
/// watcher (which asks often) takes little from the workers it measures.
async fn all_final(store: &dyn Store, ids: &[String]) -> bool {
    let unfinished = RunFilter {
        statuses: RunStatus::ALL
            .into_iter()
            .filter(|s| !s.is_final())
            .collect(),
        ..RunFilter::default()
    };
    let Ok(runs) = store.list_runs(&unfinished).await else {
        return false;
    };
    let ids: HashSet<&str> = ids.iter().map(String::as_str).collect();
    !runs.iter().any(|r| ids.contains(r.id.as_str()))
}

/// One round: `healthy` runs (and `poisoned` poison runs, created first so they are
/// claimed first); returns the seconds until every healthy run completed. `inert` runs of
/// another agent are stored too and never claimed: the baseline holds as many runs as the
/// poison round, since `MemoryStore::claim_next` scans every run.
async fn round(
    healthy: usize,
    poisoned: usize,
    inert: usize,
    tag: &str,
) -> (f64, Arc<dyn Store>, Arc<CallLog>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let world = Arc::new(World::default());
    let log = CallLog::new();
    let runner = order::runner(
        &store,
        probe_all(&order::tools(&world), &log, &poison(Action::Panic)),
        Arc::new(fixture::router("Pay")),
        config(&format!("worker-{tag}")),
    );
    for i in 0..poisoned {
        runner
            .start(&format!("poison-{i}"), fixture::initial(&["poison", "a"]))
            .await
            .unwrap();
    }
    for i in 0..inert {
        store
            .create_run(agent_core::store::NewRun::new(
                format!("inert-{i}"),
                "Inert",
                "inert",
                "Start",
                json!({ "Start": { "items": ["poison", "a"] } }),
            ))
            .await
            .unwrap();
    }
    let mut ids = Vec::new();
    for i in 0..healthy {
        let id = format!("healthy-{i}");
        runner
            .start(&id, fixture::initial(&["a", "bb"]))
            .await
            .unwrap();
        runner
            .signal(&id, "confirm", json!({"ok": true}))
            .await
            .unwrap();
        ids.push(id);
    }
    let worker = Worker::new(
        runner,
        WorkerConfig {
            concurrency: 8,
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
    );
    let started = Instant::now();
    let watcher = Arc::clone(&store);
    let done = async move {
        while !all_final(watcher.as_ref(), &ids).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_mins(2), worker.run_until(done))
        .await
        .expect("healthy runs complete");
    let elapsed = started.elapsed().as_secs_f64();
    if poisoned > 0 {
        // Let the poison runs exhaust their attempts.
        let poison_ids: Vec<String> = (0..poisoned).map(|i| format!("poison-{i}")).collect();
        let watcher = Arc::clone(&store);
        let done = async move {
            while !all_final(watcher.as_ref(), &poison_ids).await {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_mins(1), worker.run_until(done))
            .await
            .expect("poison runs dead-lettered");
    }
    (elapsed, store, log)
}

/// A tool that panics every time: dead-lettered (`crash_loop`) after exactly
/// `MAX_CLAIMS` attempts; healthy throughput compared with a baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_tool_is_dead_lettered_and_healthy_runs_flow() {
    quiet_poison_panics();
    let healthy = size(300, 3000);
    let poisoned = healthy / 10;
    let mut ratios = Vec::new();
    let mut short = 0;
    // Rounds alternate which comes first, so that a machine speeding up or slowing down
    // during the test does not favour either side.
    let reps = size(3, 5);
    for rep in 0..reps {
        let (base_tag, poison_tag) = (format!("base-{rep}"), format!("poison-{rep}"));
        let base_round = || round(healthy, 0, poisoned, &base_tag);
        let poison_round = || round(healthy, poisoned, 0, &poison_tag);
        let (base, (with_poison, store, log)) = if rep % 2 == 0 {
            let base = base_round().await.0;
            (base, poison_round().await)
        } else {
            let poisoned_round = poison_round().await;
            (base_round().await.0, poisoned_round)
        };
        ratios.push(base / with_poison);
        for i in 0..poisoned {
            let id = format!("poison-{i}");
            let r = store.load_run(&id).await.unwrap().unwrap();
            assert_eq!(r.status, RunStatus::DeadLettered, "{id}: {r:?}");
            assert_eq!(
                r.error.as_ref().map(|e| e.code.as_str()),
                Some("crash_loop")
            );
            let attempts = log
                .calls_of(&id)
                .iter()
                .filter(|c| c.tool == "Lookup")
                .count();
            // Exactly MAX_CLAIMS when every claim reaches the tool; fewer when a claimed
            // run waited longer than its lease and was claimed again (each claim counts).
            assert!(
                (1..=MAX_CLAIMS as usize).contains(&attempts),
                "{id}: the poison tool ran {attempts} times"
            );
            if attempts < MAX_CLAIMS as usize {
                short += 1;
            }
        }
        eprintln!(
            "round {rep}: baseline {base:.3}s, with {poisoned} poison runs {with_poison:.3}s"
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    eprintln!(
        "FIGURE item6 panic: healthy={healthy} poison={poisoned} max_claims={MAX_CLAIMS} \
         lease={}ms throughput_ratio_median={median:.2} ratios={ratios:.2?} \
         dead_lettered_before_max_attempts={short}/{}",
        LEASE.as_millis(),
        3 * poisoned
    );
    // The target is 0.9; timing on shared CI cores is noisy, so the assertion is generous
    // and the measured figure goes to RELIABILITY.md.
    assert!(
        median >= 0.5,
        "healthy throughput fell to {median:.2} of the baseline"
    );
}

/// The child side of `aborting_tool_is_dead_lettered`: a worker process on the schema in
/// `BATTERY_SCHEMA` that aborts when the poison tool is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of aborting_tool_is_dead_lettered"]
async fn child_abort_worker() {
    if !battery::child::is("abort-worker") {
        return;
    }
    let schema = std::env::var("BATTERY_SCHEMA").expect("BATTERY_SCHEMA");
    let store = battery::pg::open(&schema).await.expect("PostgreSQL");
    let store: Arc<dyn Store> = store;
    let world = Arc::new(World::default());
    let log = CallLog::new();
    let runner = order::runner(
        &store,
        probe_all(&order::tools(&world), &log, &poison(Action::Abort)),
        Arc::new(fixture::router("Pay")),
        RunnerConfig {
            lease_ttl: CHILD_LEASE,
            // The supervisor's slot: a restarted process has its predecessor's id.
            ..config(&std::env::var("BATTERY_WORKER_ID").expect("BATTERY_WORKER_ID"))
        },
    );
    let worker = Worker::new(
        runner,
        WorkerConfig {
            concurrency: 4,
            poll_interval: Duration::from_millis(20),
            // What the previous process of this slot held is taken over at once.
            expire_own_leases_at_start: true,
            retention: None,
        },
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let ids: Vec<String> = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    // Work first: a restarted worker process is judged by how soon it serves again.
    loop {
        worker.run_until_idle().await;
        if Instant::now() >= deadline || all_final(store.as_ref(), &ids).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What an abort round saw.
struct AbortRound {
    /// Seconds until every healthy run was final.
    healthy_secs: f64,
    /// Children that did not exit cleanly.
    aborted: u32,
    /// Poison runs not dead-lettered with `crash_loop`.
    poison_problems: Vec<String>,
    /// Healthy runs that did not complete (collateral damage of the aborts).
    victims: Vec<String>,
}

/// Keep `workers` abort-worker children running (a supervisor restarting each one that
/// exits) until every run is final.
async fn abort_round(healthy: usize, poisoned: usize, workers: usize) -> Option<AbortRound> {
    let store = battery::pg::fresh().await?;
    let dyn_store: Arc<dyn Store> = store.clone();
    let world = Arc::new(World::default());
    let first_worker = order::runner(
        &dyn_store,
        order::tools(&world),
        Arc::new(fixture::router("Pay")),
        config("first_worker"),
    );
    for i in 0..poisoned {
        first_worker
            .start(&format!("poison-{i}"), fixture::initial(&["poison", "a"]))
            .await
            .unwrap();
    }
    let mut ids = Vec::new();
    for i in 0..healthy {
        let id = format!("healthy-{i}");
        first_worker
            .start(&id, fixture::initial(&["a", "bb"]))
            .await
            .unwrap();
        first_worker
            .signal(&id, "confirm", json!({"ok": true}))
            .await
            .unwrap();
        ids.push(id);
    }
    let poison_ids: Vec<String> = (0..poisoned).map(|i| format!("poison-{i}")).collect();
    let spawn = |slot: usize| {
        battery::child::command("poison::child_abort_worker")
            .env("BATTERY_WORKER_ID", format!("slot-{slot}"))
            .env("BATTERY_CHILD", "abort-worker")
            .env("BATTERY_SCHEMA", store.schema())
            .env("RUST_BACKTRACE", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn child worker")
    };
    let started = Instant::now();
    let mut healthy_done: Option<f64> = None;
    let mut aborted = 0;
    let budget = (MAX_CLAIMS as usize + 2) * poisoned.max(1) + 3 + workers;
    let mut spawned = workers;
    let mut children: Vec<Option<std::process::Child>> =
        (0..workers).map(|slot| Some(spawn(slot))).collect();
    while children.iter().any(Option::is_some) {
        if healthy_done.is_none() && all_final(dyn_store.as_ref(), &ids).await {
            healthy_done = Some(started.elapsed().as_secs_f64());
        }
        for (n, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            let Some(status) = child.try_wait().expect("child status") else {
                continue;
            };
            if !status.success() {
                aborted += 1;
            }
            let everything_final = all_final(dyn_store.as_ref(), &ids).await
                && all_final(dyn_store.as_ref(), &poison_ids).await;
            *slot = (!everything_final && spawned < budget).then(|| {
                spawned += 1;
                spawn(n)
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let healthy_done = healthy_done.unwrap_or_else(|| started.elapsed().as_secs_f64());
    let mut victims = Vec::new();
    for id in &ids {
        let r = dyn_store.load_run(id).await.unwrap().unwrap();
        if r.status != RunStatus::Completed {
            victims.push(format!("{id}: {} {:?}", r.status, r.error));
        }
    }
    let mut problems = Vec::new();
    for i in 0..poisoned {
        let id = format!("poison-{i}");
        let r = dyn_store.load_run(&id).await.unwrap().unwrap();
        if r.status != RunStatus::DeadLettered
            || r.error.as_ref().map(|e| e.code.as_str()) != Some("crash_loop")
        {
            problems.push(format!("{id}: {} {:?}", r.status, r.error));
        }
    }
    battery::pg::drop(&store).await;
    Some(AbortRound {
        healthy_secs: healthy_done,
        aborted,
        poison_problems: problems,
        victims,
    })
}

/// A tool that aborts its worker process: the run is dead-lettered (`crash_loop`) after at
/// most `MAX_CLAIMS` aborted workers (fewer when a slow child lets the lease expire and
/// claims the run twice), every healthy run completes, and the time of the healthy runs is
/// compared with a baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_tool_is_dead_lettered() {
    abort_rounds(1).await;
}

/// The same with two worker processes, each restarted when it exits (as a supervisor
/// would): the other keeps serving while one restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_tool_with_two_worker_processes() {
    abort_rounds(2).await;
}

async fn abort_rounds(workers: usize) {
    let healthy = size(20, 200);
    let Some(base) = abort_round(healthy, 0, workers).await else {
        return;
    };
    assert!(base.victims.is_empty(), "{:#?}", base.victims);
    assert_eq!(base.aborted, 0);
    let round = abort_round(healthy, 1, workers).await.expect("PostgreSQL");
    eprintln!(
        "FIGURE item6 abort: workers={workers} healthy={healthy} poison=1 max_claims={MAX_CLAIMS} \
         child_lease={}ms aborted_children={} baseline={:.2}s with_poison={:.2}s \
         throughput_ratio={:.2} healthy_runs_dead_lettered={}",
        CHILD_LEASE.as_millis(),
        round.aborted,
        base.healthy_secs,
        round.healthy_secs,
        base.healthy_secs / round.healthy_secs,
        round.victims.len()
    );
    assert!(
        round.poison_problems.is_empty(),
        "{:#?}",
        round.poison_problems
    );
    // Healthy runs that died with the poison's worker were charged for those claims; a
    // suspect runs alone and the runs claimed with it wait uncounted, so none of them
    // reaches the limit.
    assert!(round.victims.is_empty(), "{:#?}", round.victims);
    assert!(
        (1..=MAX_CLAIMS).contains(&round.aborted),
        "{} aborted workers",
        round.aborted
    );
}
