//! Streamed answers of both providers against local servers replaying their real event
//! streams: reassembled into the answer the non-streaming path reads, validated the same,
//! deltas published in order, and every way a stream can go wrong an error, never a
//! partial decision.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use agent_core::ErrorClass;
use agent_core::events::{EphemeralBus, EphemeralKind};
use agent_core::router::{RawChoice, RejectionCode, RouteRequest, Router, validate};
use agent_llm::{AnthropicConfig, AnthropicRouter, ApiKey, OpenAiConfig, OpenAiRouter, Streaming};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

// ---- The providers' event streams, as they send them ----

/// `data:` lines only (OpenAI's chat completion chunks).
pub(crate) fn openai_sse(chunks: &[Value], done: bool) -> String {
    let mut out = String::new();
    for chunk in chunks {
        let _ = write!(out, "data: {chunk}\n\n");
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    out
}

pub(crate) fn openai_chunk(delta: &Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-BGk8mD7EXsXbyd4CjLQ6TgdDJqn9q",
        "object": "chat.completion.chunk",
        "created": 1_744_052_345,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_b376dfbbd5",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        "usage": null
    })
}

pub(crate) fn openai_usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-BGk8mD7EXsXbyd4CjLQ6TgdDJqn9q",
        "object": "chat.completion.chunk",
        "created": 1_744_052_345,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_b376dfbbd5",
        "choices": [],
        "usage": {
            "prompt_tokens": 412, "completion_tokens": 23, "total_tokens": 435,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        }
    })
}

/// A streamed answer: some text, then one tool call whose arguments come in `fragments`.
fn openai_tool_call_chunks(name: &str, fragments: &[&str]) -> Vec<Value> {
    let mut chunks = vec![
        openai_chunk(
            &json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
        openai_chunk(&json!({"content": "Reserving "}), None),
        openai_chunk(&json!({"content": "the book."}), None),
        openai_chunk(
            &json!({"tool_calls": [{"index": 0, "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ),
    ];
    for f in fragments {
        chunks.push(openai_chunk(
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}),
            None,
        ));
    }
    chunks.push(openai_chunk(&json!({}), Some("tool_calls")));
    chunks.push(openai_usage_chunk());
    chunks
}

/// Named events (Anthropic's messages stream).
pub(crate) fn anthropic_sse(events: &[Value]) -> String {
    let mut out = String::new();
    for e in events {
        let name = e["type"].as_str().unwrap();
        let _ = write!(out, "event: {name}\ndata: {e}\n\n");
    }
    out
}

pub(crate) fn anthropic_message_start() -> Value {
    json!({"type": "message_start", "message": {
        "id": "msg_014p7gG3wDgGV9EUtLvnow3U", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null,
        "stop_sequence": null,
        "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 5, "output_tokens": 2, "service_tier": "standard"}
    }})
}

pub(crate) fn anthropic_text_block(index: u64, parts: &[&str]) -> Vec<Value> {
    let mut events = vec![
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
    ];
    for p in parts {
        events.push(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": p}}));
    }
    events.push(json!({"type": "content_block_stop", "index": index}));
    events
}

pub(crate) fn anthropic_end(stop_reason: &str, output_tokens: u64) -> Vec<Value> {
    vec![
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

/// A streamed answer: text, then one tool use whose input comes in `fragments`.
fn anthropic_tool_use_events(name: &str, fragments: &[&str]) -> Vec<Value> {
    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, &["Reserving ", "the book."]));
    events.push(
        json!({"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": name, "input": {}}}),
    );
    events.push(json!({"type": "content_block_delta", "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": ""}}));
    for f in fragments {
        events.push(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": f}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 1}));
    events.extend(anthropic_end("tool_use", 89));
    events
}

// ---- Servers and routers ----

pub(crate) async fn sse_server(body: String) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    server
}

fn streaming_openai(base: &str, http: agent_llm::HttpSettings) -> OpenAiRouter {
    OpenAiRouter::new(
        OpenAiConfig::new(format!("{base}/v1"), "gpt-4o-mini")
            .with_api_key(ApiKey::new(OPENAI_KEY))
            .with_max_tokens(256)
            .with_http(http)
            .with_streaming(Streaming::Always),
    )
    .unwrap()
}

fn streaming_anthropic(base: &str, http: agent_llm::HttpSettings) -> AnthropicRouter {
    AnthropicRouter::new(
        AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
            .with_base_url(base)
            .with_max_tokens(256)
            .with_http(http)
            .with_streaming(Streaming::Always),
    )
    .unwrap()
}

async fn sent_body(server: &MockServer) -> Value {
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 1, "one request, never retried");
    received[0].body_json().unwrap()
}

/// A raw HTTP server: 200 with an event stream, `prefix` sent, then `then`.
pub(crate) enum After {
    /// Keep the connection open and send nothing more.
    Stall,
    /// Close the connection in the middle of the chunked body.
    Drop,
}

pub(crate) async fn raw_sse_server(prefix: String, after: After) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let prefix = prefix.clone();
            let stall = matches!(after, After::Stall);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
                let chunk = format!("{:x}\r\n{prefix}\r\n", prefix.len());
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(chunk.as_bytes()).await.is_err()
                {
                    return;
                }
                if stall {
                    tokio::time::sleep(Duration::from_mins(1)).await;
                } else {
                    // Half a chunk, then hang up.
                    let _ = socket.write_all(b"40\r\ndata: {\"partial").await;
                    let _ = socket.shutdown().await;
                }
            });
        }
    });
    base
}

