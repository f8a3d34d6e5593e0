//! Following runs through the HTTP API while their worker is killed and another takes
//! over: each client reads a run's server-sent events, drops its connection part-way and
//! comes back with `Last-Event-ID`, and in the end has exactly the run's events as the
//! store has them, each once, in order, none invented, none missing.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{EventCursor, EventScope, RunEvent, Store};
use agent_http::ApiConfig;
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, WorkerProc, create_runs, wait_all_final};
use e2e::shop;
use futures::StreamExt;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");
const RUNS: u64 = 8;

/// Reads one SSE connection until `stop_after` events (then drops it), or the run's end.
/// Returns the events read, and whether the stream ended with the run.
async fn read_stream(
    client: &reqwest::Client,
    url: &str,
    last_event_id: Option<EventCursor>,
    stop_after: usize,
) -> Result<(Vec<RunEvent>, bool), String> {
    let mut request = client.get(url);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("{url}: {}", response.status()));
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
        // An SSE message ends with an empty line; its `data:` line is the event's JSON.
        while let Some(end) = buffer.find("\n\n") {
            let message: String = buffer.drain(..end + 2).collect();
            let Some(data) = message.lines().find_map(|l| l.strip_prefix("data:")) else {
                continue; // keep-alive comment
            };
            if message
                .lines()
                .any(|l| l == "event:error" || l == "event: error")
            {
                return Err(format!("the stream said: {data}"));
            }
            let event: RunEvent = serde_json::from_str(data.trim())
                .map_err(|e| format!("an event that does not read: {e}: {data}"))?;
            let id_line = message
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .map(|s| s.trim().to_owned());
            if id_line != Some(event.cursor.to_string()) {
                return Err(format!(
                    "SSE id {id_line:?} is not the cursor {}",
                    event.cursor
                ));
            }
            let finished = matches!(event.kind, agent_core::store::EventKind::RunFinished { .. });
            events.push(event);
            if finished {
                return Ok((events, true));
            }
            if events.len() >= stop_after {
                return Ok((events, false));
            }
        }
    }
    Ok((events, false))
}

/// Follows one run to its end, dropping the connection every `every` events.
async fn follow(base: String, run_id: String, every: usize) -> Result<Vec<RunEvent>, String> {
    // Plain HTTP on loopback, but reqwest wants a TLS provider to build a client.
    #[allow(deprecated, reason = "ring is the provider sqlx compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/runs/{run_id}/events/stream?until_finished=true");
    let mut all: Vec<RunEvent> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_mins(3);
    loop {
        let last = all.last().map(|e| e.cursor);
        let read = tokio::time::timeout_at(deadline, read_stream(&client, &url, last, every));
        let (events, ended) = read
            .await
            .map_err(|_| format!("{run_id}: not finished after 3 minutes"))??;
        all.extend(events);
        if ended {
            return Ok(all);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_runs_across_a_worker_crash_and_their_own_reconnects() {
    let Some(url) = database_url("follow_http").await else {
        return;
    };
    let db = TestDb::create(&url, "follow").await;
    create_runs(&db, 0, RUNS).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let base = format!("http://{}", listener.local_addr().expect("local address"));
    let store: Arc<dyn Store> = db.store.clone();
    let server = tokio::spawn(agent_http::serve_on(
        store.clone(),
        ApiConfig::default(),
        listener,
        std::future::pending(),
    ));

    let ids: Vec<String> = (0..RUNS).map(shop::run_id).collect();
    // Each client drops its connection after a different number of events (1 to 4).
    let clients: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| tokio::spawn(follow(base.clone(), id.clone(), 1 + i % 4)))
        .collect();

    // Slow tools and model, so that runs are mid-way when the first worker dies.
    let mut first = WorkerOpts::new(&url, &db.schema, "follow-a");
    first.tool_latency = (150, 250);
    first.llm_latency = (150, 250);
    first.lease_ms = 1_000;
    let mut worker = WorkerProc::spawn(Path::new(BIN), &first);
    // Kill it once it has committed steps of several runs (and, tools being slow, while
    // most runs are mid-way).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stepped: i64 =
            sqlx::query_scalar("SELECT count(DISTINCT run_id) FROM transitions WHERE version > 0")
                .fetch_one(&db.pool)
                .await
                .expect("count stepped runs");
        if stepped >= 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first worker committed no steps in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let final_before: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs WHERE status IN ('completed', 'failed', 'compensated')",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count final runs");
    worker.kill9();
    assert!(
        final_before < i64::try_from(RUNS).unwrap_or(i64::MAX),
        "every run ended before the crash ({final_before}): the test proves nothing"
    );

    let mut second = WorkerOpts::new(&url, &db.schema, "follow-b");
    second.exit_when_done = RUNS;
    second.lease_ms = 1_000;
    let second = WorkerProc::spawn(Path::new(BIN), &second);
    assert!(
        wait_all_final(&db, RUNS, Duration::from_mins(2)).await,
        "runs still open after the second worker's 2 minutes"
    );
    let (code, _) = second.wait_report(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the second worker failed");

    for (id, client) in ids.iter().zip(clients) {
        let followed = client.await.expect("client task").expect("follow");
        let stored = store
            .events(&EventScope::Run(id.clone()), EventCursor::START, 10_000)
            .await
            .expect("read the run's events");
        let cursors: Vec<EventCursor> = followed.iter().map(|e| e.cursor).collect();
        let unique: HashSet<EventCursor> = cursors.iter().copied().collect();
        assert_eq!(unique.len(), cursors.len(), "{id}: an event came twice");
        assert!(
            cursors.windows(2).all(|w| w[0] < w[1]),
            "{id}: events out of order"
        );
        assert_eq!(
            followed, stored,
            "{id}: what the client followed differs from the store's events"
        );
    }
    println!(
        "follow_http: {RUNS} runs followed over SSE with reconnects; {final_before} had ended \
         when the first worker was killed"
    );
    server.abort();
    db.drop().await;
}
