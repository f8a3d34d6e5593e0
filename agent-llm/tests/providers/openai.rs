//! `OpenAiRouter` against a local server replaying chat completion responses.

use std::time::{Duration, Instant};

use agent_core::ErrorClass;
use agent_core::router::{RawChoice, RejectionCode, Router};
use agent_llm::{ApiKey, OpenAiConfig, OpenAiRouter};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

const PATH: &str = "/v1/chat/completions";

async fn serve(template: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(template)
        .mount(&server)
        .await;
    server
}

/// Answer `first` once, then `then` forever.
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
async fn a_tool_call_becomes_a_raw_choice_and_the_request_offers_exactly_the_options() {
    let body = openai_tool_calls(&[("ReserveInventory", r#"{"sku":"book-42","quantity":1}"#)]);
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();

    assert_eq!(
        reply.choices,
        vec![RawChoice {
            name: "ReserveInventory".into(),
            arguments: r#"{"sku":"book-42","quantity":1}"#.into(),
        }]
    );
    assert_eq!(reply.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(reply.input_tokens, Some(412));
    assert_eq!(reply.output_tokens, Some(23));
    assert!(reply.refusal.is_none() && !reply.truncated);
    assert!(
        reply
            .raw_output
            .contains("chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG")
    );

    let received = requests(&server).await;
    assert_eq!(received.len(), 1);
    let req = &received[0];
    assert_eq!(
        req.headers.get("authorization").unwrap(),
        &format!("Bearer {OPENAI_KEY}")
    );
    assert_eq!(req.headers.get("content-type").unwrap(), "application/json");
    let sent: Value = req.body_json().unwrap();
    assert_eq!(sent["model"], "gpt-4o-mini");
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["parallel_tool_calls"], false);
    assert_eq!(sent["max_tokens"], 256);
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function");
            t["function"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, option_names());
    // Transitions take an object of arguments; tools their schema, minus `$schema`.
    assert_eq!(
        sent["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    let schema = &sent["tools"][2]["function"]["parameters"];
    assert_eq!(schema["required"], json!(["sku", "quantity"]));
    assert!(schema.get("$schema").is_none());
    assert!(
        sent["tools"][0]["function"]["description"]
            .as_str()
            .unwrap()
            .contains("The customer confirmed the cart.")
    );
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], request().system_prompt());
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(messages[1]["content"], request().user_prompt());
}

#[tokio::test]
async fn two_tool_calls_become_two_raw_choices() {
    let body = openai_tool_calls(&[
        ("ReserveInventory", r#"{"sku":"book-42","quantity":1}"#),
        ("Payment", "{}"),
    ]);
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();
    let names: Vec<&str> = reply.choices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ReserveInventory", "Payment"]);
    assert_eq!(reply.choices[1].arguments, "{}");
}

#[tokio::test]
async fn a_refusal_is_reported() {
    let body = openai_body(
        &json!({
            "role": "assistant",
            "content": null,
            "refusal": "I'm sorry, I can't assist with that request.",
            "annotations": []
        }),
        "stop",
    );
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(
        reply.refusal.as_deref(),
        Some("I'm sorry, I can't assist with that request.")
    );
    assert!(reply.choices.is_empty());
}

#[tokio::test]
async fn finish_reason_length_marks_the_reply_truncated() {
    let mut body = openai_tool_calls(&[("ReserveInventory", r#"{"sku":"bo"#)]);
    body["choices"][0]["finish_reason"] = json!("length");
    let server = serve(ResponseTemplate::new(200).set_body_json(&body)).await;
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();
    assert!(reply.truncated);
    assert_eq!(reply.choices[0].arguments, r#"{"sku":"bo"#);
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_retried() {
    let limited = ResponseTemplate::new(429)
        .insert_header("retry-after", "1")
        .set_body_json(openai_error(
            "Rate limit reached for gpt-4o-mini on tokens per min (TPM): Limit 30000, Used 29800, Requested 512. Please try again in 1s.",
            "tokens",
            Some("rate_limit_exceeded"),
        ));
    let ok = ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")]));
    let server = serve_then(limited, ok).await;
    let started = Instant::now();
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(reply.choices[0].name, "Payment");
    assert_eq!(requests(&server).await.len(), 2, "the second call was made");
    assert!(
        elapsed >= Duration::from_secs(1),
        "waited {elapsed:?}, the server asked for 1s"
    );
}

#[tokio::test]
async fn a_500_is_retried_with_backoff() {
    let failing = ResponseTemplate::new(500).set_body_json(openai_error(
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ));
    let ok = ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")]));
    let server = serve_then(failing, ok).await;
    let reply = openai(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(reply.choices[0].name, "Payment");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn persistent_500s_give_up_after_the_bounded_retries() {
    let server = serve(ResponseTemplate::new(503).set_body_string("upstream unavailable")).await;
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable);
    assert!(err.message.contains("503"), "{}", err.message);
    assert_eq!(requests(&server).await.len(), 4, "1 attempt + 3 retries");
}

#[tokio::test]
async fn a_401_is_auth_without_retry_and_the_key_never_shows() {
    // A provider that echoes the whole key back must not get it into our error.
    let body = openai_error(
        &format!("Incorrect API key provided: {OPENAI_KEY}."),
        "invalid_request_error",
        Some("invalid_api_key"),
    );
    let server = serve(ResponseTemplate::new(401).set_body_json(body)).await;
    let router = openai(&server.uri());
    let err = router.decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Auth);
    assert_eq!(
        requests(&server).await.len(),
        1,
        "auth errors are not retried"
    );
    assert!(err.message.contains("Incorrect API key provided"));
    assert!(!err.message.contains(OPENAI_KEY), "{}", err.message);
    assert!(!err.to_string().contains(OPENAI_KEY));
    assert!(!format!("{router:?}").contains(OPENAI_KEY));
    assert!(!format!("{:?}", router.config()).contains(OPENAI_KEY));
}

#[tokio::test]
async fn a_400_is_permanent_without_retry() {
    let body = openai_error(
        "Invalid 'tools[0].function.name': string does not match pattern.",
        "invalid_request_error",
        Some("invalid_value"),
    );
    let server = serve(ResponseTemplate::new(400).set_body_json(body)).await;
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(err.message.contains("does not match pattern"));
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn x_should_retry_false_stops_the_retries() {
    let server = serve(
        ResponseTemplate::new(429)
            .insert_header("x-should-retry", "false")
            .set_body_json(openai_error(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                Some("insufficient_quota"),
            )),
    )
    .await;
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::RateLimited);
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_fails_at_once() {
    let server = serve(ResponseTemplate::new(429).insert_header("retry-after", "3600")).await;
    let started = Instant::now();
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::RateLimited);
    assert!(err.message.contains("3600"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(requests(&server).await.len(), 1);
}

#[tokio::test]
async fn a_local_server_gets_no_authorization_header() {
    let server =
        serve(ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")])))
            .await;
    let mut config = OpenAiConfig::new(format!("{}/v1", server.uri()), "llama3.1");
    config.http = http();
    let router = OpenAiRouter::new(config).unwrap();
    router.decide(&request()).await.unwrap();
    let received = requests(&server).await;
    assert!(received[0].headers.get("authorization").is_none());
    let sent: Value = received[0].body_json().unwrap();
    assert_eq!(sent["model"], "llama3.1");
    assert_eq!(
        sent["max_tokens"], 1024,
        "compatible servers read `max_tokens`"
    );
}

#[tokio::test]
async fn openai_itself_gets_max_completion_tokens() {
    let router = OpenAiRouter::new(OpenAiConfig::openai(
        ApiKey::new(OPENAI_KEY),
        "gpt-4.1-mini",
    ))
    .unwrap();
    let body = router.request_body(&request());
    assert_eq!(body["max_completion_tokens"], 1024);
    assert!(body.get("max_tokens").is_none());
}

#[tokio::test]
async fn the_auth_header_is_matched_by_the_server() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header(
            "authorization",
            format!("Bearer {OPENAI_KEY}").as_str(),
        ))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")])),
        )
        .expect(1)
        .mount(&server)
        .await;
    openai(&server.uri()).decide(&request()).await.unwrap();
    server.verify().await;
}

#[tokio::test]
async fn a_multi_megabyte_body_is_rejected() {
    let huge = format!(
        r#"{{"choices":[{{"message":{{"content":"{}"}}}}]}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let server = serve(ResponseTemplate::new(200).set_body_string(huge)).await;
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(
        err.message.contains("exceeds 1048576 bytes"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_endless_chunked_body_is_cut_off_while_streaming() {
    let (base, sent) = endless_body_server().await;
    let started = Instant::now();
    let err = openai(&base).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(err.message.contains("exceeds"), "{}", err.message);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = sent.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("the server sent {sent} bytes before the client hung up");
    // The server had 256 MiB to send; reading stopped at the 1 MiB limit (what it managed to
    // push past that sits in socket buffers).
    assert!(sent < 32 * 1024 * 1024, "server sent {sent} bytes");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_body_that_is_not_a_completion_is_a_permanent_error() {
    let server =
        serve(ResponseTemplate::new(200).set_body_string("<html>proxy login</html>")).await;
    let err = openai(&server.uri()).decide(&request()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(
        err.message.contains("not a JSON document"),
        "{}",
        err.message
    );
    assert_eq!(err.rejection_code(), RejectionCode::AskMalformed);
    assert_eq!(err.raw_output.as_deref(), Some("<html>proxy login</html>"));
}

#[tokio::test]
async fn a_refused_connection_is_retryable() {
    // Bind then drop: nothing listens on the port any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = openai(&format!("http://127.0.0.1:{port}"))
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{}", err.message);
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = serve(
        ResponseTemplate::new(200)
            .set_body_json(openai_tool_calls(&[("Payment", "{}")]))
            .set_delay(Duration::from_secs(3)),
    )
    .await;
    let mut config = OpenAiConfig::new(format!("{}/v1", server.uri()), "m");
    config.http = http();
    config.http.timeout = Duration::from_millis(300);
    let err = OpenAiRouter::new(config)
        .unwrap()
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{}", err.message);
    assert_eq!(
        requests(&server).await.len(),
        1,
        "timeouts are left to the runner"
    );
}

#[tokio::test]
async fn a_connection_dropped_mid_body_is_retried() {
    let (base, served) = cut_then_whole_server(openai_tool_calls(&[("Payment", "{}")])).await;
    let reply = openai(&base).decide(&request()).await.unwrap();
    assert_eq!(reply.choices[0].name, "Payment");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn x_should_retry_true_retries_even_a_400() {
    let flaky = ResponseTemplate::new(400)
        .insert_header("x-should-retry", "true")
        .set_body_json(openai_error("try again", "invalid_request_error", None));
    let ok = ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")]));
    let server = serve_then(flaky, ok).await;
    openai(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(requests(&server).await.len(), 2);
}

/// `OpenAI`'s own endpoint gets `strict: true` tools with the strict form of each schema;
/// compatible servers get the schema as it is unless asked.
#[test]
fn strict_tools_are_sent_to_openai_by_default() {
    let router = OpenAiRouter::new(OpenAiConfig::openai(
        ApiKey::new(OPENAI_KEY),
        "gpt-4.1-mini",
    ))
    .unwrap();
    let body = router.request_body(&request());
    for tool in body["tools"].as_array().unwrap() {
        assert_eq!(tool["function"]["strict"], json!(true), "{tool}");
    }
    let reserve = &body["tools"][2]["function"]["parameters"];
    assert_eq!(reserve["required"], json!(["quantity", "sku"]));
    assert_eq!(reserve["additionalProperties"], json!(false));
    assert!(reserve["properties"]["quantity"].get("minimum").is_none());
    let local = openai("http://127.0.0.1:9").request_body(&request());
    assert!(local["tools"][2]["function"].get("strict").is_none());
    assert_eq!(
        local["tools"][2]["function"]["parameters"]["properties"]["quantity"]["minimum"],
        1
    );
}

/// Anthropic's strict tool use, when asked for.
#[test]
fn strict_tools_are_sent_to_anthropic_when_asked() {
    let config = agent_llm::AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
        .with_strict_tools(true);
    let body = agent_llm::AnthropicRouter::new(config)
        .unwrap()
        .request_body(&request());
    for tool in body["tools"].as_array().unwrap() {
        assert_eq!(tool["strict"], json!(true), "{tool}");
        assert_eq!(tool["input_schema"]["additionalProperties"], json!(false));
    }
}

/// Parallel tool calls are allowed only for a state whose answers may call several tools
/// (`tools_per_answer`), and the system prompt says how many.
#[test]
fn parallel_tool_calls_follow_the_state() {
    let mut several = request();
    several.tools_per_answer = 3;
    let body = openai("http://127.0.0.1:9").request_body(&several);
    assert_eq!(body["parallel_tool_calls"], true);
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("up to 3")
    );
    let one = openai("http://127.0.0.1:9").request_body(&request());
    assert_eq!(one["parallel_tool_calls"], false);
}
