//! Ambiguous answers, one class at a time, in every mode that can express them (OpenAI tool
//! calls and JSON-schema decoding, each whole and streamed; Anthropic whole and streamed).
//! Each class was a defect of the kind "each mode judges answers with its own code": a
//! stream whose later end signal won, a JSON-schema body whose first choice ran, a restarted
//! part that overwrote the first. Every case is reduced by the real router over HTTP and
//! judged by the one decision function; every case is paired with a control (the same
//! answer without the ambiguity) that is accepted in the same mode, so a refusal is the
//! ambiguity's doing.

use agent_core::router::Decision;
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::common::*;
use crate::one_path::{Mode, Response, openai_chunk, router_for, serve, verdict};
use crate::streaming::{anthropic_message_start, anthropic_sse, openai_sse, openai_usage_chunk};

/// One hostile case: the mode, what the server sends, the code it must be refused with, and
/// the control sent instead (accepted as `Payment`).
struct Case {
    what: &'static str,
    mode: Mode,
    hostile: Response,
    code: &'static str,
    control: Response,
}

/// Run every case: the hostile answer refused with its code, the control accepted. Prints
/// the count line the reliability doc reports.
async fn check(class: &str, cases: Vec<Case>) {
    let server = MockServer::start().await;
    let request = request();
    let (mut tried, mut refused, mut executed) = (0, 0, 0);
    let mut wrong = Vec::new();
    for case in &cases {
        let router = router_for(case.mode, &server.uri());
        serve(&server, &case.hostile).await;
        let got = verdict(router.as_ref(), &request).await;
        tried += 1;
        match &got {
            Ok(_) => executed += 1,
            Err(_) => refused += 1,
        }
        if got.as_ref().err().map(String::as_str) != Some(case.code) {
            wrong.push(format!(
                "{} ({:?}): expected {}, got {got:?}",
                case.what, case.mode, case.code
            ));
        }
        serve(&server, &case.control).await;
        let control = verdict(router.as_ref(), &request).await;
        if control
            != Ok(Decision::Transition {
                to: "Payment".into(),
                arguments: json!({}),
            })
        {
            wrong.push(format!(
                "control of {} ({:?}) not accepted: {control:?}",
                case.what, case.mode
            ));
        }
    }
    println!("hostile answers ({class}): tried {tried}, refused {refused}, executed {executed}");
    assert!(wrong.is_empty(), "{class}:\n{}", wrong.join("\n"));
    assert_eq!(executed, 0);
}

// ---- OpenAI shapes ----

fn call(name: &str, args: &str) -> Value {
    json!({"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}})
}

fn calls_message(calls: &[Value]) -> Value {
    json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls})
}

fn text_message(text: &str) -> Value {
    json!({"role": "assistant", "content": text, "refusal": null})
}

const DECISION: &str = r#"{"option":"Payment","arguments":{}}"#;

fn choice(k: usize, message: &Value, finish: &str) -> Value {
    json!({"index": k, "message": message, "logprobs": null, "finish_reason": finish})
}

fn oa_body(choices: &[Value]) -> Response {
    Response::Body(
        json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
               "model": "gpt-4o-mini", "choices": choices,
               "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        .to_string(),
    )
}

fn oa_stream(chunks: &[Value]) -> Response {
    let mut chunks = chunks.to_vec();
    chunks.push(openai_usage_chunk());
    Response::Sse(openai_sse(&chunks, true))
}

fn null() -> Value {
    Value::Null
}

/// The chunks of a `Payment` call in choice `k` (no end).
fn call_chunks(k: usize, id: &str) -> Vec<Value> {
    vec![
        openai_chunk(k, &json!({"role": "assistant", "content": null}), &null()),
        openai_chunk(
            k,
            &json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": "Payment", "arguments": ""}}]}),
            &null(),
        ),
        openai_chunk(
            k,
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            &null(),
        ),
    ]
}

/// The chunks of the decision text in choice `k` (no end).
fn text_chunks(k: usize, text: &str) -> Vec<Value> {
    let mid = text.len() / 2;
    vec![
        openai_chunk(k, &json!({"role": "assistant", "content": ""}), &null()),
        openai_chunk(k, &json!({"content": &text[..mid]}), &null()),
        openai_chunk(k, &json!({"content": &text[mid..]}), &null()),
    ]
}

fn end_chunk(k: usize, reason: &str) -> Value {
    openai_chunk(k, &json!({}), &json!(reason))
}

