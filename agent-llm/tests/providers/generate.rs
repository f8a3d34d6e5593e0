//! The generation tool against local servers replaying both providers' streams and whole
//! bodies: text and usage (and cost by a price table), deltas published, errors classed,
//! and through the real runner, journaled once and never paid for twice.

use std::sync::Arc;
use std::time::Duration;

use agent_core::events::{EphemeralBus, EphemeralKind, TokenSink};
use agent_core::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use agent_core::store::memory::MemoryStore;
use agent_core::store::{CallStatus, EntryKind, RunStatus, Store};
use agent_core::{Agent, Ctx, ErrorClass, StepResult, ToolBox, ToolKind};
use agent_llm::{
    AnthropicConfig, ApiKey, Cost, GenerateInput, GenerateText, Generation, Generator,
    OpenAiConfig, PriceTable, Streaming, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::common::*;
use crate::streaming::{
    anthropic_end, anthropic_message_start, anthropic_sse, anthropic_text_block, openai_chunk,
    openai_sse, openai_usage_chunk, sse_server,
};

fn prices() -> PriceTable {
    PriceTable::new("USD")
        .with("gpt-4o-mini", 0.15, 0.60)
        .with("gpt-4o", 2.5, 10.0)
        .with("claude-sonnet-4-5", 3.0, 15.0)
}

fn openai_writer(base: &str, stream: Streaming) -> Generator {
    Generator::openai(
        OpenAiConfig::new(format!("{base}/v1"), "gpt-4o-mini")
            .with_api_key(ApiKey::new(OPENAI_KEY))
            .with_max_tokens(300)
            .with_http(http())
            .with_streaming(stream),
    )
    .unwrap()
    .with_prices(prices())
}

fn anthropic_writer(base: &str, stream: Streaming) -> Generator {
    Generator::anthropic(
        AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
            .with_base_url(base)
            .with_max_tokens(300)
            .with_http(http())
            .with_streaming(stream),
    )
    .unwrap()
    .with_prices(prices())
}

fn input() -> GenerateInput {
    GenerateInput::new("Write the reply to the customer.")
        .with_instructions("You are a courteous support agent. Two sentences at most.")
        .with_context(json!({"order": "o-1", "status": "shipped"}))
}

fn openai_reply_stream(parts: &[&str]) -> String {
    let mut chunks = vec![openai_chunk(
        &json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    for p in parts {
        chunks.push(openai_chunk(&json!({"content": p}), None));
    }
    chunks.push(openai_chunk(&json!({}), Some("stop")));
    chunks.push(openai_usage_chunk());
    openai_sse(&chunks, true)
}

fn anthropic_reply_stream(parts: &[&str]) -> String {
    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, parts));
    events.extend(anthropic_end("end_turn", 31));
    anthropic_sse(&events)
}

const PARTS: [&str; 3] = ["Your order o-1 ", "has shipped. ", "Thank you!"];

fn listening_sink(bus: &EphemeralBus) -> TokenSink {
    bus.sink("run-9", 1, 0)
}

fn texts(
    rx: &mut tokio::sync::broadcast::Receiver<Arc<agent_core::events::Ephemeral>>,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        let EphemeralKind::TokenDelta { text } = &e.kind else {
            panic!("{e:?}");
        };
        out.push((e.seq, text.clone()));
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn openai_generation_streams_its_tokens_and_returns_text_usage_and_cost() {
    let server = sse_server(openai_reply_stream(&PARTS)).await;
    let bus = EphemeralBus::new();
    let mut rx = bus.subscribe();
    let generation = openai_writer(&server.uri(), Streaming::Auto)
        .generate(&input(), &listening_sink(&bus))
        .await
        .unwrap();
    assert_eq!(generation.text, "Your order o-1 has shipped. Thank you!");
    assert_eq!(generation.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(
        generation.usage,
        Usage {
            input_tokens: Some(412),
            output_tokens: Some(23)
        }
    );
    // Priced by the longest configured prefix (`gpt-4o-mini`, not `gpt-4o`).
    let Cost { amount, currency } = generation.cost.clone().unwrap();
    assert_eq!(currency, "USD");
    assert!(
        close(amount, (412.0 * 0.15 + 23.0 * 0.60) / 1e6),
        "{amount}"
    );
    assert!(!generation.truncated);
    assert_eq!(
        texts(&mut rx),
        vec![
            (0, PARTS[0].to_owned()),
            (1, PARTS[1].to_owned()),
            (2, PARTS[2].to_owned())
        ]
    );

    let received = server.received_requests().await.unwrap();
    let sent: Value = received[0].body_json().unwrap();
    assert_eq!(sent["stream"], true);
    assert!(sent.get("tools").is_none(), "a generation offers no tools");
    assert_eq!(sent["max_tokens"], 300);
    assert_eq!(sent["messages"][0]["role"], "system");
    assert!(
        sent["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("\"status\": \"shipped\"")
    );
}

#[tokio::test]
async fn anthropic_generation_streams_its_tokens_and_returns_text_usage_and_cost() {
    let server = sse_server(anthropic_reply_stream(&PARTS)).await;
    let bus = EphemeralBus::new();
    let mut rx = bus.subscribe();
    let generation = anthropic_writer(&server.uri(), Streaming::Auto)
        .generate(&input().with_max_tokens(120), &listening_sink(&bus))
        .await
        .unwrap();
    assert_eq!(generation.text, "Your order o-1 has shipped. Thank you!");
    assert_eq!(
        generation.usage,
        Usage {
            input_tokens: Some(477),
            output_tokens: Some(31)
        }
    );
    let cost = generation.cost.unwrap().amount;
    assert!(close(cost, (477.0 * 3.0 + 31.0 * 15.0) / 1e6), "{cost}");
    assert_eq!(
        texts(&mut rx)
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>(),
        PARTS
    );
    let sent: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["max_tokens"], 120);
    assert_eq!(
        sent["system"],
        "You are a courteous support agent. Two sentences at most."
    );
}

/// Nobody listening: a whole answer, the same generation; no price table: no cost.
#[tokio::test]
async fn a_generation_without_listener_asks_for_a_whole_answer() {
    let server = MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(openai_body(
                &json!({"role": "assistant", "content": "Shipped.", "refusal": null}),
                "length",
            )),
        )
        .mount(&server)
        .await;
    let writer = Generator::openai(
        OpenAiConfig::new(format!("{}/v1", server.uri()), "gpt-4o-mini").with_http(http()),
    )
    .unwrap();
    let generation = writer
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap();
    assert_eq!(generation.text, "Shipped.");
    assert!(generation.truncated);
    assert_eq!(generation.cost, None);
    assert_eq!(generation.usage.output_tokens, Some(23));
    let sent: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert!(sent.get("stream").is_none());
}

#[tokio::test]
async fn generation_failures_keep_their_class() {
    // Overloaded mid-stream: retryable, as a 529.
    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, &["Your"]));
    let mut body = anthropic_sse(&events);
    body.push_str("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n");
    let server = sse_server(body).await;
    let err = anthropic_writer(&server.uri(), Streaming::Always)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{err}");

    // Cut: retryable, never a partial text.
    let mut body = openai_reply_stream(&PARTS);
    body.truncate(body.find("data: [DONE]").unwrap());
    let server = sse_server(body).await;
    let err = openai_writer(&server.uri(), Streaming::Always)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Retryable, "{err}");

    // A refusal is no text.
    let chunks = vec![
        openai_chunk(
            &json!({"role": "assistant", "content": null, "refusal": ""}),
            None,
        ),
        openai_chunk(&json!({"refusal": "I can't help with that."}), None),
        openai_chunk(&json!({}), Some("stop")),
    ];
    let server = sse_server(openai_sse(&chunks, true)).await;
    let err = openai_writer(&server.uri(), Streaming::Always)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.message.contains("I can't help with that."), "{err}");
}

