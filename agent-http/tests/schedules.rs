//! Schedules over HTTP (`/v1/schedules`): bad input refused at creation with what is
//! wrong, writes behind the token, each verb, a triggered tick started by the agent's
//! runner, and the routes in the OpenAPI document; on SQLite and PostgreSQL.

extern crate durable_agents_http as agent_http;

mod common;

use agent_http::ApiConfig;
use common::{Db, Server, assert_error, client, json};
use serde_json::{Value, json};

fn new_schedule(id: &str, spec: &Value, state: &Value) -> Value {
    json!({
        "id": id,
        "agent": "Order",
        "spec": spec,
        "initial_state": state,
        "labels": { "team": "ops" },
        "overlap": "skip",
        "catch_up": { "up_to": 2 },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_created_checked_and_operated() {
    for (backend, db) in Db::both().await {
        let runner = db.runner("Pay");
        let server = Server::serve(
            &db.store,
            ApiConfig::default()
                .with_token(common::TOKEN)
                .with_agent(db.runner("Pay")),
        )
        .await;
        let post = |path: &str, body: Value| {
            client()
                .post(server.url(path))
                .bearer_auth(common::TOKEN)
                .json(&body)
                .send()
        };
        let start = json!({ "Start": { "items": ["apple"] } });
        let hourly = json!({ "interval": { "every_ms": 3_600_000 } });

        for (spec, state, status, says) in [
            (
                json!({ "cron": { "expression": "61 * * * *", "time_zone": "UTC" } }),
                start.clone(),
                422,
                "malformed cron expression",
            ),
            (
                json!({ "cron": { "expression": "0 8 * * *", "time_zone": "Mars/Base" } }),
                start.clone(),
                422,
                "unknown time zone `Mars/Base`",
            ),
            (
                hourly.clone(),
                json!({ "Pay": { "cents": 3 } }),
                422,
                "`Pay` is not an initial state",
            ),
            (
                json!({ "interval": { "every_ms": 10 } }),
                start.clone(),
                422,
                "too short",
            ),
        ] {
            let (got, body) = json(
                post("/v1/schedules", new_schedule("bad", &spec, &state))
                    .await
                    .unwrap(),
            )
            .await;
            assert_error(got, &body, status, "unprocessable");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(says),
                "{backend}: {body}"
            );
        }

        let body = new_schedule("digest", &hourly, &start);
        let resp = client()
            .post(server.url("/v1/schedules"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{backend}: creating needs the token");
        let (status, created) = json(post("/v1/schedules", body.clone()).await.unwrap()).await;
        assert_eq!(status, 201, "{backend}: {created}");
        assert_eq!(created["catch_up"], json!({ "up_to": 2 }));
        let (status, again) = json(post("/v1/schedules", body.clone()).await.unwrap()).await;
        assert_eq!(status, 200, "{backend}: the same definition again: {again}");
        let mut other = body.clone();
        other["jitter_ms"] = json!(5);
        let (status, conflict) = json(post("/v1/schedules", other).await.unwrap()).await;
        assert_error(status, &conflict, 409, "conflict");

        let (status, listed) = json(
            client()
                .get(server.url("/v1/schedules?agent=Order"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            listed.as_array().map(Vec::len),
            Some(1),
            "{backend}: {listed}"
        );

        let (status, patched) = json(
            client()
                .patch(server.url("/v1/schedules/digest"))
                .bearer_auth(common::TOKEN)
                .json(&json!({ "overlap": "allow_all", "jitter_ms": 1000 }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{backend}: {patched}");
        assert_eq!(patched["overlap"], "allow_all");
        assert_eq!(
            patched["labels"]["team"], "ops",
            "a patch keeps what it does not give"
        );

        let (status, paused) =
            json(post("/v1/schedules/digest/pause", json!({})).await.unwrap()).await;
        assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
        let (status, triggered) = json(
            post("/v1/schedules/digest/trigger", json!({}))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 202, "{triggered}");
        let (status, resumed) = json(
            post("/v1/schedules/digest/resume", json!({}))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, &resumed["paused"]),
            (200, &json!(false)),
            "{resumed}"
        );
        let (status, backfilled) = json(
            post(
                "/v1/schedules/digest/backfill",
                json!({ "from": 0, "to": 2 * 3_600_000 }),
            )
            .await
            .unwrap(),
        )
        .await;
        assert_eq!(
            (status, &backfilled["ticks"]),
            (202, &json!(3)),
            "{backfilled}"
        );
        let (status, too_many) = json(
            post(
                "/v1/schedules/digest/backfill",
                json!({ "from": 0, "to": 3_600_000_000_i64 }),
            )
            .await
            .unwrap(),
        )
        .await;
        assert_error(status, &too_many, 422, "unprocessable");

        // The agent's runner ticks: the trigger and the three backfilled ticks.
        let report = agent_core::schedule::tick_due(
            db.store.as_ref(),
            &runner,
            agent_core::store::now_ms(),
            10,
        )
        .await
        .unwrap();
        assert_eq!(report.started.len(), 4, "{backend}: {report:?}");
        let (_, runs) = json(
            client()
                .get(server.url("/v1/runs?label=schedule=digest"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            runs["runs"].as_array().map(Vec::len),
            Some(4),
            "{backend}: {runs}"
        );

        let resp = client()
            .delete(server.url("/v1/schedules/digest"))
            .bearer_auth(common::TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204);
        let (status, gone) = json(
            client()
                .get(server.url("/v1/schedules/digest"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &gone, 404, "not_found");

        let doc = server.openapi().await;
        for (method, template) in [
            ("get", "/v1/schedules"),
            ("post", "/v1/schedules"),
            ("get", "/v1/schedules/{id}"),
            ("patch", "/v1/schedules/{id}"),
            ("delete", "/v1/schedules/{id}"),
            ("post", "/v1/schedules/{id}/pause"),
            ("post", "/v1/schedules/{id}/resume"),
            ("post", "/v1/schedules/{id}/trigger"),
            ("post", "/v1/schedules/{id}/backfill"),
        ] {
            assert!(
                doc["paths"][template][method].is_object(),
                "{method} {template} is not in the document"
            );
        }
    }
}
