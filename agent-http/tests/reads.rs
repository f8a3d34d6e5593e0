//! Reading runs: filters and cursor pagination over `GET /v1/runs`, and the errors of
//! every read (404 for unknown runs, 400 for what does not parse), as JSON errors the
//! document describes.

extern crate durable_agents_http as agent_http;

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use agent_core::store::{NewRun, RunFilter, RunRecord, RunStatus};
use agent_http::ApiConfig;
use common::{Db, Server, assert_error, client, json};
use serde_json::{Value, json};

/// 40 runs of three agents over a few milliseconds (several in one millisecond, so that
/// pages end inside a millisecond), with statuses and labels.
async fn many_runs(db: &Db) -> Vec<RunRecord> {
    let mut runs = Vec::new();
    for i in 0..40_u32 {
        let agent = ["Checkout", "Support", "Refund"][(i % 3) as usize];
        let mut new = NewRun::new(format!("run-{i:02}"), agent, "f", "Start", json!({"i": i}))
            .with_label("tenant", if i % 2 == 0 { "acme" } else { "globex" });
        if i % 5 == 0 {
            new = new.with_label("region", "eu");
        }
        db.store.create_run(new).await.unwrap();
        if i % 4 == 3 {
            db.store
                .set_status(&format!("run-{i:02}"), RunStatus::Failed, None)
                .await
                .unwrap();
        }
        if i % 7 == 6 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    for i in 0..40_u32 {
        runs.push(
            db.store
                .load_run(&format!("run-{i:02}"))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    runs
}

type Pred = Box<dyn Fn(&RunRecord) -> bool>;

/// Every page of `GET /v1/runs?QUERY&limit=LIMIT`, following `next`.
async fn all_pages(server: &Server, query: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut url = format!("/v1/runs?limit={limit}");
        if !query.is_empty() {
            url.push('&');
            url.push_str(query);
        }
        if let Some(c) = &cursor {
            url.push_str("&cursor=");
            url.push_str(c);
        }
        let (status, page) = json(client().get(server.url(&url)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{url}: {page}");
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= limit);
        ids.extend(runs.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
        match page.get("next") {
            Some(Value::String(next)) => {
                assert!(!runs.is_empty(), "a page with `next` has runs");
                cursor = Some(next.clone());
            }
            None => return ids,
            Some(other) => panic!("next: {other}"),
        }
    }
    panic!("pagination did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_pages_visit_every_run_exactly_once() {
    let db = Db::new().await;
    let runs = many_runs(&db).await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let mut times: Vec<i64> = runs.iter().map(|r| r.created_at).collect();
    times.sort_unstable();
    let middle = times[times.len() / 2];
    let late = times[times.len() * 3 / 4];

    let cases: Vec<(String, Pred)> = vec![
        (String::new(), Box::new(|_| true)),
        ("agent=Support".into(), Box::new(|r| r.agent == "Support")),
        (
            "status=failed".into(),
            Box::new(|r| r.status == RunStatus::Failed),
        ),
        (
            "status=running,failed".into(),
            Box::new(|r| matches!(r.status, RunStatus::Running | RunStatus::Failed)),
        ),
        (
            "label=tenant=acme".into(),
            Box::new(|r| r.labels.get("tenant").is_some_and(|t| t == "acme")),
        ),
        (
            "label=tenant=acme,region=eu".into(),
            Box::new(|r| {
                r.labels.get("tenant").is_some_and(|t| t == "acme")
                    && r.labels.get("region").is_some_and(|t| t == "eu")
            }),
        ),
        (
            format!("created_after={middle}"),
            Box::new(move |r| r.created_at >= middle),
        ),
        (
            format!("created_before={late}"),
            Box::new(move |r| r.created_at < late),
        ),
        (
            format!("agent=Checkout&status=running&created_after={middle}&created_before={late}"),
            Box::new(move |r| {
                r.agent == "Checkout"
                    && r.status == RunStatus::Running
                    && r.created_at >= middle
                    && r.created_at < late
            }),
        ),
        ("agent=Nobody".into(), Box::new(|_| false)),
    ];
    for (query, pred) in &cases {
        let expected: BTreeSet<String> = runs
            .iter()
            .filter(|r| pred(r))
            .map(|r| r.id.clone())
            .collect();
        for limit in [1, 3, 7, 500] {
            let ids = all_pages(&server, query, limit).await;
            let unique: BTreeSet<String> = ids.iter().cloned().collect();
            assert_eq!(
                unique.len(),
                ids.len(),
                "{query} limit {limit}: a run twice: {ids:?}"
            );
            assert_eq!(unique, expected, "{query} limit {limit}");
            // Newest first, as the store lists them.
            let listed: Vec<String> = db
                .store
                .list_runs(&RunFilter::default())
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .filter(|id| unique.contains(id))
                .collect();
            assert_eq!(ids, listed, "{query} limit {limit}: order");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runs_are_404_and_bad_parameters_400_as_documented() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(common::TOKEN)).await;
    let doc = server.openapi().await;
    let documented = |method: &str, template: &str, status: u16| {
        let op = &doc["paths"][template][method];
        assert!(op.is_object(), "{method} {template} is not in the document");
        let resp = &op["responses"][status.to_string()];
        assert!(
            resp.is_object(),
            "{method} {template} does not document {status}"
        );
        assert_eq!(
            resp["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
            "{method} {template} {status}"
        );
    };
    let error_schema = &doc["components"]["schemas"]["ErrorBody"];
    assert!(error_schema.is_object(), "{doc}");

    let bearer = format!("Bearer {}", common::TOKEN);
    let gets_404 = [
        ("/v1/runs/nope", "/v1/runs/{id}"),
        ("/v1/runs/nope/history", "/v1/runs/{id}/history"),
        ("/v1/runs/nope/journal", "/v1/runs/{id}/journal"),
        ("/v1/runs/nope/state/0", "/v1/runs/{id}/state/{version}"),
        (
            "/v1/runs/order-1/state/999",
            "/v1/runs/{id}/state/{version}",
        ),
        ("/v1/runs/nope/events", "/v1/runs/{id}/events"),
        ("/v1/runs/nope/events/stream", "/v1/runs/{id}/events/stream"),
        // Served only when the server was given metrics (`ApiConfig::with_metrics`).
        ("/metrics", "/metrics"),
    ];
    for (path, template) in gets_404 {
        let (status, body) = json(client().get(server.url(path)).send().await.unwrap()).await;
        assert_error(status, &body, 404, "not_found");
        documented("get", template, 404);
    }
    let posts_404 = [
        (
            "/v1/runs/nope/signals",
            "/v1/runs/{id}/signals",
            json!({"name": "confirm"}),
        ),
        ("/v1/runs/nope/cancel", "/v1/runs/{id}/cancel", json!({})),
        ("/v1/runs/nope/retry", "/v1/runs/{id}/retry", json!({})),
        (
            "/v1/runs/nope/fork",
            "/v1/runs/{id}/fork",
            json!({"version": 0}),
        ),
        (
            "/v1/agents/Nobody/runs",
            "/v1/agents/{agent}/runs",
            json!({"state": {}}),
        ),
    ];
    for (path, template, body) in posts_404 {
        let (status, body) = json(
            client()
                .post(server.url(path))
                .header("authorization", &bearer)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 404, "not_found");
        documented("post", template, 404);
    }

    let gets_400 = [
        ("/v1/runs?cursor=garbage", "/v1/runs"),
        ("/v1/runs?cursor=12", "/v1/runs"),
        ("/v1/runs?cursor=1.-2", "/v1/runs"),
        ("/v1/runs?limit=0", "/v1/runs"),
        ("/v1/runs?limit=501", "/v1/runs"),
        ("/v1/runs?limit=ten", "/v1/runs"),
        ("/v1/runs?status=sleeping", "/v1/runs"),
        ("/v1/runs?label=novalue", "/v1/runs"),
        ("/v1/runs?created_after=yesterday", "/v1/runs"),
        (
            "/v1/runs/order-1/state/first",
            "/v1/runs/{id}/state/{version}",
        ),
        ("/v1/runs/order-1/state/-1", "/v1/runs/{id}/state/{version}"),
        (
            "/v1/runs/order-1/journal?version=x",
            "/v1/runs/{id}/journal",
        ),
        ("/v1/runs/order-1/events?limit=0", "/v1/runs/{id}/events"),
        ("/v1/runs/order-1/events?after=-3", "/v1/runs/{id}/events"),
        ("/v1/events?limit=100000", "/v1/events"),
        (
            "/v1/runs/order-1/events/stream?after=x",
            "/v1/runs/{id}/events/stream",
        ),
    ];
    for (path, template) in gets_400 {
        let (status, body) = json(client().get(server.url(path)).send().await.unwrap()).await;
        assert_error(status, &body, 400, "bad_request");
        documented("get", template, 400);
    }
    for (path, template) in [
        (
            "/v1/runs/order-1/events/stream",
            "/v1/runs/{id}/events/stream",
        ),
        ("/v1/events/stream", "/v1/events/stream"),
    ] {
        let (status, body) = json(
            client()
                .get(server.url(path))
                .header("last-event-id", "not-a-cursor")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 400, "bad_request");
        documented("get", template, 400);
    }
    // Bodies that do not parse: JSON errors too.
    for (body, content_type, want) in [
        ("{", "application/json", 400),
        (r#"{"name": 3}"#, "application/json", 422),
        (
            r#"{"name": "confirm", "extra": 1}"#,
            "application/json",
            422,
        ),
        (r#"{"name": ""}"#, "application/json", 400),
        (r#"{"name": "confirm"}"#, "text/plain", 415),
    ] {
        let (status, resp) = json(
            client()
                .post(server.url("/v1/runs/order-1/signals"))
                .header("authorization", &bearer)
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, want, "{body}: {resp}");
        assert!(resp["error"]["code"].is_string(), "{body}: {resp}");
    }
    // Every body is an object: serde would read a struct from an array (`[]` as an empty
    // note), so an array is refused on every write that takes a body (`retry` takes none).
    let before = db.store.load_run("order-1").await.unwrap();
    for (method, path) in [
        (reqwest::Method::POST, "/v1/runs/order-1/signals"),
        (reqwest::Method::POST, "/v1/runs/order-1/cancel"),
        (reqwest::Method::POST, "/v1/runs/order-1/terminate"),
        (reqwest::Method::POST, "/v1/runs/order-1/fork"),
        (reqwest::Method::DELETE, "/v1/runs/order-1/signals/1"),
        (reqwest::Method::POST, "/v1/tools/Reserve/enable"),
        (reqwest::Method::POST, "/v1/tools/Reserve/disable"),
    ] {
        for body in ["[]", r#"["confirm", {"ok": true}]"#] {
            let (status, resp) = json(
                client()
                    .request(method.clone(), server.url(path))
                    .header("authorization", &bearer)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status, 422, "{method} {path} {body}: {resp}");
        }
    }
    assert_eq!(db.store.load_run("order-1").await.unwrap(), before);
    assert!(db.store.tool_switches().await.unwrap().is_empty());
    assert!(
        db.store
            .pending_signals("order-1")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A signal's payload holding a secret (a sensitive field name) is stored sealed with the
/// server's keys, as a worker stores it; a server without keys refuses it with 400 and
/// stores nothing.
#[tokio::test]
async fn signal_payloads_with_secrets_are_sealed_or_refused() {
    let password = "pw-http-signal-7c1d2e";
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let bearer = format!("Bearer {}", common::TOKEN);
    let send = |server: &Server| {
        client()
            .post(server.url("/v1/runs/order-1/signals"))
            .header("authorization", &bearer)
            .json(&json!({"name": "confirm", "payload": {"ok": true, "password": password}}))
            .send()
    };

    let without = Server::serve(&db.store, ApiConfig::default().with_token(common::TOKEN)).await;
    let (status, body) = json(send(&without).await.unwrap()).await;
    assert_error(status, &body, 400, "bad_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no sealing key"),
        "{body}"
    );
    assert!(
        db.store
            .pending_signals("order-1")
            .await
            .unwrap()
            .is_empty()
    );

    let keys = agent_core::secrets::SealKeys::generate("k1");
    let with = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(common::TOKEN)
            .with_seal_keys(keys.clone()),
    )
    .await;
    let (status, body) = json(send(&with).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let pending = db.store.pending_signals("order-1").await.unwrap();
    let stored = serde_json::to_string(&pending).unwrap();
    assert!(!stored.contains(password), "{stored}");
    let mut payload = pending[0].payload.clone();
    keys.open_all(&mut payload).unwrap();
    assert_eq!(payload, json!({"ok": true, "password": password}));
}

/// `GET /metrics` answers what the configured page renders, in the Prometheus text format
/// its entry in the document names.
#[tokio::test]
async fn metrics_are_served_as_documented_when_configured() {
    let db = Db::new().await;
    let server = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(common::TOKEN)
            .with_metrics(|| "durable_agents_steps_total 7\n".to_owned()),
    )
    .await;
    let doc = server.openapi().await;
    let documented = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    assert!(documented[content_type].is_object(), "{documented}");

    let scrape = client()
        .get(server.url("/metrics"))
        .header("authorization", format!("Bearer {}", common::TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), 200);
    assert_eq!(scrape.headers()["content-type"], content_type);
    assert_eq!(
        scrape.text().await.unwrap(),
        "durable_agents_steps_total 7\n"
    );
}