fn listened(request: &mut RouteRequest, bus: &EphemeralBus) {
    request.tokens = bus.sink("run-7", 3, 0);
}

/// Every delta on the bus so far: (seq, text), checking run, version and call.
fn deltas(
    rx: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<agent_core::events::Ephemeral>>,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        assert_eq!((e.run_id.as_str(), e.version, e.call), ("run-7", 3, 0));
        let EphemeralKind::TokenDelta { text } = &e.kind else {
            panic!("not a token delta: {e:?}");
        };
        out.push((e.seq, text.clone()));
    }
    out
}

// ---- Reassembly and validation ----

#[tokio::test]
async fn openai_streamed_tool_call_is_reassembled_validated_and_its_deltas_published() {
    let chunks = openai_tool_call_chunks(
        "ReserveInventory",
        &["{\"sku\":", "\"book-42\",", "\"quantity\":1}"],
    );
    let server = sse_server(openai_sse(&chunks, true)).await;
    let bus = EphemeralBus::new();
    let mut rx = bus.subscribe();
    let mut request = request();
    listened(&mut request, &bus);
    // `Auto`: it streams because someone listens.
    let reply = openai(&server.uri()).decide(&request).await.unwrap();

    assert_eq!(
        reply.choices,
        vec![RawChoice {
            name: "ReserveInventory".into(),
            arguments: r#"{"sku":"book-42","quantity":1}"#.into(),
        }]
    );
    assert_eq!(reply.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(
        (reply.input_tokens, reply.output_tokens),
        (Some(412), Some(23))
    );
    assert!(reply.refusal.is_none() && !reply.truncated);
    // The journaled raw output is the reassembled completion, in the non-streaming shape.
    let raw: Value = serde_json::from_str(&reply.raw_output).unwrap();
    assert_eq!(raw["object"], "chat.completion");
    assert_eq!(
        raw["choices"][0]["message"]["content"],
        "Reserving the book."
    );
    let decision = validate(&request.options, &reply, &check_input).unwrap();
    assert!(
        matches!(&decision, agent_core::router::Decision::Tool { tool, input }
            if tool == "ReserveInventory" && input["quantity"] == 1),
        "{decision:?}"
    );

    let sent = sent_body(&server).await;
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    let got = deltas(&mut rx);
    let texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Reserving ",
            "the book.",
            "{\"sku\":",
            "\"book-42\",",
            "\"quantity\":1}"
        ]
    );
    let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn anthropic_streamed_tool_use_is_reassembled_validated_and_its_deltas_published() {
    let events = anthropic_tool_use_events(
        "ReserveInventory",
        &["{\"sku\": \"bo", "ok-42\", \"quan", "tity\": 1}"],
    );
    let server = sse_server(anthropic_sse(&events)).await;
    let bus = EphemeralBus::new();
    let mut rx = bus.subscribe();
    let mut request = request();
    listened(&mut request, &bus);
    let reply = anthropic(&server.uri()).decide(&request).await.unwrap();

    assert_eq!(reply.choices.len(), 1);
    assert_eq!(reply.choices[0].name, "ReserveInventory");
    let args: Value = serde_json::from_str(&reply.choices[0].arguments).unwrap();
    assert_eq!(args, json!({"sku": "book-42", "quantity": 1}));
    assert_eq!(reply.model, "claude-sonnet-4-5-20250929");
    // Input from `message_start` (cache reads included), output from `message_delta`.
    assert_eq!(
        (reply.input_tokens, reply.output_tokens),
        (Some(477), Some(89))
    );
    assert!(reply.refusal.is_none() && !reply.truncated);
    let raw: Value = serde_json::from_str(&reply.raw_output).unwrap();
    assert_eq!(raw["stop_reason"], "tool_use");
    assert_eq!(raw["content"][0]["text"], "Reserving the book.");
    validate(&request.options, &reply, &check_input).unwrap();

    let sent = sent_body(&server).await;
    assert_eq!(sent["stream"], true);
    let got = deltas(&mut rx);
    let texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
    // The redactor may hold back the end of a delta that could begin the provider's key
    // (here `an`, as in `sk-ant-…`) until the next one shows it does not: the text is the
    // same, and it still arrives delta by delta.
    assert_eq!(
        texts.concat(),
        "Reserving the book.{\"sku\": \"book-42\", \"quantity\": 1}"
    );
    assert_eq!(
        texts[..3],
        ["Reserving ", "the book.", "{\"sku\": \"bo"],
        "{texts:?}"
    );
    assert!(texts.len() >= 4, "{texts:?}");

    assert_eq!(
        got.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
}

/// `Auto` with nobody listening asks for a whole answer: nothing changes for those who do
/// not watch. `Never` does not stream even for a listener.
#[tokio::test]
async fn auto_streams_only_for_a_listener_and_never_does_not_stream() {
    let body = openai_tool_calls(&[("Payment", "{}")]);
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&body))
        .mount(&server)
        .await;
    openai(&server.uri()).decide(&request()).await.unwrap();
    let sent: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert!(sent.get("stream").is_none(), "{sent}");

    let never = OpenAiRouter::new(
        OpenAiConfig::new(format!("{}/v1", server.uri()), "gpt-4o-mini")
            .with_http(http())
            .with_streaming(Streaming::Never),
    )
    .unwrap();
    let bus = EphemeralBus::new();
    let _rx = bus.subscribe();
    let mut request = request();
    listened(&mut request, &bus);
    assert!(request.tokens.is_listened());
    never.decide(&request).await.unwrap();
    let sent: Value = server.received_requests().await.unwrap()[1]
        .body_json()
        .unwrap();
    assert!(sent.get("stream").is_none(), "{sent}");
}