// ---- Through the runner ----

/// A support desk that writes its reply with the model.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(GenerateText)))]
pub(crate) enum Support {
    #[agent(initial, tools(GenerateText), to(Replied))]
    Drafting { question: String },
    #[agent(terminal)]
    Replied { reply: Generation },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers;

impl SupportHandlers for Handlers {
    async fn drafting(
        &self,
        ctx: Ctx<'_, support::Drafting>,
        support::Drafting { question }: support::Drafting,
    ) -> StepResult<support::Drafting> {
        let reply = ctx
            .call::<GenerateText>(
                GenerateInput::new("Answer the customer.")
                    .with_context(json!({ "question": question })),
            )
            .await?;
        Ok(ctx.to(support::Replied { reply }))
    }
}

/// The worker crashes after the generation is journaled, before the step commits; the run
/// resumes on another worker and is served the journaled text: one request in all.
#[tokio::test]
async fn a_resumed_run_is_served_the_generation_from_the_journal() {
    let server = sse_server(openai_reply_stream(&PARTS)).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let bus = EphemeralBus::new();
    let mut rx = bus.subscribe();
    let tools = ToolBox::new().with(GenerateText(openai_writer(&server.uri(), Streaming::Auto)));
    let lease = Duration::from_millis(150);
    let config = |worker: &str| RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: lease,
        ephemeral: bus.clone(),
        ..RunnerConfig::default()
    };
    let hook = Arc::new(CrashAt::new(FaultPoint::CommitSent, 0));
    let crashy = Runner::<Support, _>::builder(Arc::clone(&store), Handlers, tools.clone())
        .config(config("crashy"))
        .faults(hook.clone())
        .build()
        .unwrap();
    crashy
        .start(
            "s-1",
            Support::Drafting {
                question: "Where is my order?".into(),
            },
        )
        .await
        .unwrap();
    let first = crashy.run("s-1").await;
    assert!(
        matches!(first, Err(RunnerError::Crashed(_))) && hook.fired(),
        "{first:?}"
    );
    // The deltas went out live, tagged with the run, its version and the call's index.
    let live: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert_eq!(live.len(), 3);
    assert!(
        live.iter()
            .all(|e| e.run_id == "s-1" && e.version == 0 && e.call == 0)
    );

