//! Events over SSE while runs are written to: resume with `Last-Event-ID` gets exactly the
//! rest; token deltas of the ephemeral bus reach the run's stream, without ids; runs of a
//! registered agent are started with a typed initial state.

extern crate durable_agents_http as agent_http;

mod common;

use std::time::Duration;

use agent_core::events::EphemeralBus;
use agent_core::store::{EventScope, RunEvent, RunStatus};
use agent_http::ApiConfig;
use common::{Db, Server, SseClient, SseMessage, TOKEN, assert_error, client, json, stored_events};
use serde_json::{Value, json};

/// The durable events of `messages`, checked: each has its cursor as id and its type as
/// event name.
fn durable(messages: &[SseMessage]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m.event.as_deref() != Some("token"))
        .map(|m| {
            let v = m.json();
            assert_eq!(
                m.id.as_deref(),
                Some(v["cursor"].to_string().as_str()),
                "{m:?}"
            );
            assert_eq!(m.event.as_deref(), v["type"].as_str(), "{m:?}");
            v
        })
        .collect()
}

fn as_json(events: &[RunEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

/// Drive `id` (started) to its end in the background: to the wait, then confirmed.
fn drive_to_end(db: &Db, id: &'static str) -> tokio::task::JoinHandle<()> {
    let runner = db.runner("Pay");
    tokio::spawn(async move {
        let run = runner.run(id).await.expect("run");
        assert_eq!(run.status, RunStatus::Waiting);
        tokio::time::sleep(Duration::from_millis(150)).await;
        runner
            .signal(id, "confirm", json!({"ok": true}))
            .await
            .expect("signal");
        let run = runner.run(id).await.expect("resume");
        assert_eq!(run.status, RunStatus::Completed);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_followed_resumes_with_last_event_id_without_gap_or_duplicate() {
    let db = Db::new().await;
    let r = db.runner("Pay");
    r.start(
        "live",
        agent_conformance::fixture::initial(&["apple", "kiwi"]),
    )
    .await
    .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let url = server.url("/v1/runs/live/events/stream?until_finished=true");

    let mut first = SseClient::connect(&url, &[]).await;
    let writer = drive_to_end(&db, "live");
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(first.next().await.expect("an event"));
    }
    // Disconnect mid-run; the writer goes on.
    drop(first);
    let last = seen
        .last()
        .unwrap()
        .id
        .clone()
        .expect("durable events have ids");
    let mut second = SseClient::connect(&url, &[("last-event-id", last)]).await;
    while let Some(m) = second.next().await {
        seen.push(m);
    }
    writer.await.unwrap();

    let stored = stored_events(&db.store, &EventScope::Run("live".into()))
        .await
        .unwrap();
    assert!(stored.len() > 6, "{stored:?}");
    assert_eq!(durable(&seen), as_json(&stored));
    assert_eq!(seen.last().unwrap().event.as_deref(), Some("run_finished"));

    // `after` does the same as the header; the header wins over it.
    let from = stored[2].cursor.to_string();
    let mut third = SseClient::connect(&format!("{url}&after={from}"), &[]).await;
    let mut rest = Vec::new();
    while let Some(m) = third.next().await {
        rest.push(m);
    }
    assert_eq!(durable(&rest), as_json(&stored[3..]));
    let mut fourth = SseClient::connect(
        &format!("{url}&after=0"),
        &[("last-event-id", stored[4].cursor.to_string())],
    )
    .await;
    let mut rest = Vec::new();
    while let Some(m) = fourth.next().await {
        rest.push(m);
    }
    assert_eq!(durable(&rest), as_json(&stored[5..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_runs_events_resume_with_last_event_id_too() {
    let db = Db::new().await;
    for id in ["a", "b"] {
        db.runner("Pay")
            .start(id, agent_conformance::fixture::initial(&["apple"]))
            .await
            .unwrap();
    }
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let url = server.url("/v1/events/stream");
    let mut first = SseClient::connect(&url, &[]).await;
    let writers = [drive_to_end(&db, "a"), drive_to_end(&db, "b")];
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(first.next().await.expect("an event"));
    }
    drop(first);
    let last = seen.last().unwrap().id.clone().unwrap();
    let mut second = SseClient::connect(&url, &[("last-event-id", last)]).await;
    for w in writers {
        w.await.unwrap();
    }
    let stored = stored_events(&db.store, &EventScope::All).await.unwrap();
    while seen.len() < stored.len() {
        seen.push(second.next().await.expect("the rest"));
    }
    // Nothing more comes: a short wait gives only keep-alives (none within it).
    let extra = tokio::time::timeout(Duration::from_millis(500), second.next()).await;
    assert!(extra.is_err(), "an event beyond the stored ones: {extra:?}");
    assert_eq!(durable(&seen), as_json(&stored));
    // Both runs, in the one stream.
    let runs: std::collections::BTreeSet<&str> = stored.iter().map(|e| e.run_id.as_str()).collect();
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), ["a", "b"]);

    // One agent's scope, as a page: the same events.
    let (status, page) = json(
        client()
            .get(server.url("/v1/events?agent=Order&limit=1000"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(page["events"].as_array().unwrap(), &as_json(&stored));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_deltas_reach_the_runs_stream_without_ids() {
    let db = Db::new().await;
    db.runner("Pay")
        .start("tok", agent_conformance::fixture::initial(&["apple"]))
        .await
        .unwrap();
    let bus = EphemeralBus::new();
    let server = Server::serve(&db.store, ApiConfig::default().with_ephemeral(bus.clone())).await;
    let url = server.url("/v1/runs/tok/events/stream?until_finished=true");
    let mut sse = SseClient::connect(&url, &[]).await;

    let runner = db.runner("Pay");
    let publisher = bus.clone();
    let writer = tokio::spawn(async move {
        let mine = publisher.sink("tok", 0, 0);
        let other = publisher.sink("someone-else", 0, 0);
        for text in ["Hel", "lo", " wor"] {
            mine.token(text);
            other.token("not yours");
        }
        runner.run("tok").await.unwrap();
        publisher.sink("tok", 3, 1).token("ld");
        tokio::time::sleep(Duration::from_millis(100)).await;
        runner
            .signal("tok", "confirm", json!({"ok": true}))
            .await
            .unwrap();
        runner.run("tok").await.unwrap();
    });
    let mut seen = Vec::new();
    while let Some(m) = sse.next().await {
        seen.push(m);
    }
    writer.await.unwrap();

    let tokens: Vec<Value> = seen
        .iter()
        .filter(|m| m.event.as_deref() == Some("token"))
        .map(|m| {
            assert_eq!(m.id, None, "a token event has no id: {m:?}");
            m.json()
        })
        .collect();
    let texts: Vec<&str> = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Hel", "lo", " wor", "ld"]);
    assert!(
        tokens
            .iter()
            .all(|t| t["run_id"] == "tok" && t["type"] == "token_delta")
    );
    assert_eq!(
        tokens
            .iter()
            .map(|t| t["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2, 0]
    );
    // The durable events are all there, in order, whatever came between them.
    let stored = stored_events(&db.store, &EventScope::Run("tok".into()))
        .await
        .unwrap();
    assert_eq!(durable(&seen), as_json(&stored));

    // Resuming from the last durable event: no token is replayed (they were never stored).
    let last = stored[stored.len() - 2].cursor.to_string();
    let mut again = SseClient::connect(&url, &[("last-event-id", last)]).await;
    let mut rest = Vec::new();
    while let Some(m) = again.next().await {
        rest.push(m);
    }
    assert_eq!(durable(&rest), as_json(&stored[stored.len() - 1..]));
    assert!(rest.iter().all(|m| m.event.as_deref() != Some("token")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_registered_agent_start_in_a_typed_initial_state() {
    let db = Db::new().await;
    let config = ApiConfig::default()
        .with_token(TOKEN)
        .with_agent(db.runner("Pay"));
    let server = Server::serve(&db.store, config).await;
    let bearer = format!("Bearer {TOKEN}");
    let post = |body: Value, auth: bool| {
        let mut req = client()
            .post(server.url("/v1/agents/Order/runs"))
            .json(&body);
        if auth {
            req = req.header("authorization", &bearer);
        }
        req.send()
    };

    let body = json!({
        "id": "order-7",
        "state": {"Start": {"items": ["apple", "kiwi"]}},
        "labels": {"tenant": "acme"},
    });
    // Without the token: refused, nothing created.
    let (status, resp) = json(post(body.clone(), false).await.unwrap()).await;
    assert_error(status, &resp, 401, "unauthorized");
    assert!(db.store.load_run("order-7").await.unwrap().is_none());

    let (status, resp) = json(post(body.clone(), true).await.unwrap()).await;
    assert_eq!(status, 201, "{resp}");
    assert_eq!(resp["created"], true);
    assert_eq!(resp["run"]["id"], "order-7");
    assert_eq!(resp["run"]["agent"], "Order");
    assert_eq!(resp["run"]["state_name"], "Start");
    assert_eq!(resp["run"]["labels"]["tenant"], "acme");
    let run = db.store.load_run("order-7").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.state, json!({"Start": {"items": ["apple", "kiwi"]}}));
    // The runner's graph is registered, and the run is the runner's to drive.
    assert!(
        db.store
            .agents()
            .await
            .unwrap()
            .contains(&"Order".to_owned())
    );
    let run = db.runner("Pay").run("order-7").await.unwrap();
    assert_eq!(run.status, RunStatus::Waiting);

    // Idempotent by id...
    let other = json!({"id": "order-8", "state": {"Start": {"items": []}}});
    let (status, resp) = json(post(other.clone(), true).await.unwrap()).await;
    assert_eq!(status, 201, "{resp}");
    let (status, resp) = json(post(other, true).await.unwrap()).await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["created"], false);
    // ...and an id taken by another start is a conflict.
    let (status, resp) = json(
        post(
            json!({"id": "order-8", "state": {"Start": {"items": ["x"]}}}),
            true,
        )
        .await
        .unwrap(),
    )
    .await;
    assert_error(status, &resp, 409, "conflict");

    // Without an id, one is made.
    let (status, resp) = json(
        post(json!({"state": {"Start": {"items": []}}}), true)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{resp}");
    assert!(
        resp["run"]["id"].as_str().unwrap().starts_with("Order-"),
        "{resp}"
    );

    let runs_before = db
        .store
        .list_runs(&agent_core::store::RunFilter::default())
        .await
        .unwrap()
        .len();
    // A state of the agent that is not initial.
    let (status, resp) = json(
        post(
            json!({"state": {"Pay": {"cents": 100}}, "id": "skip-ahead"}),
            true,
        )
        .await
        .unwrap(),
    )
    .await;
    assert_error(status, &resp, 422, "unprocessable");
    let message = resp["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`Pay` is not an initial state of agent `Order`")
            && message.contains("`Start`"),
        "{message}"
    );
    // Not a state of the agent at all, or of the wrong shape.
    for state in [
        json!({"Nope": {}}),
        json!({"Start": {"items": "apple"}}),
        json!("Start"),
        json!(null),
    ] {
        let (status, resp) = json(post(json!({"state": state}), true).await.unwrap()).await;
        assert_error(status, &resp, 422, "unprocessable");
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("not a state of agent `Order`"),
            "{message}"
        );
    }
    // A body that is not a start.
    let (status, resp) = json(post(json!({"stat": {}}), true).await.unwrap()).await;
    assert_error(status, &resp, 422, "unprocessable");
    // An agent not registered here.
    let resp = client()
        .post(server.url("/v1/agents/Checkout/runs"))
        .header("authorization", &bearer)
        .json(&json!({"state": {"Start": {"items": []}}}))
        .send()
        .await
        .unwrap();
    let (status, resp) = json(resp).await;
    assert_error(status, &resp, 404, "not_found");
    assert!(
        resp["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`Order`"),
        "{resp}"
    );
    assert_eq!(
        db.store
            .list_runs(&agent_core::store::RunFilter::default())
            .await
            .unwrap()
            .len(),
        runs_before
    );
    assert!(db.store.load_run("skip-ahead").await.unwrap().is_none());
}

/// Event streams are bounded: past the limit, `503` with `Retry-After`, and a stream's
/// slot comes back when its client goes away.
#[tokio::test]
async fn event_streams_past_the_limit_are_refused_until_one_closes() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_max_streams(2)).await;
    let first = SseClient::connect(&server.url("/v1/events/stream"), &[]).await;
    let second = SseClient::connect(&server.url("/v1/runs/order-1/events/stream"), &[]).await;
    for path in ["/v1/events/stream", "/v1/runs/order-1/events/stream"] {
        let resp = client()
            .get(server.url(path))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["retry-after"], "5", "{path}");
        let (status, body) = json(resp).await;
        assert_error(status, &body, 503, "unavailable");
    }
    drop(first);
    // The server notices the closed connection at its next write or poll.
    let mut reopened = false;
    for _ in 0..100 {
        let resp = client()
            .get(server.url("/v1/events/stream"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened, "the first stream's slot never came back");
    drop(second);
}