fn with(mut chunks: Vec<Value>, more: &[Value]) -> Vec<Value> {
    chunks.extend_from_slice(more);
    chunks
}

// ---- Anthropic shapes ----

fn an_body(content: &[Value], stop: &str) -> Response {
    Response::Body(anthropic_body(content, stop).to_string())
}

fn tool_use(index: u64, name: &str) -> Vec<Value> {
    vec![
        json!({"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": format!("toolu_{index}"), "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        json!({"type": "content_block_stop", "index": index}),
    ]
}

fn message_delta(stop: &str) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
           "usage": {"output_tokens": 5}})
}

fn an_stream(events: &[Value]) -> Response {
    let mut all = vec![anthropic_message_start()];
    all.extend_from_slice(events);
    all.push(json!({"type": "message_stop"}));
    Response::Sse(anthropic_sse(&all))
}

fn an_control_stream() -> Response {
    an_stream(&with(tool_use(0, "Payment"), &[message_delta("tool_use")]))
}

fn an_control_body() -> Response {
    an_body(
        &[json!({"type": "tool_use", "id": "t", "name": "Payment", "input": {}})],
        "tool_use",
    )
}

fn oa_control_body() -> Response {
    oa_body(&[choice(
        0,
        &calls_message(&[call("Payment", "{}")]),
        "tool_calls",
    )])
}

fn oa_control_stream() -> Response {
    oa_stream(&with(
        call_chunks(0, "call_1"),
        &[end_chunk(0, "tool_calls")],
    ))
}

fn js_control_body() -> Response {
    oa_body(&[choice(0, &text_message(DECISION), "stop")])
}

fn js_control_stream() -> Response {
    oa_stream(&with(text_chunks(0, DECISION), &[end_chunk(0, "stop")]))
}

fn control(mode: Mode) -> Response {
    match mode {
        Mode::OpenAiToolsBody => oa_control_body(),
        Mode::OpenAiToolsStream => oa_control_stream(),
        Mode::OpenAiJsonBody => js_control_body(),
        Mode::OpenAiJsonStream => js_control_stream(),
        Mode::AnthropicBody => an_control_body(),
        Mode::AnthropicStream => an_control_stream(),
    }
}

fn case(what: &'static str, mode: Mode, hostile: Response, code: &'static str) -> Case {
    Case {
        what,
        mode,
        hostile,
        code,
        control: control(mode),
    }
}

/// Defect 1: an end signal that changes. Streamed, the first and the later signal are a
/// contradiction (the later one used to win, and a write tool ran); a whole body can say it
/// only as a repeated key.
#[tokio::test]
async fn an_end_signal_that_changes_is_refused_in_every_mode() {
    const C: &str = "decision.contradictory";
    const D: &str = "decision.duplicate_key";
    let oa_changed = |first: &str, then: &str, text: bool| {
        let start = if text {
            text_chunks(0, DECISION)
        } else {
            call_chunks(0, "call_1")
        };
        oa_stream(&with(start, &[end_chunk(0, first), end_chunk(0, then)]))
    };
    let an_changed = |first: &str| {
        an_stream(&with(
            tool_use(0, "Payment"),
            &[message_delta(first), message_delta("tool_use")],
        ))
    };
    let dup = |body: Response, key: &str, first: &str| {
        let Response::Body(b) = body else {
            unreachable!()
        };
        Response::Body(b.replacen(
            &format!("\"{key}\":"),
            &format!("\"{key}\":\"{first}\",\"{key}\":"),
            1,
        ))
    };
    check(
        "end signal changes",
        vec![
            case(
                "length, then tool_calls",
                Mode::OpenAiToolsStream,
                oa_changed("length", "tool_calls", false),
                C,
            ),
            case(
                "content_filter, then tool_calls",
                Mode::OpenAiToolsStream,
                oa_changed("content_filter", "tool_calls", false),
                C,
            ),
            // The end before the call: the call is content after the end as well.
            case(
                "length before the call, then tool_calls",
                Mode::OpenAiToolsStream,
                oa_stream(&{
                    let mut chunks = vec![end_chunk(0, "length")];
                    chunks.extend(call_chunks(0, "call_1"));
                    chunks.push(end_chunk(0, "tool_calls"));
                    chunks
                }),
                C,
            ),
            case(
                "length, then stop",
                Mode::OpenAiJsonStream,
                oa_changed("length", "stop", true),
                C,
            ),
            case(
                "max_tokens, then tool_use",
                Mode::AnthropicStream,
                an_changed("max_tokens"),
                C,
            ),
            case(
                "refusal, then tool_use",
                Mode::AnthropicStream,
                an_changed("refusal"),
                C,
            ),
            case(
                "two finish_reason keys",
                Mode::OpenAiToolsBody,
                dup(oa_control_body(), "finish_reason", "length"),
                D,
            ),
            case(
                "two finish_reason keys",
                Mode::OpenAiJsonBody,
                dup(js_control_body(), "finish_reason", "length"),
                D,
            ),
            case(
                "two stop_reason keys",
                Mode::AnthropicBody,
                dup(an_control_body(), "stop_reason", "max_tokens"),
                D,
            ),
        ],
    )
    .await;
}

