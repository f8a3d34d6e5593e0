//! The operator's verbs over HTTP: a pending signal listed with its id and dropped
//! (`DELETE /v1/runs/{id}/signals/{signal}`), audited in the run's history; a failed run
//! closed out (`POST /v1/runs/{id}/terminate`); both bearer-protected and documented.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::{RunFailure, RunStatus};
use agent_http::ApiConfig;
use common::{Db, Server, assert_error, client, json};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_signal_is_dropped_and_a_failed_run_terminated() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let bad = db
        .store
        .send_signal("order-1", "confirm", &json!({ "ok": "nope" }))
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default().with_token(common::TOKEN)).await;
    let bearer = format!("Bearer {}", common::TOKEN);

    let (status, listed) = json(
        client()
            .get(server.url("/v1/runs/order-1/signals"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed[0]["id"], bad, "{listed}");
    assert_eq!(listed[0]["name"], "confirm", "{listed}");

    let path = format!("/v1/runs/order-1/signals/{bad}");
    let body = json!({ "by": "ops", "reason": "ok must be a bool" });
    let resp = client()
        .delete(server.url(&path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "a drop needs the token");
    let (status, run) = json(
        client()
            .delete(server.url(&path))
            .header("authorization", &bearer)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "waiting", "{run}");
    assert!(
        db.store
            .pending_signals("order-1")
            .await
            .unwrap()
            .is_empty()
    );
    let history = db.store.history("order-1").await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.kind.as_str(), "signal_dropped");
    assert_eq!(last.note.as_ref().unwrap().by, "ops");

    let (status, again) = json(
        client()
            .delete(server.url(&path))
            .header("authorization", &bearer)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(status, &again, 404, "not_found");

    db.store
        .set_status(
            "order-1",
            RunStatus::Failed,
            Some(RunFailure {
                code: "handler".into(),
                message: "x".into(),
            }),
        )
        .await
        .unwrap();
    let (status, run) = json(
        client()
            .post(server.url("/v1/runs/order-1/terminate"))
            .header("authorization", &bearer)
            .json(&json!({ "by": "ops", "reason": "give up" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "terminated", "{run}");

    let doc = server.openapi().await;
    for (method, template) in [
        ("get", "/v1/runs/{id}/signals"),
        ("delete", "/v1/runs/{id}/signals/{signal}"),
        ("post", "/v1/runs/{id}/terminate"),
    ] {
        assert!(
            doc["paths"][template][method].is_object(),
            "{method} {template} is not in the document"
        );
    }
    assert!(
        doc["paths"]["/v1/runs/{id}/signals/{signal}"]["delete"]["responses"]["404"].is_object()
    );
}
