//! Shared fixtures: a route request, routers pointed at a local server, and response bodies
//! in the providers' real shapes (field names as the APIs send them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_core::router::{OptionKind, RouteOption, RouteRequest, ToolResultView};
use agent_llm::{
    AnthropicConfig, AnthropicRouter, ApiKey, HttpSettings, OpenAiConfig, OpenAiRouter,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) const OPENAI_KEY: &str = "sk-test-openai-0123456789abcdef";
pub(crate) const ANTHROPIC_KEY: &str = "sk-ant-test-0123456789abcdef";

/// Retries fast, except for what the server asks.
pub(crate) fn http() -> HttpSettings {
    let mut h = HttpSettings::default();
    h.initial_backoff = Duration::from_millis(10);
    h.max_backoff = Duration::from_millis(50);
    h.timeout = Duration::from_secs(10);
    h.max_retries = 3;
    h
}

pub(crate) fn openai(base: &str) -> OpenAiRouter {
    OpenAiRouter::new(
        OpenAiConfig::new(format!("{base}/v1"), "gpt-4o-mini")
            .with_api_key(ApiKey::new(OPENAI_KEY))
            .with_max_tokens(256)
            .with_http(http()),
    )
    .unwrap()
}

pub(crate) fn anthropic(base: &str) -> AnthropicRouter {
    AnthropicRouter::new(
        AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
            .with_base_url(base)
            .with_max_tokens(256)
            .with_http(http()),
    )
    .unwrap()
}

pub(crate) fn options() -> Vec<RouteOption> {
    vec![
        RouteOption {
            kind: OptionKind::Transition,
            name: "Payment".into(),
            description: "The customer confirmed the cart.".into(),
            schema: None,
        },
        RouteOption {
            kind: OptionKind::Transition,
            name: "Browsing".into(),
            description: "The customer wants to change the cart.".into(),
            schema: None,
        },
        RouteOption {
            kind: OptionKind::Tool,
            name: "ReserveInventory".into(),
            description: "Reserve stock for one item.".into(),
            schema: Some(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "ReserveInput",
                "type": "object",
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                "required": ["sku", "quantity"],
                "additionalProperties": false
            })),
        },
    ]
}

/// The tools offered are these exact names, nothing more.
pub(crate) fn option_names() -> Vec<&'static str> {
    vec!["Payment", "Browsing", "ReserveInventory"]
}

pub(crate) fn request() -> RouteRequest {
    RouteRequest {
        agent: "Checkout".into(),
        state: "Review".into(),
        state_data: json!({"cart": [{"sku": "book-42", "quantity": 1}]}),
        options: options(),
        tool_results: vec![ToolResultView {
            handle: "v3.0".into(),
            tool: "GetCart".into(),
            output: json!({"items": 1}),
        }],
        feedback: vec![],
        tools_per_answer: 1,
        tokens: agent_core::events::TokenSink::default(),
    }
}

/// `ReserveInventory`'s input type, as the runner's `check_input` would check it.
pub(crate) fn check_input(tool: &str, input: &Value) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct ReserveInput {
        sku: String,
        quantity: u32,
    }
    match tool {
        "ReserveInventory" => serde_json::from_value::<ReserveInput>(input.clone())
            .map(|_| ())
            .map_err(|e| e.to_string()),
        other => Err(format!("no tool `{other}`")),
    }
}

// ---- OpenAI chat.completion bodies ----

pub(crate) fn openai_tool_calls(calls: &[(&str, &str)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": format!("call_Gk3oxnFq3cmVnMvEiFn6sx{i:02}"),
                "type": "function",
                "function": {"name": name, "arguments": args}
            })
        })
        .collect();
    openai_body(
        &json!({"role": "assistant", "content": null, "tool_calls": tool_calls, "refusal": null, "annotations": []}),
        "tool_calls",
    )
}

pub(crate) fn openai_body(message: &Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1_741_570_283,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason
        }],
        "usage": {
            "prompt_tokens": 412,
            "completion_tokens": 23,
            "total_tokens": 435,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}

pub(crate) fn openai_error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

// ---- Anthropic message bodies ----

pub(crate) fn anthropic_tool_uses(calls: &[(&str, Value)]) -> Value {
    let mut content = vec![json!({"type": "text", "text": "I'll take care of that."})];
    for (i, (name, input)) in calls.iter().enumerate() {
        content.push(json!({
            "type": "tool_use",
            "id": format!("toolu_01A09q90qw90lq917835lq{i:02}"),
            "name": name,
            "input": input
        }));
    }
    anthropic_body(&content, "tool_use")
}

pub(crate) fn anthropic_body(content: &[Value], stop_reason: &str) -> Value {
    json!({
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": 2095,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 5,
            "output_tokens": 503,
            "service_tier": "standard"
        }
    })
}

pub(crate) fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"
    })
}

/// A raw HTTP server answering every request with 200 and an endless chunked body (up to
/// 256 MiB, 64 KiB per chunk). Returns its base URL and the bytes it managed to send.
pub(crate) async fn endless_body_server() -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                // Read the request head; the small JSON body fits the socket buffer.
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head).await.is_err() {
                    return;
                }
                let payload = "x".repeat(64 * 1024);
                let chunk = format!("{:x}\r\n{payload}\r\n", payload.len());
                let first = format!("{:x}\r\n{{\"choices\":[\r\n", "{\"choices\":[".len());
                if socket.write_all(first.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..4096 {
                    if socket.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                    counter.fetch_add(payload.len() as u64, Ordering::SeqCst);
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    (base, sent)
}

/// A raw HTTP server whose first connection gets a 200 promising more body than it sends,
/// then hangs up; later connections get `body` in full. Returns its base URL and the count
/// of connections served.
pub(crate) async fn cut_then_whole_server(body: Value) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    let body = body.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let response = if n == 0 {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                        body.len(),
                        &body[..10]
                    )
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (base, served)
}