/// A server that ignores `stream` and answers with a whole body is read as one.
#[tokio::test]
async fn a_whole_body_answering_a_stream_request_is_read_as_one() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(openai_tool_calls(&[("Payment", "{}")])),
        )
        .mount(&server)
        .await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    assert_eq!(reply.choices[0].name, "Payment");
}

// ---- Streams that go wrong ----

#[tokio::test]
async fn a_stream_without_its_end_is_an_error_not_a_partial_decision() {
    // Everything but `[DONE]`: a complete-looking tool call that must not be taken.
    let chunks = openai_tool_call_chunks("Payment", &["{}"]);
    let server = sse_server(openai_sse(&chunks, false)).await;
    let err = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{err}");
    assert!(err.message.contains("ended before its last event"), "{err}");

    // Everything but `message_stop`.
    let mut events = anthropic_tool_use_events("Payment", &["{}"]);
    events.pop();
    let server = sse_server(anthropic_sse(&events)).await;
    let err = streaming_anthropic(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{err}");
    assert!(err.message.contains("ended before its last event"), "{err}");
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_a_retryable_error() {
    let chunks = openai_tool_call_chunks("Payment", &["{}"]);
    let base = raw_sse_server(openai_sse(&chunks[..3], false), After::Drop).await;
    let err = streaming_openai(&base, http())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{err}");
}

#[tokio::test]
async fn a_stalled_stream_times_out_within_the_idle_bound() {
    let mut settings = http();
    settings.stream_idle_timeout = Duration::from_millis(300);
    let chunks = openai_tool_call_chunks("Payment", &["{}"]);
    let base = raw_sse_server(openai_sse(&chunks[..3], false), After::Stall).await;
    let started = Instant::now();
    let err = streaming_openai(&base, settings.clone())
        .decide(&request())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.class, ErrorClass::Timeout, "{err}");
    assert!(err.message.contains("stalled"), "{err}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );

    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, &["Hel"]));
    let base = raw_sse_server(anthropic_sse(&events), After::Stall).await;
    let started = Instant::now();
    let err = streaming_anthropic(&base, settings)
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// The whole-request deadline bounds a stream that never stalls long enough for the idle
/// timeout (a keep-alive comment every 100 ms, forever).
#[tokio::test]
async fn a_stream_that_trickles_forever_hits_the_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let mut buf = vec![0u8; 64 * 1024];
        let _ = socket.read(&mut buf).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let _ = socket.write_all(head.as_bytes()).await;
        loop {
            if socket.write_all(b"d\r\n: keep-alive\n\r\n").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut settings = http();
    settings.stream_idle_timeout = Duration::from_millis(500);
    settings.timeout = Duration::from_millis(1200);
    let started = Instant::now();
    let err = streaming_openai(&base, settings)
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Timeout, "{err}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn error_events_map_to_the_classes_of_http_errors() {
    // Anthropic: `event: error` after a start, as sent when the API is overloaded mid-answer.
    for (kind, class) in [
        ("overloaded_error", ErrorClass::Retryable),
        ("api_error", ErrorClass::Retryable),
        ("rate_limit_error", ErrorClass::RateLimited),
        ("invalid_request_error", ErrorClass::Permanent),
        ("authentication_error", ErrorClass::Auth),
    ] {
        let mut events = vec![anthropic_message_start()];
        events.extend(anthropic_text_block(0, &["Hel"]));
        let mut body = anthropic_sse(&events);
        let _ = write!(
            body,
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": kind, "message": "Overloaded"}})
        );
        body.push_str(&anthropic_sse(&anthropic_end("end_turn", 3)));
        let server = sse_server(body).await;
        let err = streaming_anthropic(&server.uri(), http())
            .decide(&request())
            .await
            .unwrap_err();
        assert_eq!(err.class, class, "{kind}: {err}");
        assert!(err.message.contains(kind), "{err}");
        // An error inside a 200 stream is not retried by the client: the runner decides.
        sent_body(&server).await;
    }
    // OpenAI: an error object as a `data:` line.
    for (kind, class) in [
        ("server_error", ErrorClass::Retryable),
        ("invalid_request_error", ErrorClass::Permanent),
    ] {
        let mut chunks = openai_tool_call_chunks("Payment", &["{}"])[..2].to_vec();
        chunks.push(json!({"error": {"message": "The server had an error while processing your request.", "type": kind, "param": null, "code": null}}));
        let server = sse_server(openai_sse(&chunks, true)).await;
        let err = streaming_openai(&server.uri(), http())
            .decide(&request())
            .await
            .unwrap_err();
        assert_eq!(err.class, class, "{kind}: {err}");
    }
}

#[tokio::test]
async fn a_stream_past_the_byte_limit_is_rejected() {
    let mut settings = http();
    settings.max_response_bytes = 8 * 1024;
    // Well-formed and complete, but 200 deltas of 100 bytes.
    let mut chunks = vec![openai_chunk(
        &json!({"role": "assistant", "content": ""}),
        None,
    )];
    for _ in 0..200 {
        chunks.push(openai_chunk(&json!({"content": "x".repeat(100)}), None));
    }
    chunks.extend(openai_tool_call_chunks("Payment", &["{}"]));
    let server = sse_server(openai_sse(&chunks, true)).await;
    let err = streaming_openai(&server.uri(), settings.clone())
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.message.contains("exceeds 8192 bytes"), "{err}");

    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, &["y".repeat(100).as_str(); 200]));
    events.extend(anthropic_end("end_turn", 3));
    let server = sse_server(anthropic_sse(&events)).await;
    let err = streaming_anthropic(&server.uri(), settings)
        .decide(&request())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.message.contains("exceeds 8192 bytes"), "{err}");
}

