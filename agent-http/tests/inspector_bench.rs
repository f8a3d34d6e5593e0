//! How long the server takes for each of the inspector's pages on a large SQLite store, against
//! the store reads each page needs measured in the same run, and how many bytes each page is.
//!
//! The store: runs of three agents (a tenth failed, two labels, a few with a note to search
//! for, some leased by three workers), one run of the fixture agent waiting for its signal,
//! and one long run: thousands of steps of a few journal entries each, calls of its current
//! step pending, children and grandchildren. Every page is timed over HTTP (the median of a
//! few loads after one to warm up); its floor is the same store reads without HTTP or HTML,
//! made here as the page makes them. A program that prints figures, not a timed assertion:
//! by default at a reduced size (fast in a debug build, so that every page is loaded on a
//! store with all of these); at full size (100,000 runs, a run of 2,000 steps) with
//!
//! ```console
//! $ cargo test --workspace --release --test inspector_bench -- --ignored --nocapture
//! $ INSPECTOR_BENCH_RUNS=20000 cargo test --workspace --test inspector_bench -- --ignored --nocapture
//! ```

extern crate durable_agents_http as agent_http;

mod common;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use agent_core::store::{CallStatus, NewRun, RunFilter, RunRecord, RunStatus, Store};
use agent_http::ApiConfig;
use common::{Db, Server};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the store holds and how often each page is loaded.
#[derive(Clone, Copy)]
struct Size {
    runs: usize,
    steps: u64,
    entries_per_step: u32,
    children: usize,
    loads: usize,
}

/// The inspector's constants the floors repeat (`agent-http/src/inspector/pages`).
const TIMELINE_PAGE: u64 = 50;
const HISTORY_READ: usize = 2000;
const JOURNAL_READ: usize = 2000;
const VERIFIED_VERSIONS: u64 = 1000;
const TREE_DEPTH: usize = 3;
const TREE_WIDTH: usize = 20;
const TREE_READS: usize = 60;
const TREE_NODES: usize = 200;
const ANCESTORS: usize = 20;
const SEARCH_SCAN: usize = 500;
const TIMING_STEPS: u64 = 500;
const TIMING_ENTRIES: usize = 1500;
const WORKERS_SCAN: usize = 2000;
const OPEN: [RunStatus; 3] = [
    RunStatus::Running,
    RunStatus::Compensating,
    RunStatus::Waiting,
];

/// A page's store reads, as a closure the bench times.
type Reads<'a> = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>;

fn reads<'a, F, Fut>(f: F) -> Reads<'a>
where
    F: Fn() -> Fut + 'a,
    Fut: Future<Output = ()> + 'a,
{
    Box::new(move || Box::pin(f()))
}

/// The median of `n` runs of `f`, after one to warm up; the output of the last.
async fn median<T, F, Fut>(n: usize, mut f: F) -> (Duration, T)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut times = Vec::new();
    let mut out = None;
    for i in 0..=n {
        let t = Instant::now();
        let o = f().await;
        if i > 0 {
            times.push(t.elapsed());
        }
        out = Some(o);
    }
    times.sort();
    (times[times.len() / 2], out.expect("at least one load"))
}

/// A page loaded `n` times (its redirect not followed): the median time and the last body.
async fn load(c: &reqwest::Client, url: &str, status: u16, n: usize) -> (Duration, String) {
    median(n, || async {
        let resp = c.get(url).send().await.expect("get");
        assert_eq!(resp.status(), status, "{url}");
        resp.text().await.unwrap()
    })
    .await
}

fn children_of(parent: &str, limit: Option<usize>) -> RunFilter {
    RunFilter {
        spawned_by: Some(parent.to_owned()),
        limit,
        ..RunFilter::default()
    }
}