/// Defect 2: several candidate messages are refused in both decodings, whole or streamed,
/// also when only one of them holds a decision (which used to be accepted in tool mode, and
/// the first choice ran in JSON-schema mode). Anthropic has one message per answer: its
/// counterpart, a second `message_start`, is in `parts_that_restart_or_go_on_after_their_end`.
#[tokio::test]
async fn several_candidate_messages_are_refused_in_both_decodings() {
    const S: &str = "decision.several";
    let pay = calls_message(&[call("Payment", "{}")]);
    let browse = calls_message(&[call("Browsing", "{}")]);
    let prose = text_message("Let me think.");
    check(
        "several messages",
        vec![
            case(
                "two choices, two calls",
                Mode::OpenAiToolsBody,
                oa_body(&[
                    choice(0, &pay, "tool_calls"),
                    choice(1, &browse, "tool_calls"),
                ]),
                S,
            ),
            case(
                "two choices, one call",
                Mode::OpenAiToolsBody,
                oa_body(&[choice(0, &pay, "tool_calls"), choice(1, &prose, "stop")]),
                S,
            ),
            case(
                "two choices, the call in the second",
                Mode::OpenAiToolsBody,
                oa_body(&[choice(0, &prose, "stop"), choice(1, &pay, "tool_calls")]),
                S,
            ),
            case(
                "two choices, two decision texts",
                Mode::OpenAiJsonBody,
                oa_body(&[
                    choice(0, &text_message(DECISION), "stop"),
                    choice(
                        1,
                        &text_message(r#"{"option":"Browsing","arguments":{}}"#),
                        "stop",
                    ),
                ]),
                S,
            ),
            case(
                "two choices, one decision text",
                Mode::OpenAiJsonBody,
                oa_body(&[
                    choice(0, &text_message(DECISION), "stop"),
                    choice(1, &prose, "stop"),
                ]),
                S,
            ),
            case(
                "two streamed choices, one call",
                Mode::OpenAiToolsStream,
                oa_stream(&{
                    let mut chunks = call_chunks(0, "call_1");
                    chunks.push(openai_chunk(
                        1,
                        &json!({"content": "Let me think."}),
                        &null(),
                    ));
                    chunks.push(end_chunk(0, "tool_calls"));
                    chunks.push(end_chunk(1, "stop"));
                    chunks
                }),
                S,
            ),
            case(
                "two streamed choices, two decision texts",
                Mode::OpenAiJsonStream,
                oa_stream(&{
                    let mut chunks = text_chunks(0, DECISION);
                    chunks.extend(text_chunks(1, r#"{"option":"Browsing","arguments":{}}"#));
                    chunks.push(end_chunk(0, "stop"));
                    chunks.push(end_chunk(1, "stop"));
                    chunks
                }),
                S,
            ),
        ],
    )
    .await;
}

/// A part of a streamed answer that starts again, or goes on after it ended: the first
/// used to be overwritten (or the late content taken).
#[tokio::test]
async fn parts_that_restart_or_go_on_after_their_end_are_refused() {
    const C: &str = "decision.contradictory";
    check(
        "restarts and content after an end",
        vec![
            case(
                "content_block_start twice for one index",
                Mode::AnthropicStream,
                an_stream(&{
                    let mut events = tool_use(0, "Browsing");
                    events.extend(tool_use(0, "Payment"));
                    events.push(message_delta("tool_use"));
                    events
                }),
                C,
            ),
            case(
                "message_start twice",
                Mode::AnthropicStream,
                an_stream(&{
                    let mut events = tool_use(0, "Browsing");
                    events.push(anthropic_message_start());
                    events.extend(tool_use(1, "Payment"));
                    events.push(message_delta("tool_use"));
                    events
                }),
                C,
            ),
            case(
                "a delta after content_block_stop",
                Mode::AnthropicStream,
                an_stream(&{
                    let mut events = tool_use(0, "Payment");
                    events.push(json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": " "}}));
                    events.push(message_delta("tool_use"));
                    events
                }),
                C,
            ),
            case(
                "a block after the stop reason",
                Mode::AnthropicStream,
                an_stream(&{
                    let mut events = vec![message_delta("end_turn")];
                    events.extend(tool_use(0, "Payment"));
                    events
                }),
                C,
            ),
            case(
                "a call whose id changes",
                Mode::OpenAiToolsStream,
                oa_stream(&{
                    let mut chunks = call_chunks(0, "call_1");
                    chunks.push(openai_chunk(
                        0,
                        &json!({"tool_calls": [{"index": 0, "id": "call_2", "type": "function",
                                "function": {"arguments": ""}}]}),
                        &null(),
                    ));
                    chunks.push(end_chunk(0, "tool_calls"));
                    chunks
                }),
                C,
            ),
            case(
                "a call after the choice's stop",
                Mode::OpenAiToolsStream,
                oa_stream(&{
                    let mut chunks = vec![openai_chunk(
                        0,
                        &json!({"role": "assistant", "content": "Hm."}),
                        &json!("stop"),
                    )];
                    chunks.extend(call_chunks(0, "call_1"));
                    chunks
                }),
                C,
            ),
            case(
                "decision text after the choice's stop",
                Mode::OpenAiJsonStream,
                oa_stream(&{
                    let mut chunks = vec![openai_chunk(
                        0,
                        &json!({"role": "assistant", "content": "Hm."}),
                        &json!("stop"),
                    )];
                    chunks.push(openai_chunk(0, &json!({"content": DECISION}), &null()));
                    chunks
                }),
                C,
            ),
        ],
    )
    .await;
}

/// A decision said twice in one message: calls as `tool_calls` and as the legacy
/// `function_call`, or (JSON-schema mode) as text and as calls.
#[tokio::test]
async fn a_decision_given_twice_in_one_message_is_refused() {
    const D: &str = "decision.duplicate_key";
    let both = {
        let mut m = calls_message(&[call("Payment", "{}")]);
        m["function_call"] = json!({"name": "Browsing", "arguments": "{}"});
        m
    };
    let text_and_call = {
        let mut m = calls_message(&[call("Browsing", "{}")]);
        m["content"] = json!(DECISION);
        m
    };
    let function_call_chunk = openai_chunk(
        0,
        &json!({"function_call": {"name": "Browsing", "arguments": "{}"}}),
        &null(),
    );
    check(
        "decision given twice",
        vec![
            case(
                "tool_calls and function_call",
                Mode::OpenAiToolsBody,
                oa_body(&[choice(0, &both, "tool_calls")]),
                D,
            ),
            case(
                "tool_calls and function_call, streamed",
                Mode::OpenAiToolsStream,
                oa_stream(&with(
                    call_chunks(0, "call_1"),
                    &[function_call_chunk.clone(), end_chunk(0, "tool_calls")],
                )),
                D,
            ),
            case(
                "decision text and a tool call",
                Mode::OpenAiJsonBody,
                oa_body(&[choice(0, &text_and_call, "stop")]),
                D,
            ),
            case(
                "decision text and a tool call, streamed",
                Mode::OpenAiJsonStream,
                oa_stream(&{
                    let mut chunks = text_chunks(0, DECISION);
                    chunks.extend(call_chunks(0, "call_1").split_off(1));
                    chunks.push(end_chunk(0, "stop"));
                    chunks
                }),
                D,
            ),
        ],
    )
    .await;
}

/// End reasons that say the answer is not complete, and that are neither a truncation nor
/// a refusal (Anthropic's `pause_turn`, reasons this crate does not know), in every mode.
#[tokio::test]
async fn unknown_and_unfinished_end_reasons_are_refused_in_every_mode() {
    const U: &str = "decision.unfinished";
    let mut cases = Vec::new();
    for reason in ["insufficient_system_resource", "pause", "TOOL_CALLS"] {
        cases.extend([
            case(
                "unknown finish_reason",
                Mode::OpenAiToolsBody,
                oa_body(&[choice(0, &calls_message(&[call("Payment", "{}")]), reason)]),
                U,
            ),
            case(
                "unknown finish_reason",
                Mode::OpenAiToolsStream,
                oa_stream(&with(call_chunks(0, "call_1"), &[end_chunk(0, reason)])),
                U,
            ),
            case(
                "unknown finish_reason",
                Mode::OpenAiJsonBody,
                oa_body(&[choice(0, &text_message(DECISION), reason)]),
                U,
            ),
            case(
                "unknown finish_reason",
                Mode::OpenAiJsonStream,
                oa_stream(&with(text_chunks(0, DECISION), &[end_chunk(0, reason)])),
                U,
            ),
        ]);
    }
    for reason in ["pause_turn", "something_new"] {
        cases.extend([
            case(
                "pause_turn or an unknown stop_reason",
                Mode::AnthropicBody,
                an_body(
                    &[json!({"type": "tool_use", "id": "t", "name": "Payment", "input": {}})],
                    reason,
                ),
                U,
            ),
            case(
                "pause_turn or an unknown stop_reason",
                Mode::AnthropicStream,
                an_stream(&with(tool_use(0, "Payment"), &[message_delta(reason)])),
                U,
            ),
        ]);
    }
    check("unfinished ends", cases).await;
}

/// Repeated keys in an envelope, a stream event or the decision text: a reply with the
/// conflict, judged by the one function, in every mode.
#[tokio::test]
async fn repeated_keys_are_refused_in_every_mode() {
    const D: &str = "decision.duplicate_key";
    let name_twice = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"Browsing","name":"Payment","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let event_twice = {
        let Response::Sse(mut s) = oa_stream(&call_chunks(0, "call_1")) else {
            unreachable!()
        };
        s = s.replace("data: [DONE]", "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\",\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]");
        Response::Sse(s)
    };
    let text_twice = r#"{"option":"Browsing","option":"Payment","arguments":{}}"#;
    let an_event_twice = {
        let Response::Sse(s) = an_stream(&tool_use(0, "Payment")) else {
            unreachable!()
        };
        Response::Sse(s.replace(
            "event: message_stop",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_reason\":\"tool_use\"}}\n\nevent: message_stop",
        ))
    };
    check(
        "repeated keys",
        vec![
            case(
                "a name twice in the body",
                Mode::OpenAiToolsBody,
                Response::Body(name_twice.into()),
                D,
            ),
            case(
                "finish_reason twice in a chunk",
                Mode::OpenAiToolsStream,
                event_twice.clone(),
                D,
            ),
            case(
                "option twice in the decision text",
                Mode::OpenAiJsonBody,
                oa_body(&[choice(0, &text_message(text_twice), "stop")]),
                D,
            ),
            case(
                "option twice in the streamed decision text",
                Mode::OpenAiJsonStream,
                oa_stream(&with(text_chunks(0, text_twice), &[end_chunk(0, "stop")])),
                D,
            ),
            case(
                "a name twice in the body",
                Mode::AnthropicBody,
                Response::Body(r#"{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"tool_use","id":"t","name":"Browsing","name":"Payment","input":{}}],"stop_reason":"tool_use"}"#.into()),
                D,
            ),
            case(
                "stop_reason twice in an event",
                Mode::AnthropicStream,
                an_event_twice,
                D,
            ),
        ],
    )
    .await;
}

/// An end the provider did not state is accepted (compatible servers omit it); not an
/// ambiguity. The counterpart of the classes above: the reduction does not refuse by
/// default.
#[tokio::test]
async fn a_missing_end_reason_is_accepted_in_every_mode() {
    let server = MockServer::start().await;
    let cases = [
        (
            Mode::OpenAiToolsBody,
            oa_body(&[json!({"index": 0, "message": calls_message(&[call("Payment", "{}")]),
                             "finish_reason": null})]),
        ),
        (
            Mode::OpenAiToolsStream,
            oa_stream(&call_chunks(0, "call_1")),
        ),
        (
            Mode::OpenAiJsonBody,
            oa_body(&[json!({"index": 0, "message": text_message(DECISION), "finish_reason": null})]),
        ),
        (Mode::OpenAiJsonStream, oa_stream(&text_chunks(0, DECISION))),
        (
            Mode::AnthropicBody,
            Response::Body(
                r#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"Payment","input":{}}],"stop_reason":null}"#
                    .into(),
            ),
        ),
        (Mode::AnthropicStream, an_stream(&tool_use(0, "Payment"))),
    ];
    for (mode, response) in cases {
        serve(&server, &response).await;
        let router = router_for(mode, &server.uri());
        assert_eq!(
            verdict(router.as_ref(), &request()).await,
            Ok(Decision::Transition {
                to: "Payment".into(),
                arguments: json!({})
            }),
            "{mode:?}"
        );
    }
}