// ---- Hostile streamed answers: rejected exactly as whole ones ----

#[tokio::test]
async fn a_streamed_option_never_offered_is_rejected() {
    let chunks = openai_tool_call_chunks("ChargePayment", &["{}"]);
    let server = sse_server(openai_sse(&chunks, true)).await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code.to_string(), "decision.unknown_option");

    // A lookalike (Cyrillic capital Er) in a streamed tool use.
    let mut events = anthropic_tool_use_events("Payment", &["{}"]);
    assert_eq!(events[6]["type"], "content_block_start");
    events[6]["content_block"]["name"] = json!("\u{420}ayment");
    let server = sse_server(anthropic_sse(&events)).await;
    let reply = streaming_anthropic(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code.to_string(), "decision.unknown_option");
}

#[tokio::test]
async fn duplicate_keys_in_streamed_arguments_are_refused() {
    // Split so that neither fragment alone shows the repeated key.
    let fragments = ["{\"sku\":\"a\",\"quan", "tity\":1,\"quantity\":999999}"];
    let chunks = openai_tool_call_chunks("ReserveInventory", &fragments);
    let server = sse_server(openai_sse(&chunks, true)).await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code.to_string(), "decision.duplicate_key");

    // Anthropic's input is JSON in the message: the reassembled input has a repeated key,
    // recorded as a conflict and refused by the one decision function.
    let events = anthropic_tool_use_events("ReserveInventory", &fragments);
    let server = sse_server(anthropic_sse(&events)).await;
    let reply = streaming_anthropic(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code, RejectionCode::DuplicateKey, "{reply:?}");

    // A chunk of the envelope with a repeated key: the same, and the raw output is kept.
    let mut body = openai_sse(&openai_tool_call_chunks("Payment", &["{}"])[..2], false);
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null,\"finish_reason\":\"stop\"}]}\n\n");
    body.push_str("data: [DONE]\n\n");
    let server = sse_server(body).await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    assert!(!reply.raw_output.is_empty());
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code, RejectionCode::DuplicateKey, "{reply:?}");
}