/// The reads of a run's family (breadcrumbs, roll-up, bounded tree), as the run page makes
/// them (`run_family.rs`).
async fn family_reads(store: &dyn Store, run: &RunRecord) {
    let mut next = run.spawned_by.as_ref().map(|s| s.run_id.clone());
    let mut depth = 0;
    while let Some(id) = next {
        if depth == ANCESTORS {
            break;
        }
        depth += 1;
        next = store
            .load_run(&id)
            .await
            .unwrap()
            .and_then(|p| p.spawned_by.map(|s| s.run_id));
    }
    let counts = store.count_runs(&children_of(&run.id, None)).await.unwrap();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let mut queue = VecDeque::from([(run.id.clone(), total, 0)]);
    let (mut nodes, mut reads) = (0, 0);
    while let Some((parent, total, depth)) = queue.pop_front() {
        let room = TREE_NODES - nodes;
        if total == 0 || depth == TREE_DEPTH || reads == TREE_READS || room == 0 {
            continue;
        }
        reads += 1;
        let listed = store
            .list_runs(&children_of(&parent, Some(TREE_WIDTH.min(room))))
            .await
            .unwrap();
        for child in listed {
            let n = store
                .count_runs(&children_of(&child.id, None))
                .await
                .unwrap()
                .iter()
                .map(|(_, n)| n)
                .sum();
            nodes += 1;
            queue.push_back((child.id, n, depth + 1));
        }
    }
}

/// The reads of a run's page at page `timeline` of its timeline (`run_page.rs`).
async fn run_page_reads(store: &dyn Store, id: &str, timeline: u64) {
    store.event_head().await.unwrap();
    let run = store.load_run(id).await.unwrap().expect("the run");
    let first_read = (run.version + 1).saturating_sub(HISTORY_READ as u64);
    store
        .history_from(id, first_read, HISTORY_READ)
        .await
        .unwrap();
    store.journal(id, Some(run.version)).await.unwrap();
    store.pending_signals(id).await.unwrap();
    family_reads(store, &run).await;
    store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await
        .unwrap();
    if run.version <= VERIFIED_VERSIONS {
        agent_core::store::verify::verify_run(store, &run)
            .await
            .unwrap();
    }
    let oldest = store
        .version_span(id)
        .await
        .unwrap()
        .map_or(run.version, |s| s.first.min(run.version));
    let pages = (run.version + 1 - oldest).div_ceil(TIMELINE_PAGE).max(1);
    let page = timeline.min(pages - 1);
    let last_shown = run.version - (page * TIMELINE_PAGE).min(run.version);
    let first_shown = (last_shown + 1).saturating_sub(TIMELINE_PAGE).max(oldest);
    let before = first_shown.saturating_sub(1);
    let versions = usize::try_from(last_shown - before + 1).unwrap();
    for t in store.history_from(id, before, versions).await.unwrap() {
        store.state_at(id, t.version).await.unwrap();
    }
    store
        .journal_from(id, (first_shown, 0), JOURNAL_READ)
        .await
        .unwrap();
}

/// The reads of the runs page: where the events end, a page of runs (one more, to know
/// whether another follows), the counts per status, the agents (`runs_page.rs`).
async fn runs_page_reads(store: &dyn Store, list: RunFilter, count: RunFilter) {
    store.event_head().await.unwrap();
    store.list_runs(&list).await.unwrap();
    store.count_runs(&count).await.unwrap();
    store.agents().await.unwrap();
}

fn page_of(limit: usize) -> RunFilter {
    RunFilter {
        limit: Some(limit + 1),
        ..RunFilter::default()
    }
}

