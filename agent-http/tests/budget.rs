//! `POST /v1/runs/{id}/budget`: an operator sets, raises and removes a run's budget over
//! HTTP, on both stores; the run's JSON carries its budget and spend; refusals write nothing.

extern crate durable_agents_http as agent_http;

mod common;

use agent_http::ApiConfig;
use common::{Db, Server, assert_error, client, json};
use serde_json::{Value, json};

async fn post(server: &Server, run: &str, body: &Value, token: bool) -> (u16, Value) {
    let mut request = client()
        .post(server.url(&format!("/v1/runs/{run}/budget")))
        .json(body);
    if token {
        request = request.header("authorization", format!("Bearer {}", common::TOKEN));
    }
    json(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_budget_is_set_raised_and_removed() {
    for (name, db) in Db::both().await {
        db.drive("order-1", "Pay").await;
        let server = Server::serve(&db.store, ApiConfig::default().with_token(common::TOKEN)).await;
        let body = json!({ "budget": { "tokens": 5000, "cost_micros": 500_000 } });
        let (status, _) = post(&server, "order-1", &body, false).await;
        assert_eq!(status, 401, "{name}: a budget needs the token");
        for (body, want, code) in [
            (json!({ "budget": { "asks": 0 } }), 422, "unprocessable"),
            (json!({ "budget": { "token": 5 } }), 422, "unprocessable"),
            (json!({ "limits": {} }), 422, "unprocessable"),
            (json!({ "budget": [null, null] }), 422, "unprocessable"),
        ] {
            let (status, answer) = post(&server, "order-1", &body, true).await;
            assert_error(status, &answer, want, code);
        }
        let (status, answer) = post(&server, "no-such-run", &body, true).await;
        assert_error(status, &answer, 404, "not_found");
        let stored = db.store.load_run("order-1").await.unwrap().unwrap();
        assert_eq!(stored.budget, None, "{name}: a refusal wrote");

        let (status, run) = post(&server, "order-1", &body, true).await;
        assert_eq!(status, 200, "{name}: {run}");
        assert_eq!(run["budget"]["tokens"], 5000, "{name}: {run}");
        // The run asked the model and called tools on its way here: its spend is kept.
        assert!(
            run["spend"]["asks"].as_u64() >= Some(1)
                && run["spend"]["tool_calls"].as_u64() >= Some(1),
            "{name}: {run}"
        );
        let (_, read) = json(
            client()
                .get(server.url("/v1/runs/order-1"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(read["budget"]["cost_micros"], 500_000, "{name}: {read}");

        let (status, run) = post(&server, "order-1", &json!({ "budget": null }), true).await;
        assert_eq!(status, 200, "{name}: {run}");
        assert!(run.get("budget").is_none(), "{name}: {run}");
    }
}