#[tokio::test]
async fn schema_violations_and_truncation_in_streams_are_rejected() {
    let chunks =
        openai_tool_call_chunks("ReserveInventory", &["{\"sku\":\"a\",", "\"quantity\":0}"]);
    let server = sse_server(openai_sse(&chunks, true)).await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    let rejection = validate(&request().options, &reply, &check_input).unwrap_err();
    assert_eq!(rejection.code.to_string(), "decision.schema_violation");

    // Cut at the token limit: a legal call is still not taken.
    let mut events = anthropic_tool_use_events("Payment", &["{}"]);
    let n = events.len();
    events[n - 2]["delta"]["stop_reason"] = json!("max_tokens");
    let server = sse_server(anthropic_sse(&events)).await;
    let reply = streaming_anthropic(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    assert!(reply.truncated);
    assert!(validate(&request().options, &reply, &check_input).is_err());
}

/// The key never reaches the journal through a stream either.
#[tokio::test]
async fn an_echoed_key_is_redacted_from_streamed_answers() {
    let mut chunks = vec![openai_chunk(
        &json!({"content": format!("my key is {OPENAI_KEY}")}),
        None,
    )];
    chunks.extend(openai_tool_call_chunks("Payment", &["{}"]));
    let server = sse_server(openai_sse(&chunks, true)).await;
    let reply = streaming_openai(&server.uri(), http())
        .decide(&request())
        .await
        .unwrap();
    assert!(!reply.raw_output.contains(OPENAI_KEY));
}

/// The live token bus: a provider echoing its own key (which the runner does not know),
/// split across deltas at every cut, plainly or in hex, never shows it to a follower, and
/// the text around it arrives.
#[tokio::test]
async fn an_echoed_key_split_across_deltas_never_reaches_the_live_bus() {
    for (provider, key) in [("openai", OPENAI_KEY), ("anthropic", ANTHROPIC_KEY)] {
        let text = format!(
            "{} my key is {key}, or {} in hex.",
            "x".repeat(200),
            hex::encode(key)
        );
        for cut in [1, 3, 7] {
            let parts: Vec<String> = text
                .chars()
                .collect::<Vec<_>>()
                .chunks(cut)
                .map(|c| c.iter().collect())
                .collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            let bus = EphemeralBus::new();
            let mut rx = bus.subscribe();
            let mut req = request();
            listened(&mut req, &bus);
            let reply = if provider == "openai" {
                let mut chunks: Vec<Value> = parts
                    .iter()
                    .map(|p| openai_chunk(&json!({ "content": p }), None))
                    .collect();
                chunks.extend(openai_tool_call_chunks("Payment", &["{}"]));
                let server = sse_server(openai_sse(&chunks, true)).await;
                streaming_openai(&server.uri(), http()).decide(&req).await
            } else {
                let mut events = vec![anthropic_message_start()];
                events.extend(anthropic_text_block(0, &parts));
                events.push(
                    json!({"type": "content_block_start", "index": 1, "content_block": {
                    "type": "tool_use", "id": "toolu_1", "name": "Payment", "input": {}}}),
                );
                events.push(json!({"type": "content_block_stop", "index": 1}));
                events.extend(anthropic_end("tool_use", 5));
                let server = sse_server(anthropic_sse(&events)).await;
                streaming_anthropic(&server.uri(), http())
                    .decide(&req)
                    .await
            };
            assert!(reply.is_ok(), "{provider} cut {cut}: {reply:?}");
            let live: String = deltas(&mut rx).into_iter().map(|(_, t)| t).collect();
            assert!(
                live.contains("my key is [redacted]"),
                "{provider} cut {cut}: {live}"
            );
            let chars: Vec<char> = key.chars().collect();
            for piece in chars.windows(8) {
                let piece: String = piece.iter().collect();
                assert!(
                    !live.contains(&piece),
                    "{provider} cut {cut}: `{piece}` went live"
                );
            }
            assert!(
                !live.contains(&hex::encode(key)[..16]),
                "{provider} cut {cut}: {live}"
            );
        }
    }
}