/// Seed the store: the runs, the fixture agent's waiting run, the long run and its family,
/// and runs leased by workers.
async fn seed(db: &Db, size: Size) {
    let t = Instant::now();
    for i in 0..size.runs {
        let agent = ["Checkout", "Support", "Refund"][i % 3];
        let mut state = json!({"i": i, "cart": ["apple", "kiwi"]});
        if i % 1000 == 7 {
            state["note"] = json!("the customer sent a Teapot");
        }
        db.store
            .create_run(
                NewRun::new(format!("run-{i:06}"), agent, "f", "Start", state)
                    .with_label("tenant", if i % 2 == 0 { "acme" } else { "globex" }),
            )
            .await
            .unwrap();
        if i % 10 == 3 {
            db.store
                .set_status(&format!("run-{i:06}"), RunStatus::Failed, None)
                .await
                .unwrap();
        }
    }
    println!("created {} runs in {:.1?}", size.runs, t.elapsed());
    // An agent with a stored graph (its page), a run waiting for a signal.
    db.drive("order-waiting", "Pay").await;

    // The long run: steps of a few journal entries each.
    let t = Instant::now();
    let lease = db
        .claimed(
            NewRun::new("long", "Looper", "f", "Tick", json!({"Tick": {"i": 0}})),
            "bench",
        )
        .await;
    common::commit_steps(&db.store, &lease, "long", size.steps, size.entries_per_step).await;
    // The current step's calls, sent with no result yet (one retried).
    for seq in 0..3 {
        let mut e = common::lookup_entry("long", seq);
        e.version = size.steps;
        e.status = CallStatus::Started;
        e.output = None;
        e.finished_at = None;
        e.attempts = if seq == 0 { 2 } else { 1 };
        db.store.record_entry(&lease, &e).await.unwrap();
    }
    // Its children, the newest of them with children of their own.
    for c in 0..size.children {
        let id = format!("long.{c:04}");
        db.store
            .create_run(
                NewRun::new(&id, "Looper", "f", "Tick", json!({"Tick": {"i": c}}))
                    .spawned_by("long", 1),
            )
            .await
            .unwrap();
        if c + TREE_WIDTH >= size.children {
            for g in 0..3 {
                db.store
                    .create_run(
                        NewRun::new(
                            format!("{id}.{g}"),
                            "Looper",
                            "f",
                            "Tick",
                            json!({"Tick": {"i": g}}),
                        )
                        .spawned_by(&id, 1),
                    )
                    .await
                    .unwrap();
            }
        }
    }
    println!(
        "recorded the long run ({} steps of {} entries, {} children) in {:.1?}",
        size.steps,
        size.entries_per_step,
        size.children,
        t.elapsed()
    );
    // Runs held by three workers (the workers page).
    for i in 0..30 {
        let id = format!("run-{:06}", i * 10);
        let worker = ["worker-a", "worker-b", "worker-c"][i % 3];
        db.store
            .claim_run(&id, worker, Duration::from_mins(30))
            .await
            .unwrap();
    }
}

