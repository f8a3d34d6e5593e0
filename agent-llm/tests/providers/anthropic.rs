//! `AnthropicRouter` against a local server replaying messages API responses.

use std::time::{Duration, Instant, SystemTime};

use agent_core::ErrorClass;
use agent_core::router::{RawChoice, Router};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

const PATH: &str = "/v1/messages";

async fn serve(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

async fn serve_then(first: ResponseTemplate, then: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(first)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(then)
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap()
}

#[tokio::test]
async fn a_tool_use_block_becomes_a_raw_choice_and_the_request_is_well_formed() {
    let body =
        anthropic_tool_uses(&[("ReserveInventory", json!({"sku": "book-42", "quantity": 1}))]);
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let router = anthropic(&server.uri());
    let reply = router.decide(&request()).await.unwrap();

    assert_eq!(reply.choices.len(), 1);
    assert_eq!(reply.choices[0].name, "ReserveInventory");
    let args: Value = serde_json::from_str(&reply.choices[0].arguments).unwrap();
    assert_eq!(args, json!({"sku": "book-42", "quantity": 1}));
    assert_eq!(reply.model, "claude-sonnet-4-5-20250929");
    assert_eq!(
        reply.input_tokens,
        Some(2100),
        "input + cache writes + cache reads"
    );
    assert_eq!(reply.output_tokens, Some(503));
    assert!(reply.refusal.is_none() && !reply.truncated);

    let received = requests(&server).await;
    assert_eq!(received.len(), 1);
    let req = &received[0];
    assert_eq!(req.headers.get("x-api-key").unwrap(), ANTHROPIC_KEY);
    assert_eq!(req.headers.get("anthropic-version").unwrap(), "2023-06-01");
    assert!(req.headers.get("authorization").is_none());
    let sent: Value = req.body_json().unwrap();
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    assert_eq!(sent["max_tokens"], 256);
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    assert_eq!(sent["system"], request().system_prompt());
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": request().user_prompt()}])
    );
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, option_names());
    assert_eq!(
        sent["tools"][1]["input_schema"],
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    assert_eq!(sent["tools"][2]["input_schema"]["type"], "object");
    assert!(!format!("{router:?}").contains(ANTHROPIC_KEY));
}

#[tokio::test]
async fn two_tool_use_blocks_become_two_raw_choices() {
    let body = anthropic_tool_uses(&[
        ("Payment", json!({})),
        ("ReserveInventory", json!({"sku": "a", "quantity": 2})),
    ]);
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(
        reply.choices[0],
        RawChoice {
            name: "Payment".into(),
            arguments: "{}".into()
        }
    );
    assert_eq!(reply.choices[1].name, "ReserveInventory");
}

#[tokio::test]
async fn stop_reason_max_tokens_marks_the_reply_truncated() {
    let body = anthropic_body(
        &[
            json!({"type": "text", "text": "Let me think about which option fits the cart best, considering"}),
        ],
        "max_tokens",
    );
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert!(reply.truncated);
    assert!(reply.choices.is_empty());
}

#[tokio::test]
async fn stop_reason_refusal_is_reported() {
    let body = anthropic_body(&[], "refusal");
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert!(reply.refusal.unwrap().contains("refusal"));
}

#[tokio::test]
async fn a_429_with_an_http_date_retry_after_is_waited_out() {
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
    let limited = ResponseTemplate::new(429)
        .insert_header("retry-after", at.as_str())
        .set_body_json(anthropic_error(
            "rate_limit_error",
            "This request would exceed your organization's rate limit of 50 requests per minute.",
        ));
    let ok =
        ResponseTemplate::new(200).set_body_json(anthropic_tool_uses(&[("Payment", json!({}))]));
    let server = serve_then(limited, ok).await;
    let started = Instant::now();
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(reply.choices[0].name, "Payment");
    assert_eq!(requests(&server).await.len(), 2);
    // The date has whole seconds: the wait is between 1 and 2 s.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_529_overloaded_is_retried() {
    let overloaded =
        ResponseTemplate::new(529).set_body_json(anthropic_error("overloaded_error", "Overloaded"));
    let ok =
        ResponseTemplate::new(200).set_body_json(anthropic_tool_uses(&[("Payment", json!({}))]));
    let server = serve_then(overloaded, ok).await;
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(reply.choices[0].name, "Payment");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn a_500_then_success() {
    let failing = ResponseTemplate::new(500)
        .set_body_json(anthropic_error("api_error", "Internal server error"));
    let ok =
        ResponseTemplate::new(200).set_body_json(anthropic_tool_uses(&[("Browsing", json!({}))]));
    let server = serve_then(failing, ok).await;
    let reply = anthropic(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(reply.choices[0].name, "Browsing");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn a_401_is_auth_without_retry() {
    let server = serve(
        ResponseTemplate::new(401)
            .set_body_json(anthropic_error("authentication_error", "invalid x-api-key")),
    )
    .await;
    let err = anthropic(&server.uri())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Auth);
    assert!(
        err.message
            .contains("authentication_error: invalid x-api-key"),
        "{}",
        err.message
    );
    assert!(!err.message.contains(ANTHROPIC_KEY));
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_403_is_auth_and_a_400_is_permanent() {
    let server = serve(ResponseTemplate::new(403).set_body_json(anthropic_error(
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    )))
    .await;
    let err = anthropic(&server.uri())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Auth);

    let server = serve(ResponseTemplate::new(400).set_body_json(anthropic_error(
        "invalid_request_error",
        "tools.0.input_schema: Field required",
    )))
    .await;
    let err = anthropic(&server.uri())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(err.message.contains("Field required"));
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_multi_megabyte_body_is_rejected() {
    let (base, _) = endless_body_server().await;
    let err = anthropic(&base).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(err.message.contains("exceeds"), "{}", err.message);

    let huge = serde_json::to_string(&anthropic_body(
        &[json!({"type": "text", "text": "y".repeat(4 * 1024 * 1024)})],
        "end_turn",
    ))
    .unwrap();
    let server = serve(ResponseTemplate::new(200).set_body_string(huge)).await;
    let err = anthropic(&server.uri())
        .decide(&request())
        .await
        .unwrap_err();
    assert!(err.message.contains("exceeds"), "{}", err.message);
}

/// Parallel tool use is allowed only for a state whose answers may call several tools
/// (`tools_per_answer`).
#[test]
fn parallel_tool_use_follows_the_state() {
    let mut several = request();
    several.tools_per_answer = 2;
    let body = anthropic("http://127.0.0.1:9").request_body(&several);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": false})
    );
}