    tokio::time::sleep(lease + Duration::from_millis(50)).await;
    let healthy = Runner::<Support, _>::builder(Arc::clone(&store), Handlers, tools)
        .config(config("healthy"))
        .build()
        .unwrap();
    let record = healthy.run("s-1").await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(
        record.state["Replied"]["reply"]["text"],
        "Your order o-1 has shipped. Thank you!"
    );
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        1,
        "the generation was paid for twice"
    );
    // Replayed, not generated again: no deltas the second time.
    assert!(rx.try_recv().is_err());

    let journal = store.journal("s-1", None).await.unwrap();
    let calls: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Tool)
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].name, "GenerateText");
    assert_eq!(calls[0].tool_kind, Some(ToolKind::Read));
    assert_eq!(calls[0].status, CallStatus::Succeeded);
    let output = calls[0].output.as_ref().unwrap();
    assert_eq!(output["usage"]["output_tokens"], 23);
    assert_eq!(output["cost"]["currency"], "USD");
}

/// Text is read by the same reduction as a decision: an answer that contradicts itself is
/// not taken as written text either (the later end reason used to win, the first choice
/// to be the text).
#[tokio::test]
async fn an_ambiguous_answer_is_no_text() {
    // The end changes between chunks.
    let chunks = vec![
        openai_chunk(
            &json!({"role": "assistant", "content": "Dear customer,"}),
            None,
        ),
        openai_chunk(&json!({}), Some("length")),
        openai_chunk(&json!({}), Some("stop")),
    ];
    let server = sse_server(openai_sse(&chunks, true)).await;
    let err = openai_writer(&server.uri(), Streaming::Always)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.message.contains("ambiguous"), "{err}");

    // Two candidate messages in a whole body.
    let mut body = openai_body(
        &json!({"role": "assistant", "content": "Dear customer, yes.", "refusal": null}),
        "stop",
    );
    let mut second = body["choices"][0].clone();
    second["index"] = json!(1);
    second["message"]["content"] = json!("Dear customer, no.");
    body["choices"].as_array_mut().unwrap().push(second);
    let server = sse_server(String::new()).await;
    server.reset().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(&body))
        .mount(&server)
        .await;
    let err = openai_writer(&server.uri(), Streaming::Never)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert!(err.message.contains("2 candidate messages"), "{err}");

    // Anthropic: `pause_turn` is not a finished text.
    let mut events = vec![anthropic_message_start()];
    events.extend(anthropic_text_block(0, &["Dear ", "customer,"]));
    events.extend(anthropic_end("pause_turn", 3));
    let server = sse_server(anthropic_sse(&events)).await;
    let err = anthropic_writer(&server.uri(), Streaming::Always)
        .generate(&input(), &TokenSink::default())
        .await
        .unwrap_err();
    assert!(err.message.contains("pause_turn"), "{err}");
}

