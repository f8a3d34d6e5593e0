//! Who may do what: tokens for writes (and for reads where configured), `serve` off
//! loopback, body limits, CORS. Every refusal is checked to change nothing in the store.

extern crate durable_agents_http as agent_http;

mod common;

use std::sync::Arc;

use agent_core::store::RunStatus;
use agent_http::{ApiConfig, ServeError, router};
use common::{Db, Server, TOKEN, assert_error, client, json};
use serde_json::json;

const WAITING: &str = "order-waiting";
const FAILED: &str = "order-declined";

/// What a refused write must leave as it was.
#[derive(Debug, PartialEq)]
struct Snapshot {
    status: RunStatus,
    version: u64,
    cancel_requested: bool,
    signals: usize,
    history: usize,
    runs: usize,
}

async fn snapshot(db: &Db, id: &str) -> Snapshot {
    let run = db.store.load_run(id).await.unwrap().unwrap();
    Snapshot {
        status: run.status,
        version: run.version,
        cancel_requested: run.cancel_requested.is_some(),
        signals: db.store.pending_signals(id).await.unwrap().len(),
        history: db.history_len(id).await,
        runs: db
            .store
            .list_runs(&agent_core::store::RunFilter::default())
            .await
            .unwrap()
            .len(),
    }
}

async fn fixture_db() -> Db {
    let db = Db::new().await;
    db.drive(WAITING, "Pay").await;
    // A failed run, for retry: the card is declined... the fixture's router picks
    // `Cancelled`, which ends the run compensated; set it failed as an operator finds it.
    db.drive(FAILED, "Cancelled").await;
    db.store
        .set_status(
            FAILED,
            RunStatus::Failed,
            Some(agent_core::store::RunFailure {
                code: "tool.timeout".into(),
                message: "the charge timed out".into(),
            }),
        )
        .await
        .unwrap();
    db
}

