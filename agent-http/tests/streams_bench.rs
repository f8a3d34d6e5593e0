//! What idle event streams cost: the server process's CPU while `N` clients hold event
//! streams open and nothing happens, against the same server with no stream open, in the
//! same run; and, for contrast, `N` followers that each watch the store on their own (what
//! every stream did before the server's streams shared one watcher). A program that prints
//! figures, not a timed assertion:
//!
//! ```console
//! $ cargo test --workspace --release --test streams_bench -- --ignored --nocapture
//! $ STREAMS_BENCH_N=100 STREAMS_BENCH_SECS=3 cargo test --workspace --test streams_bench -- --ignored --nocapture
//! ```

extern crate durable_agents_http as agent_http;

mod common;

use std::time::Duration;

use agent_core::events::Follower;
use agent_core::store::{EventCursor, EventScope};
use agent_http::ApiConfig;
use common::{Db, Server, client};
use futures::StreamExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This process's CPU time (user and system) so far.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// CPU milliseconds per second of this process over `secs` seconds of doing nothing.
async fn cpu_per_second(secs: u64) -> f64 {
    let before = cpu();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    #[allow(clippy::cast_precision_loss, reason = "milliseconds of a few seconds")]
    let ms = cpu().saturating_sub(before).as_millis() as f64;
    #[allow(clippy::cast_precision_loss, reason = "a few seconds")]
    let per_second = ms / secs as f64;
    per_second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints figures (see the module docs)"]
async fn idle_event_streams_cost_nothing() {
    let n = env_usize("STREAMS_BENCH_N", 500);
    let secs = env_usize("STREAMS_BENCH_SECS", 5) as u64;
    let db = Db::new().await;
    for i in 0..10 {
        db.drive(&format!("order-{i}"), "Pay").await;
    }
    let server = Server::serve(&db.store, ApiConfig::default().with_max_streams(n + 16)).await;

    let idle = cpu_per_second(secs).await;

    // Half follow every run, half one run each; each client reads what it is sent.
    let mut clients = Vec::new();
    for i in 0..n {
        let path = if i % 2 == 0 {
            "/v1/events/stream".to_owned()
        } else {
            format!("/v1/runs/order-{}/events/stream", i % 10)
        };
        let resp = client()
            .get(server.url(&path))
            .send()
            .await
            .expect("open a stream");
        assert_eq!(resp.status(), 200, "{path}");
        clients.push(tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            while body.next().await.is_some() {}
        }));
    }
    // Let every stream read what is stored and park.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let streams = cpu_per_second(secs).await;
    for c in &clients {
        c.abort();
    }
    drop(server);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut lone = Vec::new();
    for i in 0..n {
        let scope = if i % 2 == 0 {
            EventScope::All
        } else {
            EventScope::Run(format!("order-{}", i % 10))
        };
        let mut f = Follower::new(db.store.clone(), scope, EventCursor::START)
            .await
            .expect("follower");
        lone.push(tokio::spawn(async move { while f.next().await.is_ok() {} }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alone = cpu_per_second(secs).await;
    for f in &lone {
        f.abort();
    }

    // The idle server's CPU is often below the clock's 10 ms resolution: the streams'
    // cost is what they add to it, compared with what lone followers add.
    let added = |x: f64| (x - idle).max(0.0);
    println!(
        "idle event streams on a SQLite store, {n} streams, {secs} s each, CPU ms per second:"
    );
    println!("  server, no stream open:              {idle:8.1}");
    println!(
        "  server, {n} idle streams:           {streams:8.1}  (+{:.1} over the idle server)",
        added(streams)
    );
    println!(
        "  {n} followers watching on their own: {alone:8.1}  (+{:.1}: {:.0}x the streams' cost)",
        added(alone),
        added(alone) / added(streams).max(1.0)
    );
}