/// Every page of the inspector on a store of `size`: a table of server time, store reads,
/// their ratio and the page's size.
async fn bench(size: Size) {
    let db = Db::new().await;
    seed(&db, size).await;
    let store: &dyn Store = db.store.as_ref();
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    // `common::client`'s provider, and redirects left to the bench.
    drop(common::client());
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_mins(5))
        .build()
        .unwrap();
    let n = size.loads;

    // The 21st page of the runs, by cursor.
    let mut deep = String::from("/ui/");
    for _ in 0..20 {
        let page = c
            .get(server.url(&deep))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let q = page
            .split(r#"id="next-page" href="./?"#)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a next page")
            .replace("&#38;", "&")
            .replace("&amp;", "&");
        deep = format!("/ui/?{q}");
    }
    let last_timeline = size.steps / TIMELINE_PAGE;
    let middle = last_timeline / 2;
    let steps = size.steps;
    let grandchild = format!("long.{:04}.0", size.children - 1);
    let filtered = &RunFilter {
        agent: Some("Refund".into()),
        statuses: vec![RunStatus::Failed],
        labels: [("tenant".to_owned(), "acme".to_owned())].into(),
        ..RunFilter::default()
    };
    let search = move |q: &'static str| -> Reads<'_> {
        reads(move || async move {
            store.load_run(q).await.unwrap();
            runs_page_reads(store, page_of(SEARCH_SCAN), RunFilter::default()).await;
        })
    };
    let run_page = move |id: String, timeline: u64| -> Reads<'_> {
        reads(move || {
            let id = id.clone();
            async move { run_page_reads(store, &id, timeline).await }
        })
    };
    let pages: Vec<(String, String, u16, Reads<'_>)> = vec![
        (
            "runs, first page of 50, counts per status".into(),
            "/ui/".into(),
            200,
            reads(move || runs_page_reads(store, page_of(50), RunFilter::default())),
        ),
        (
            "runs, 21st page by cursor (floor: the first page's reads)".into(),
            deep,
            200,
            reads(move || runs_page_reads(store, page_of(50), RunFilter::default())),
        ),
        (
            "runs, filtered by agent, status and label".into(),
            "/ui/?agent=Refund&status=failed&label=tenant%3Dacme".into(),
            200,
            reads(move || {
                let list = RunFilter {
                    limit: Some(51),
                    ..filtered.clone()
                };
                runs_page_reads(store, list, filtered.clone())
            }),
        ),
        (
            "runs, the live section (`fragment=rows`)".into(),
            "/ui/?fragment=rows".into(),
            200,
            reads(move || runs_page_reads(store, page_of(50), RunFilter::default())),
        ),
        (
            "search, a whole id (redirects to the run)".into(),
            "/ui/?q=run-000123".into(),
            303,
            reads(move || async move {
                store.load_run("run-000123").await.unwrap();
            }),
        ),
        (
            "search, the first characters of ids (500 runs scanned)".into(),
            "/ui/?q=run-0001".into(),
            200,
            search("run-0001"),
        ),
        (
            "search, text in the states (500 runs scanned)".into(),
            "/ui/?q=teapot".into(),
            200,
            search("teapot"),
        ),
        (
            "runs, the children of the long run".into(),
            "/ui/?parent=long".into(),
            200,
            reads(move || {
                runs_page_reads(
                    store,
                    children_of("long", Some(51)),
                    children_of("long", None),
                )
            }),
        ),
        (
            format!("run of {steps} steps, newest page (tree, pending calls)"),
            "/ui/runs/long".into(),
            200,
            run_page("long".into(), 0),
        ),
        (
            format!("run of {steps} steps, timeline page {}", middle + 1),
            format!("/ui/runs/long?timeline={middle}"),
            200,
            run_page("long".into(), middle),
        ),
        (
            format!("run of {steps} steps, oldest page"),
            format!("/ui/runs/long?timeline={last_timeline}"),
            200,
            run_page("long".into(), last_timeline),
        ),
        (
            format!("run of {steps} steps, the live section (`fragment=live`)"),
            "/ui/runs/long?fragment=live".into(),
            200,
            run_page("long".into(), 0),
        ),
        (
            "a grandchild's page (breadcrumbs)".into(),
            format!("/ui/runs/{grandchild}"),
            200,
            run_page(grandchild.clone(), 0),
        ),
        (
            "the fixture's waiting run (graph, signal form, verified)".into(),
            "/ui/runs/order-waiting".into(),
            200,
            run_page("order-waiting".into(), 0),
        ),
        (
            format!("timing of the run of {steps} steps"),
            "/ui/runs/long/timing".into(),
            200,
            reads(move || async move {
                let run = store.load_run("long").await.unwrap().unwrap();
                let base = run.version.saturating_sub(TIMING_STEPS);
                let count = usize::try_from(run.version - base + 1).unwrap();
                store.history_from("long", base, count).await.unwrap();
                store
                    .journal_from("long", (base.saturating_sub(1), 0), TIMING_ENTRIES + 1)
                    .await
                    .unwrap();
                store
                    .agent_graph(&run.agent, Some(&run.fingerprint))
                    .await
                    .unwrap();
            }),
        ),
        (
            "a journal entry".into(),
            format!("/ui/runs/long/entries/{}/0", steps - 1),
            200,
            reads(move || async move {
                store.journal("long", Some(steps - 1)).await.unwrap();
            }),
        ),
        (
            "edit page, the waiting run".into(),
            "/ui/runs/order-waiting/edit".into(),
            200,
            reads(move || async move {
                let run = store.load_run("order-waiting").await.unwrap().unwrap();
                store
                    .agent_graph(&run.agent, Some(&run.fingerprint))
                    .await
                    .unwrap();
            }),
        ),
        (
            format!("run of {steps} steps as JSON (`export.json`)"),
            "/ui/runs/long/export.json".into(),
            200,
            reads(move || async move {
                agent_core::store::export::export_run(store, "long")
                    .await
                    .unwrap();
            }),
        ),
        (
            "agents".into(),
            "/ui/agents".into(),
            200,
            reads(move || async move {
                store.agents().await.unwrap();
            }),
        ),
        (
            "an agent (graph, start form, tools, spend of 14 days)".into(),
            "/ui/agents/Order".into(),
            200,
            reads(move || async move {
                store.agent_graph("Order", None).await.unwrap();
                store.tool_switches().await.unwrap();
                let today = agent_core::store::now_ms().div_euclid(agent_core::store::DAY_MS);
                let days = RunFilter {
                    agent: Some("Order".into()),
                    created_after: Some((today - 13) * agent_core::store::DAY_MS),
                    ..RunFilter::default()
                };
                store.spend_by_day(&days).await.unwrap();
            }),
        ),
        (
            "schedules".into(),
            "/ui/schedules".into(),
            200,
            reads(move || async move {
                store.list_schedules(None).await.unwrap();
                store.agents().await.unwrap();
            }),
        ),
        (
            "workers (leases, backlog per agent)".into(),
            "/ui/workers".into(),
            200,
            reads(move || async move {
                let open = store
                    .list_runs(&RunFilter {
                        statuses: OPEN.to_vec(),
                        limit: Some(WORKERS_SCAN),
                        ..RunFilter::default()
                    })
                    .await
                    .unwrap();
                let mut agents: std::collections::BTreeSet<String> =
                    store.agents().await.unwrap().into_iter().collect();
                agents.extend(open.into_iter().map(|r| r.agent));
                for agent in agents {
                    store
                        .count_runs(&RunFilter {
                            agent: Some(agent),
                            statuses: OPEN.to_vec(),
                            ..RunFilter::default()
                        })
                        .await
                        .unwrap();
                }
            }),
        ),
    ];

    println!(
        "\n{} runs; a run of {} steps ({} journal entries, {} children); median of {n} loads\n",
        size.runs,
        size.steps,
        size.steps * u64::from(size.entries_per_step),
        size.children,
    );
    println!("| page | server time | its store reads | ratio | bytes |");
    println!("|---|---|---|---|---|");
    for (name, path, status, floor) in &pages {
        let (reads_time, ()) = median(n, floor).await;
        let (page_time, body) = load(&c, &server.url(path), *status, n).await;
        println!(
            "| {name} | {page_time:.1?} | {reads_time:.1?} | {:.2}× | {} |",
            page_time.as_secs_f64() / reads_time.as_secs_f64().max(1e-9),
            body.len()
        );
    }
}

/// Every page on a store small enough for a debug build: that they load, and their figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_pages_at_a_reduced_size() {
    bench(Size {
        runs: env_usize("INSPECTOR_BENCH_RUNS", 1_000),
        steps: env_usize("INSPECTOR_BENCH_STEPS", 120) as u64,
        entries_per_step: 2,
        children: 30,
        loads: 1,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark at full size, minutes to seed: prints figures (see the module docs)"]
async fn inspector_pages_on_a_large_store() {
    bench(Size {
        runs: env_usize("INSPECTOR_BENCH_RUNS", 100_000),
        steps: env_usize("INSPECTOR_BENCH_STEPS", 2_000) as u64,
        entries_per_step: 5,
        children: 1_000,
        loads: 5,
    })
    .await;
}