/// Every write of the API, against `id`.
fn writes(id: &str) -> Vec<(String, serde_json::Value)> {
    vec![
        (
            format!("/v1/runs/{id}/signals"),
            json!({"name": "confirm", "payload": {"ok": true}}),
        ),
        (
            format!("/v1/runs/{id}/cancel"),
            json!({"by": "mallory", "reason": "because"}),
        ),
        (format!("/v1/runs/{id}/retry"), json!({})),
        (
            format!("/v1/runs/{id}/fork"),
            json!({"version": 0, "new_id": "sneaky-fork"}),
        ),
        (
            "/v1/agents/Order/runs".to_owned(),
            json!({"id": "sneaky", "state": {"Start": {"items": ["x"]}}}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_without_the_token_are_refused_and_change_nothing() {
    let db = fixture_db().await;
    // Every write with every wrong token is more than the throttle lets one client try
    // (tests/throttle.rs): this test is about each refusal, not about their number.
    let config = ApiConfig::default()
        .with_token(TOKEN)
        .with_agent(db.runner("Pay"))
        .with_wrong_token_limits(1000, 1000);
    let server = Server::serve(&db.store, config).await;
    let http = client();
    let before = (snapshot(&db, WAITING).await, snapshot(&db, FAILED).await);

    let wrong_same_length: String = TOKEN
        .chars()
        .map(|c| if c == 'e' { 'f' } else { c })
        .collect();
    assert_eq!(wrong_same_length.len(), TOKEN.len());
    let refusals: [(Option<String>, u16, &str); 6] = [
        (None, 401, "unauthorized"),
        (
            Some(format!("Bearer {wrong_same_length}")),
            403,
            "forbidden",
        ),
        (Some("Bearer short".to_owned()), 403, "forbidden"),
        (Some(format!("Bearer {TOKEN}x")), 403, "forbidden"),
        // The token, but not as a bearer token.
        (Some(format!("Basic {TOKEN}")), 401, "unauthorized"),
        (Some(format!("bearer{TOKEN}")), 401, "unauthorized"),
    ];
    for id in [WAITING, FAILED] {
        for (path, body) in writes(id) {
            for (auth, status, code) in &refusals {
                let mut req = http.post(server.url(&path)).json(&body);
                if let Some(auth) = auth {
                    req = req.header("authorization", auth);
                }
                let (got, body) = json(req.send().await.unwrap()).await;
                assert_error(got, &body, *status, code);
            }
        }
    }
    assert_eq!(
        (snapshot(&db, WAITING).await, snapshot(&db, FAILED).await),
        before,
        "a refused write changed the store"
    );
    assert!(db.store.load_run("sneaky").await.unwrap().is_none());
    assert!(db.store.load_run("sneaky-fork").await.unwrap().is_none());

    // With the token, each works.
    let bearer = format!("Bearer {TOKEN}");
    let (status, body) = json(
        http.post(server.url(&format!("/v1/runs/{WAITING}/signals")))
            .header("authorization", &bearer)
            .json(&json!({"name": "confirm", "payload": {"ok": true}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_i64().is_some(), "{body}");
    let signals = db.store.pending_signals(WAITING).await.unwrap();
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].name, "confirm");
    assert_eq!(signals[0].payload, json!({"ok": true}));

    let (status, body) = json(
        http.post(server.url(&format!("/v1/runs/{FAILED}/retry")))
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "running", "{body}");

    let (status, body) = json(
        http.post(server.url(&format!("/v1/runs/{WAITING}/cancel")))
            .header("authorization", &bearer)
            .json(&json!({"by": "ops", "reason": "customer left"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let run = db.store.load_run(WAITING).await.unwrap().unwrap();
    assert!(
        matches!(
            run.status,
            RunStatus::Cancelled | RunStatus::Compensating | RunStatus::Compensated
        ) || run.cancel_requested.is_some(),
        "{run:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_token_every_write_is_refused() {
    let db = fixture_db().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let before = snapshot(&db, WAITING).await;
    for (path, body) in writes(WAITING) {
        for auth in [
            None,
            Some(format!("Bearer {TOKEN}")),
            Some("Bearer ".to_owned()),
        ] {
            let mut req = client().post(server.url(&path)).json(&body);
            if let Some(auth) = auth {
                req = req.header("authorization", auth);
            }
            let (status, body) = json(req.send().await.unwrap()).await;
            assert_error(status, &body, 403, "forbidden");
        }
    }
    assert_eq!(snapshot(&db, WAITING).await, before);
    // Reads are open on loopback.
    let (status, body) = json(client().get(server.url("/v1/runs")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_router_can_require_the_token_for_reads() {
    let db = fixture_db().await;
    let api = router(
        Arc::clone(&db.store),
        ApiConfig::default()
            .with_token(TOKEN)
            .require_token_for_reads(),
    );
    let server = Server::mounted(api).await;
    let http = client();
    // The service's own routes are not the API's business.
    let health = http
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    for path in [
        "/v1/runs".to_owned(),
        format!("/v1/runs/{WAITING}"),
        format!("/v1/runs/{WAITING}/history"),
        format!("/v1/runs/{WAITING}/events"),
        format!("/v1/runs/{WAITING}/events/stream?until_finished=true"),
        "/v1/events".to_owned(),
        "/v1/openapi.json".to_owned(),
    ] {
        let (status, body) = json(http.get(server.url(&path)).send().await.unwrap()).await;
        assert_error(status, &body, 401, "unauthorized");
        let (status, body) = json(
            http.get(server.url(&path))
                .header("authorization", "Bearer nope")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 403, "forbidden");
    }
    let (status, body) = json(
        http.get(server.url(&format!("/v1/runs/{WAITING}")))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], WAITING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_non_loopback_address_without_a_token() {
    let db = Db::new().await;
    let addr = "0.0.0.0:0".parse().unwrap();
    let err = agent_http::serve(Arc::clone(&db.store), ApiConfig::default(), addr, async {})
        .await
        .unwrap_err();
    assert!(matches!(err, ServeError::NoToken(a) if a == addr), "{err}");
    assert!(err.to_string().contains("without a token"), "{err}");

    // On a listener bound to every interface: refused without a token...
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = agent_http::serve_on(
        Arc::clone(&db.store),
        ApiConfig::default(),
        listener,
        async {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ServeError::NoToken(_)), "{err}");

    // ...and with one, reads need it too.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let server = Server::serve_on(&db.store, ApiConfig::default().with_token(TOKEN), listener);
    let url = format!("http://127.0.0.1:{}/v1/runs", server.addr.port());
    let (status, body) = json(client().get(&url).send().await.unwrap()).await;
    assert_error(status, &body, 401, "unauthorized");
    let resp = client()
        .get(&url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_refused_and_change_nothing() {
    let db = fixture_db().await;
    let config = ApiConfig::default()
        .with_token(TOKEN)
        .max_body_bytes(1024)
        .with_agent(db.runner("Pay"));
    let server = Server::serve(&db.store, config).await;
    let before = snapshot(&db, WAITING).await;
    let big = "x".repeat(4096);
    let bearer = format!("Bearer {TOKEN}");
    for (path, body) in [
        (
            format!("/v1/runs/{WAITING}/signals"),
            json!({"name": "confirm", "payload": {"big": big}}),
        ),
        (
            format!("/v1/runs/{WAITING}/cancel"),
            json!({"by": "ops", "reason": big}),
        ),
        // A handler that reads no body is refused by the declared length all the same.
        (format!("/v1/runs/{WAITING}/retry"), json!({"big": big})),
        (
            format!("/v1/runs/{WAITING}/fork"),
            json!({"version": 0, "new_id": big}),
        ),
        (
            "/v1/agents/Order/runs".to_owned(),
            json!({"id": "big", "state": {"Start": {"items": [big]}}}),
        ),
    ] {
        let (status, resp) = json(
            client()
                .post(server.url(&path))
                .header("authorization", &bearer)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &resp, 413, "too_large");
        // The same, chunked (no Content-Length): cut at the limit while read.
        let bytes = serde_json::to_vec(&body).unwrap();
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(512).map(|c| Ok(c.to_vec())).collect();
        let (status, resp) = json(
            client()
                .post(server.url(&path))
                .header("authorization", &bearer)
                .header("content-type", "application/json")
                .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
                .send()
                .await
                .unwrap(),
        )
        .await;
        if path.ends_with("/retry") {
            // Nothing reads it: the retry is refused for its own reason (the run waits).
            assert_error(status, &resp, 409, "conflict");
        } else {
            assert_error(status, &resp, 413, "too_large");
        }
    }
    assert_eq!(snapshot(&db, WAITING).await, before);
    assert!(db.store.load_run("big").await.unwrap().is_none());

    // Under the limit, the same request goes through.
    let resp = client()
        .post(server.url(&format!("/v1/runs/{WAITING}/signals")))
        .header("authorization", &bearer)
        .json(&json!({"name": "confirm", "payload": {"ok": true, "small": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_headers_only_for_configured_origins() {
    let db = fixture_db().await;
    let plain = Server::serve(&db.store, ApiConfig::default()).await;
    let allowed = "https://ops.example.com";
    let with_cors = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .with_cors_origin(allowed)
            .unwrap(),
    )
    .await;
    let http = client();
    let acao = |r: &reqwest::Response| {
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_owned())
    };

    // Off by default: no header on a simple request, none on a preflight.
    let r = http
        .get(plain.url("/v1/runs"))
        .header("origin", allowed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(acao(&r), None);
    let r = http
        .request(reqwest::Method::OPTIONS, plain.url("/v1/runs/x/cancel"))
        .header("origin", allowed)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert_eq!(acao(&r), None);
    assert!(r.headers().get("access-control-allow-methods").is_none());

    // For the configured origin: present, on reads, preflights and refusals alike.
    let r = http
        .get(with_cors.url("/v1/runs"))
        .header("origin", allowed)
        .send()
        .await
        .unwrap();
    assert_eq!(acao(&r).as_deref(), Some(allowed));
    let r = http
        .request(reqwest::Method::OPTIONS, with_cors.url("/v1/runs/x/cancel"))
        .header("origin", allowed)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(acao(&r).as_deref(), Some(allowed));
    assert!(r.headers().get("access-control-allow-methods").is_some());
    let r = http
        .post(with_cors.url(&format!("/v1/runs/{WAITING}/cancel")))
        .header("origin", allowed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(acao(&r).as_deref(), Some(allowed));
    // Another origin: no header.
    let r = http
        .get(with_cors.url("/v1/runs"))
        .header("origin", "https://evil.example.net")
        .send()
        .await
        .unwrap();
    assert_eq!(acao(&r), None);
    assert_eq!(
        db.store.load_run(WAITING).await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
}

/// DNS rebinding: a page whose name an attacker points at 127.0.0.1 reads through the
/// user's browser with `Host: attacker.example`. Every read (API and inspector) naming a
/// host the server does not answer to is refused without the token; loopback names, a
/// configured name, and any name with the token pass.
#[tokio::test]
async fn a_foreign_host_is_refused_without_the_token() {
    let db = fixture_db().await;
    let server = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .with_allowed_hosts(["agents.internal"]),
    )
    .await;
    let get = |path: &'static str, host: &'static str, token: bool| {
        let mut request = client().get(server.url(path)).header("host", host);
        if token {
            request = request.bearer_auth(TOKEN);
        }
        request.send()
    };
    for path in [
        "/v1/runs",
        "/v1/runs/order-waiting",
        "/ui/",
        "/v1/openapi.json",
    ] {
        for host in [
            "attacker.example",
            "attacker.example:8080",
            "127.0.0.1.attacker.example",
        ] {
            let (status, body) = json(get(path, host, false).await.unwrap()).await;
            assert_error(status, &body, 403, "forbidden");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("DNS rebinding"),
                "{path} {host}: {body}"
            );
            let ok = get(path, host, true).await.unwrap();
            assert!(
                ok.status().is_success(),
                "{path} {host} with the token: {}",
                ok.status()
            );
        }
        for host in [
            "localhost:1234",
            "127.0.0.1",
            "[::1]:80",
            "LOCALHOST",
            "agents.internal:443",
        ] {
            let ok = get(path, host, false).await.unwrap();
            assert!(ok.status().is_success(), "{path} {host}: {}", ok.status());
        }
    }
}

/// Ids, names, filters, cursors and bodies are checked once at the edge: a NUL or another
/// control character, raw or percent-encoded, in a path, a query or a body's string is a
/// `400` in the API's shape (PostgreSQL answered 500 with its own error, SQLite stored it),
/// and nothing changes; a cursor past anything a page could have seen is a `400`, not a
/// panic or a read of every run; an unknown route is a `404` in the API's shape.
#[tokio::test]
async fn bad_text_and_cursors_are_refused_at_the_edge() {
    let db = fixture_db().await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let before = snapshot(&db, WAITING).await;
    for path in [
        "/v1/runs/order%00-waiting",
        "/v1/runs/order-waiting%0A",
        "/v1/runs?agent=Order%00",
        "/v1/runs?label=a%3Db%00",
        "/v1/runs?cursor=1.2%00",
        "/v1/runs/order-waiting/history%1F",
    ] {
        let (status, body) = json(client().get(server.url(path)).send().await.unwrap()).await;
        assert_error(status, &body, 400, "bad_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("control character"),
            "{path}: {body}"
        );
    }
    for (path, body) in [
        (
            format!("/v1/runs/{WAITING}/signals"),
            json!({"name": "confirm\u{0}", "payload": {}}),
        ),
        (
            format!("/v1/runs/{WAITING}/signals"),
            json!({"name": "confirm", "payload": {"note\u{0}": 1}}),
        ),
        (
            format!("/v1/runs/{WAITING}/cancel"),
            json!({"by": "ops\u{0}", "reason": "x"}),
        ),
    ] {
        let (status, resp) = json(
            client()
                .post(server.url(&path))
                .bearer_auth(TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &resp, 400, "bad_request");
        assert!(
            resp["error"]["message"].as_str().unwrap().contains("NUL"),
            "{path}: {resp}"
        );
    }
    assert_eq!(snapshot(&db, WAITING).await, before);
    // A literal backslash followed by `u0000` is text, and passes.
    let (status, resp) = json(
        client()
            .post(server.url(&format!("/v1/runs/{WAITING}/signals")))
            .bearer_auth(TOKEN)
            .json(&json!({"name": "confirm", "payload": {"ok": true, "note": "a\\u0000b"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{resp}");

    for cursor in [
        "1.18446744073709551615",
        "18446744073709551615.0",
        "1.50001",
        "1.-1",
        "x",
    ] {
        let url = server.url(&format!("/v1/runs?cursor={cursor}"));
        let (status, body) = json(client().get(url).send().await.unwrap()).await;
        assert_error(status, &body, 400, "bad_request");
    }
    for path in ["/nope", "/v1/nope", "/v1/runs/a/b/c/d"] {
        let (status, body) = json(client().get(server.url(path)).send().await.unwrap()).await;
        assert_error(status, &body, 404, "not_found");
    }
}

/// A token too short to resist guessing is refused when the server starts.
#[tokio::test]
async fn a_short_token_is_refused_at_start() {
    let db = Db::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = agent_http::serve_on(
        Arc::clone(&db.store),
        ApiConfig::default().with_token("x"),
        listener,
        async {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ServeError::WeakToken(1)), "{err}");
    assert!(err.to_string().contains("at least 16"), "{err}");
}

/// A signal nothing will consume, or whose payload the consuming state could not read, is
/// refused as the CLI and `Runner::signal` refuse it (one check): to a run that has ended
/// (`409`), named like no signal the run's agent waits for, or with a payload that is not
/// the declared `wait_payload` type (`422`). Nothing is stored.
#[tokio::test]
async fn signals_nothing_will_consume_or_read_are_refused() {
    let db = fixture_db().await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let send_payload = |run: &'static str, name: &'static str, payload: serde_json::Value| {
        client()
            .post(server.url(&format!("/v1/runs/{run}/signals")))
            .bearer_auth(TOKEN)
            .json(&json!({"name": name, "payload": payload}))
            .send()
    };
    let send = |run, name| send_payload(run, name, json!({"ok": true}));
    // `Confirmation { ok: bool, note: Option<String> }`.
    for (payload, at) in [
        (json!({}), "ok"),
        (json!({"ok": "yes"}), "/ok"),
        (json!({"ok": true, "note": 3}), "/note"),
        (json!(null), "object"),
    ] {
        let (status, body) = json(
            send_payload(WAITING, "confirm", payload.clone())
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 422, "unprocessable");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("wait_payload") && message.contains("Confirm") && message.contains(at),
            "{payload}: {body}"
        );
    }
    assert!(db.store.pending_signals(WAITING).await.unwrap().is_empty());
    let before = snapshot(&db, WAITING).await;
    let (status, body) = json(send(WAITING, "confrim").await.unwrap()).await;
    assert_error(status, &body, 422, "unprocessable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("confirm"),
        "{body}"
    );
    assert_eq!(snapshot(&db, WAITING).await, before);
    let (status, body) = json(send(FAILED, "confirm").await.unwrap()).await;
    assert_error(status, &body, 409, "conflict");
    assert!(db.store.pending_signals(FAILED).await.unwrap().is_empty());
    let (status, body) = json(send("nope", "confirm").await.unwrap()).await;
    assert_error(status, &body, 404, "not_found");
    // The signal the run waits for passes.
    let (status, body) = json(send(WAITING, "confirm").await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
}
