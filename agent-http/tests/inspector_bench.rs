//! How long the server takes for the inspector's pages on a large SQLite store: the runs
//! page (first page, a page deep in the cursor chain, a filtered one) over 100,000 runs,
//! and a run page with 10,000 journal entries. A program that prints figures, not a timed
//! assertion:
//!
//! ```console
//! $ cargo test --workspace --release --test inspector_bench -- --ignored --nocapture
//! $ INSPECTOR_BENCH_RUNS=20000 cargo test --workspace --test inspector_bench -- --ignored --nocapture
//! ```

extern crate durable_agents_http as agent_http;

mod common;

use std::time::{Duration, Instant};

use agent_core::store::{NewRun, RunFilter, RunStatus};
use agent_http::ApiConfig;
use common::{Db, Server, client};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `n` loads of `url`, after one to warm up; the body of the last.
async fn time(url: &str, n: usize) -> (Duration, String) {
    let c = client();
    let mut times = Vec::new();
    let mut body = String::new();
    for i in 0..=n {
        let t = Instant::now();
        let resp = c.get(url).send().await.expect("get");
        assert_eq!(resp.status(), 200, "{url}");
        body = resp.text().await.unwrap();
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    (times[times.len() / 2], body)
}

/// The median of `n` runs of `read`, after one to warm up: the store's part of a page.
async fn time_reads<F, Fut>(n: usize, mut read: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::new();
    for i in 0..=n {
        let t = Instant::now();
        read().await;
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    times[times.len() / 2]
}

fn ratio(page: Duration, floor: Duration) -> f64 {
    page.as_secs_f64() / floor.as_secs_f64().max(1e-9)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints figures (see the module docs)"]
async fn inspector_pages_on_a_large_store() {
    let runs = env_usize("INSPECTOR_BENCH_RUNS", 100_000);
    let entries = env_usize("INSPECTOR_BENCH_ENTRIES", 10_000);
    let db = Db::new().await;

    let t = Instant::now();
    for i in 0..runs {
        let agent = ["Checkout", "Support", "Refund"][i % 3];
        db.store
            .create_run(
                NewRun::new(
                    format!("run-{i:06}"),
                    agent,
                    "f",
                    "Start",
                    json!({"i": i, "cart": ["apple", "kiwi"]}),
                )
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
    println!("created {runs} runs in {:.1?}", t.elapsed());

    // One run with a long journal.
    let lease = db
        .claimed(
            NewRun::new("long", "Checkout", "f", "Start", json!({})),
            "bench",
        )
        .await;
    let t = Instant::now();
    for seq in 0..entries {
        let seq = u32::try_from(seq).unwrap();
        db.store
            .record_entry(&lease, &common::lookup_entry("long", seq))
            .await
            .unwrap();
    }
    println!("recorded {entries} journal entries in {:.1?}", t.elapsed());

    // Floors measured in this run: the store reads each page needs, without HTTP or HTML.
    let store = &db.store;
    let first_reads = time_reads(5, || async {
        let page = RunFilter {
            limit: Some(51),
            ..RunFilter::default()
        };
        store.list_runs(&page).await.unwrap();
        store.count_runs(&RunFilter::default()).await.unwrap();
    })
    .await;
    let journal_read = time_reads(3, || async {
        store.load_run("long").await.unwrap();
        store.journal("long", None).await.unwrap();
        store.history("long").await.unwrap();
    })
    .await;
    println!(
        "floors: list 51 runs + count per status {first_reads:.1?}; load + journal + history of the long run {journal_read:.1?}"
    );

    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (first, body) = time(&server.url("/ui/"), 5).await;
    println!(
        "runs page, first page of 50 (with counts per status): {first:.1?} ({:.2}x its store reads)",
        ratio(first, first_reads)
    );
    // Walk 20 pages down the cursor chain and time the page there.
    let mut url = server.url("/ui/");
    let mut page = body;
    for _ in 0..20 {
        let q = page
            .split(r#"id="next-page" href="./?"#)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a next page")
            .replace("&#38;", "&")
            .replace("&amp;", "&");
        url = server.url(&format!("/ui/?{q}"));
        page = client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    }
    let (deep, _) = time(&url, 5).await;
    println!(
        "runs page, 21st page (cursor): {deep:.1?} ({:.2}x the first page's store reads)",
        ratio(deep, first_reads)
    );
    let (filtered, _) = time(
        &server.url("/ui/?agent=Refund&status=failed&label=tenant%3Dacme"),
        5,
    )
    .await;
    println!("runs page, filtered by agent, status and label: {filtered:.1?}");
    let (run_page, body) = time(&server.url("/ui/runs/long"), 3).await;
    println!(
        "run page with {entries} journal entries: {run_page:.1?} ({} KiB of HTML; {:.2}x its store reads)",
        body.len() / 1024,
        ratio(run_page, journal_read)
    );
}
