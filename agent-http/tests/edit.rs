//! `POST /v1/runs/{id}/state`: a stopped run's state corrected over HTTP, on both stores. A
//! service that registers the agent reads the state as the agent's type before writing; one
//! that does not (`agentctl serve`) checks the graph, and the next worker reads the state.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::{RunStatus, TransitionKind};
use agent_http::ApiConfig;
use common::{Db, Server, assert_error, client, json};
use serde_json::{Value, json};

async fn post(server: &Server, run: &str, body: &Value, token: bool) -> (u16, Value) {
    let mut request = client()
        .post(server.url(&format!("/v1/runs/{run}/state")))
        .json(body);
    if token {
        request = request.header("authorization", format!("Bearer {}", common::TOKEN));
    }
    json(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_runs_state_is_patched_audited_and_resumed() {
    for (name, db) in Db::both().await {
        db.drive("order-1", "Pay").await;
        let server = Server::serve(&db.store, ApiConfig::default().with_token(common::TOKEN)).await;
        let patch = json!({
            "patch": [{ "op": "replace", "path": "/Confirm/payment_id", "value": "pay-fixed" }],
            "by": "ops",
            "reason": "the charge was refunded and made again",
        });
        let (status, _) = post(&server, "order-1", &patch, false).await;
        assert_eq!(status, 401, "{name}: an edit needs the token");

        // Refused, nothing written.
        for (body, want, code) in [
            (
                json!({ "patch": [] , "state": {}, "reason": "r" }),
                422,
                "unprocessable",
            ),
            (
                json!({ "state": { "Confirm": { "payment_id": "p" } } }),
                422,
                "unprocessable",
            ),
            (
                json!({ "state": { "Start": { "items": [] } }, "reason": "r" }),
                422,
                "unprocessable",
            ),
            (
                json!({ "patch": [{ "op": "remove", "path": "/x" }], "reason": "r" }),
                422,
                "unprocessable",
            ),
        ] {
            let (status, answer) = post(&server, "order-1", &body, true).await;
            assert_error(status, &answer, want, code);
        }
        let (status, answer) = post(&server, "no-such-run", &patch, true).await;
        assert_error(status, &answer, 404, "not_found");
        assert_eq!(
            db.history_len("order-1").await,
            4,
            "{name}: a refusal wrote"
        );

        let (status, run) = post(&server, "order-1", &patch, true).await;
        assert_eq!(status, 200, "{name}: {run}");
        assert_eq!(run["status"], "running", "{name}: {run}");
        assert_eq!(run["state"]["Confirm"]["payment_id"], "pay-fixed", "{run}");
        let history = db.store.history("order-1").await.unwrap();
        let last = history.last().unwrap();
        assert_eq!(last.kind, TransitionKind::Edited, "{name}");
        assert_eq!(last.note.as_ref().unwrap().by, "ops", "{name}");
        // Running now: a worker drives it.
        let (status, answer) = post(&server, "order-1", &patch, true).await;
        assert_error(status, &answer, 409, "conflict");

        let resumed = db.runner("Pay").run("order-1").await.unwrap();
        assert_eq!(resumed.status, RunStatus::Waiting, "{name}: waits again");

        // Without the agent registered, a state of the wrong type is written (the graph
        // allows it); the worker holds the run before any handler runs.
        db.drive("order-2", "Pay").await;
        let typo = json!({ "state": { "Confirm": { "payment_id": 42 } }, "reason": "typo" });
        let (status, run) = post(&server, "order-2", &typo, true).await;
        assert_eq!(status, 200, "{name}: {run}");
        let held = db.runner("Pay").run("order-2").await.unwrap();
        assert_eq!(held.status, RunStatus::Quarantined, "{name}");

        // With the agent registered, the same state is refused before anything is written.
        let with_agent = Server::serve(
            &db.store,
            ApiConfig::default()
                .with_token(common::TOKEN)
                .with_agent(db.runner("Pay")),
        )
        .await;
        let before = db.history_len("order-2").await;
        let (status, answer) = post(&with_agent, "order-2", &typo, true).await;
        assert_error(status, &answer, 422, "unprocessable");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a state of agent"),
            "{answer}"
        );
        assert_eq!(
            db.history_len("order-2").await,
            before,
            "{name}: a refusal wrote"
        );
        let fixed = json!({ "state": { "Confirm": { "payment_id": "pay-2" } }, "reason": "fix" });
        let (status, run) = post(&with_agent, "order-2", &fixed, true).await;
        assert_eq!(status, 200, "{name}: {run}");

        let doc = with_agent.openapi().await;
        let op = &doc["paths"]["/v1/runs/{id}/state"]["post"];
        assert!(
            op.is_object(),
            "POST /v1/runs/{{id}}/state is not in the document"
        );
        for code in ["200", "404", "409", "422"] {
            assert!(
                op["responses"][code].is_object(),
                "{code} is not documented"
            );
        }
    }
}