/// A router given a price table prices each answer by the model that answered (a dated
/// name priced by its configured prefix) and the tokens billed; without one, answers are
/// unpriced. The runner counts the cost in the metric of model spend.
#[tokio::test]
async fn routers_price_their_answers_by_the_answering_model() {
    use agent_core::router::Router as _;
    use agent_llm::{AnthropicRouter, OpenAiRouter};
    use wiremock::ResponseTemplate;
    use wiremock::matchers::method;

    let openai_body = openai_tool_calls(&[("ReserveInventory", r#"{"sku":"b","quantity":1}"#)]);
    let server = MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&openai_body))
        .mount(&server)
        .await;
    let priced = OpenAiRouter::new(
        OpenAiConfig::new(format!("{}/v1", server.uri()), "gpt-4o-mini")
            .with_api_key(ApiKey::new(OPENAI_KEY))
            .with_http(http())
            .with_prices(prices()),
    )
    .unwrap();
    let reply = priced.decide(&request()).await.unwrap();
    // gpt-4o-mini-2024-07-18: 412 in at 0.15, 23 out at 0.60 per million.
    let cost = reply.cost.expect("priced");
    assert_eq!(cost.currency, "USD");
    assert!(
        (cost.amount - (412.0 * 0.15 + 23.0 * 0.60) / 1e6).abs() < 1e-12,
        "{cost:?}"
    );
    let unpriced = openai(&server.uri()).decide(&request()).await.unwrap();
    assert_eq!(unpriced.cost, None, "no table, no cost");

    let anthropic_body =
        anthropic_tool_uses(&[("ReserveInventory", json!({"sku": "b", "quantity": 1}))]);
    let server = MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&anthropic_body))
        .mount(&server)
        .await;
    let priced = AnthropicRouter::new(
        AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
            .with_base_url(server.uri())
            .with_http(http())
            .with_prices(prices()),
    )
    .unwrap();
    let reply = priced.decide(&request()).await.unwrap();
    // claude-sonnet-4-5-20250929: 2,100 in at 3, 503 out at 15 per million.
    let cost = reply.cost.expect("priced");
    assert!(
        (cost.amount - (2100.0 * 3.0 + 503.0 * 15.0) / 1e6).abs() < 1e-12,
        "{cost:?}"
    );
    let cheap = PriceTable::new("EUR").with("gpt-4o", 1.0, 1.0);
    let unknown = AnthropicRouter::new(
        AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
            .with_base_url(server.uri())
            .with_http(http())
            .with_prices(cheap),
    )
    .unwrap();
    let reply = unknown.decide(&request()).await.unwrap();
    assert_eq!(
        reply.cost, None,
        "a model the table does not name is unpriced"
    );
}
