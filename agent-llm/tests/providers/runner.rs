//! End to end through the real runner: both routers against a local HTTP server replaying
//! one hostile answer per class, then a transition. No write tool ever starts with an input
//! that breaks the schema the model was shown; every hostile answer is journaled with its
//! code, and re-asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_core::router::Router;
use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::memory::MemoryStore;
use agent_core::store::{CallStatus, EntryKind, RunStatus, Store};
use agent_core::{Agent, Ctx, Execute, StepResult, Tool, ToolBox, ToolContext, ToolError, kind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{anthropic, openai};

/// One line of a refund.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Line {
    /// The product.
    pub sku: String,
    /// How many.
    #[schemars(range(min = 1, max = 10))]
    pub quantity: u32,
}

/// Where the money goes.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Method {
    /// Back to the card.
    Card {
        /// Its last four digits.
        #[schemars(regex(pattern = r"^[0-9]{4}$"))]
        last4: String,
    },
    /// Store credit.
    Credit,
}

/// A refund, as the model must write it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RefundInput {
    /// The order.
    #[schemars(length(min = 1, max = 12))]
    pub order_id: String,
    /// The amount.
    #[schemars(range(max = 1000))]
    pub amount_cents: u64,
    /// ISO currency.
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
    /// What is refunded.
    pub line: Line,
    /// How.
    pub method: Method,
}

/// Issue a refund (a write): counts how often it starts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Refund {
    pub(crate) started: Arc<AtomicU32>,
}

impl Tool for Refund {
    const NAME: &'static str = "Refund";
    const DESCRIPTION: &'static str = "Refund an order.";
    type Kind = kind::Write;
    type Input = RefundInput;
    type Output = String;
}

impl Execute for Refund {
    async fn execute(&self, input: RefundInput, _: &ToolContext) -> Result<String, ToolError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(format!("refunded {}", input.amount_cents))
    }
}

/// A desk: the model may refund, then closes.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(write(Refund)))]
pub(crate) enum Desk {
    #[agent(initial, to(Triage))]
    Intake,
    #[agent(route = llm, tools(Refund), to(Closed), on_error = Failed)]
    Triage,
    #[agent(terminal)]
    Closed,
    #[agent(terminal)]
    Failed { reason: String },
}

/// The handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers;

impl DeskHandlers for Handlers {
    async fn intake(
        &self,
        ctx: Ctx<'_, desk::Intake>,
        _: desk::Intake,
    ) -> StepResult<desk::Intake> {
        Ok(ctx.to(desk::Triage))
    }
    async fn triage(
        &self,
        ctx: Ctx<'_, desk::Triage>,
        route: desk::TriageRoute,
        _: desk::Triage,
    ) -> StepResult<desk::Triage> {
        Ok(match route {
            desk::TriageRoute::Closed => ctx.to(desk::Closed),
        })
    }
}

fn valid() -> Value {
    json!({
        "order_id": "o-1",
        "amount_cents": 100,
        "currency": "EUR",
        "line": {"sku": "book", "quantity": 1},
        "method": {"kind": "card", "last4": "4242"}
    })
}

fn with(pointer: &str, value: Value) -> Value {
    let mut v = valid();
    *v.pointer_mut(pointer).unwrap() = value;
    v
}

fn adding(pointer: &str, key: &str, value: Value) -> Value {
    let mut v = valid();
    v.pointer_mut(pointer).unwrap()[key] = value;
    v
}

/// A hostile answer: a class, the option named, the arguments as JSON text, the code.
struct Case {
    class: &'static str,
    option: &'static str,
    arguments: String,
    code: &'static str,
}

fn corpus() -> Vec<Case> {
    let case = |class, option, arguments: String, code| Case {
        class,
        option,
        arguments,
        code,
    };
    let sv = "decision.schema_violation";
    vec![
        case("maximum", "Refund", with("/amount_cents", json!(999_999)).to_string(), sv),
        case("minimum", "Refund", with("/line/quantity", json!(0)).to_string(), sv),
        case("max length", "Refund", with("/order_id", json!("o".repeat(13))).to_string(), sv),
        case("min length", "Refund", with("/order_id", json!("")).to_string(), sv),
        case("pattern", "Refund", with("/currency", json!("usd")).to_string(), sv),
        case("pattern in a variant", "Refund", with("/method/last4", json!("42x2")).to_string(), sv),
        case("unknown enum value", "Refund", with("/method", json!({"kind": "crypto"})).to_string(), sv),
        case("unknown field", "Refund", adding("", "admin", json!(true)).to_string(), sv),
        case("unknown nested field", "Refund", adding("/line", "discount", json!(90)).to_string(), sv),
        case("unknown field in a variant", "Refund", adding("/method", "cvv", json!("123")).to_string(), sv),
        case(
            "array in place of the object",
            "Refund",
            json!(["o-1", 100, "EUR", ["book", 1], {"kind": "credit"}]).to_string(),
            sv,
        ),
        case("array in place of a nested object", "Refund", with("/line", json!(["book", 1])).to_string(), sv),
        case("wrong type", "Refund", with("/amount_cents", json!("100")).to_string(), sv),
        case("missing field", "Refund", {
            let mut v = valid();
            v.as_object_mut().unwrap().remove("currency");
            v.to_string()
        }, sv),
        case(
            "duplicate key",
            "Refund",
            r#"{"order_id":"o-1","amount_cents":100,"amount_cents":999999,"currency":"EUR","line":{"sku":"book","quantity":1},"method":{"kind":"credit"}}"#.to_owned(),
            "decision.duplicate_key",
        ),
        case(
            "duplicate nested key",
            "Refund",
            r#"{"order_id":"o-1","amount_cents":100,"currency":"EUR","line":{"sku":"book","quantity":1,"quantity":9},"method":{"kind":"credit"}}"#.to_owned(),
            "decision.duplicate_key",
        ),
        case("transition arguments", "Closed", json!({"refund": valid()}).to_string(), sv),
    ]
}

/// Answers tried, accepted, and tool executions, over a whole corpus run.
#[derive(Debug, Default)]
struct Counts {
    tried: u32,
    accepted: u32,
    executed: u32,
}

#[derive(Clone, Copy, Debug)]
enum Provider {
    OpenAi,
    Anthropic,
}

fn body(provider: Provider, option: &str, arguments: &str) -> String {
    match provider {
        Provider::OpenAi => json!({
            "id": "c", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": option, "arguments": arguments}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}
        })
        .to_string(),
        // Anthropic's `input` is JSON inside the envelope: written as text, so a duplicate
        // key reaches the wire as the model wrote it.
        Provider::Anthropic => format!(
            r#"{{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"tool_use","id":"t","name":"{option}","input":{arguments}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        ),
    }
}

/// A server answering `first` once, then a plain `Closed` forever.
async fn replay(provider: Provider, first: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(first)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_string(body(provider, "Closed", "{}")))
        .mount(&server)
        .await;
    server
}

fn router(provider: Provider, server: &MockServer) -> Arc<dyn Router> {
    match provider {
        Provider::OpenAi => Arc::new(openai(&server.uri())),
        Provider::Anthropic => Arc::new(anthropic(&server.uri())),
    }
}

/// Run the desk once against `server`; the journal and the refunds started.
async fn run_once(
    provider: Provider,
    server: &MockServer,
) -> (RunStatus, Vec<agent_core::store::JournalEntry>, u32) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let refund = Refund::default();
    let started = Arc::clone(&refund.started);
    let runner =
        Runner::<Desk, _>::builder(Arc::clone(&store), Handlers, ToolBox::new().with(refund))
            .router(router(provider, server))
            .config(RunnerConfig {
                max_reasks: 2,
                ..RunnerConfig::default()
            })
            .build()
            .unwrap();
    runner.start("d", Desk::Intake).await.unwrap();
    let record = runner.run("d").await.unwrap();
    let journal = store.journal("d", None).await.unwrap();
    (record.status, journal, started.load(Ordering::SeqCst))
}

fn decisions(journal: &[agent_core::store::JournalEntry]) -> Vec<&agent_core::store::JournalEntry> {
    journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .collect()
}

async fn hostile_corpus(provider: Provider) -> Counts {
    let mut counts = Counts::default();
    for case in corpus() {
        let server = replay(
            provider,
            ResponseTemplate::new(200).set_body_string(body(
                provider,
                case.option,
                &case.arguments,
            )),
        )
        .await;
        let (status, journal, started) = run_once(provider, &server).await;
        let asked = decisions(&journal);
        counts.tried += 1;
        assert_eq!(started, 0, "{provider:?} {}: a refund started", case.class);
        assert_eq!(status, RunStatus::Completed, "{provider:?} {}", case.class);
        assert_eq!(
            asked[0].error_code.as_deref(),
            Some(case.code),
            "{provider:?} {}: {:?}",
            case.class,
            asked[0].error_message
        );
        assert_eq!(
            asked.len(),
            2,
            "{provider:?} {}: rejected, then re-asked",
            case.class
        );
        // The journaled raw output is what the server sent, so an operator sees the attack.
        let record = asked[0].output.as_ref().unwrap();
        assert!(record["raw_output"].as_str().unwrap().contains(case.option));
        assert!(
            journal.iter().all(|e| e.kind != EntryKind::Tool),
            "{provider:?} {}: a tool call was journaled",
            case.class
        );
    }
    // The control: a valid refund is accepted and runs, once.
    let server = replay(
        provider,
        ResponseTemplate::new(200).set_body_string(body(provider, "Refund", &valid().to_string())),
    )
    .await;
    let (status, journal, started) = run_once(provider, &server).await;
    counts.tried += 1;
    counts.accepted += 1;
    counts.executed += started;
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(started, 1);
    assert!(
        journal
            .iter()
            .any(|e| e.kind == EntryKind::Tool && e.status == CallStatus::Succeeded)
    );
    counts
}

#[tokio::test]
async fn openai_no_schema_violating_input_ever_starts_a_tool() {
    let counts = hostile_corpus(Provider::OpenAi).await;
    eprintln!("openai: {counts:?}");
    assert_eq!((counts.accepted, counts.executed), (1, 1));
}

#[tokio::test]
async fn anthropic_no_schema_violating_input_ever_starts_a_tool() {
    let counts = hostile_corpus(Provider::Anthropic).await;
    eprintln!("anthropic: {counts:?}");
    assert_eq!((counts.accepted, counts.executed), (1, 1));
}

/// Failures of the ask are journaled and re-asked like rejections: a 200 with an HTML or
/// empty body, an envelope with a duplicate key, an error status.
#[tokio::test]
async fn failed_asks_are_journaled_and_re_asked() {
    let dup_openai = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"Refund","name":"Closed","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    let dup_anthropic = r#"{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"t","name":"Closed","input":{}}],"stop_reason":"max_tokens","stop_reason":"tool_use"}"#;
    let cases: Vec<(Provider, ResponseTemplate, &str)> = vec![
        (
            Provider::OpenAi,
            ResponseTemplate::new(200).set_body_string("<html>login</html>"),
            "ask.malformed",
        ),
        (
            Provider::OpenAi,
            ResponseTemplate::new(200).set_body_string(""),
            "ask.malformed",
        ),
        (
            Provider::OpenAi,
            ResponseTemplate::new(200).set_body_string(r#"{"object":"list"}"#),
            "ask.malformed",
        ),
        (
            Provider::OpenAi,
            ResponseTemplate::new(200).set_body_string(dup_openai),
            "decision.duplicate_key",
        ),
        (
            Provider::OpenAi,
            ResponseTemplate::new(400).set_body_string(r#"{"error":{"message":"bad"}}"#),
            "ask.failed",
        ),
        (
            Provider::OpenAi,
            ResponseTemplate::new(401).set_body_string(r#"{"error":{"message":"no"}}"#),
            "ask.auth",
        ),
        (
            Provider::Anthropic,
            ResponseTemplate::new(200).set_body_string("<html>login</html>"),
            "ask.malformed",
        ),
        (
            Provider::Anthropic,
            ResponseTemplate::new(200).set_body_string(dup_anthropic),
            "decision.duplicate_key",
        ),
    ];
    for (provider, first, code) in cases {
        let server = replay(provider, first).await;
        let (status, journal, _) = run_once(provider, &server).await;
        let asked = decisions(&journal);
        assert_eq!(
            asked[0].error_code.as_deref(),
            Some(code),
            "{provider:?}: {:?}",
            asked[0].error_message
        );
        assert_eq!(
            asked.len(),
            2,
            "{provider:?} {code}: journaled, then re-asked"
        );
        assert_eq!(status, RunStatus::Completed, "{provider:?} {code}");
    }
}

/// An ask that takes longer than `decision_timeout` is journaled as `ask.timeout`, counts
/// against the budget, and then the state takes its failure path.
#[tokio::test]
async fn a_slow_ask_times_out_into_the_journal_and_the_failure_path() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(body(Provider::OpenAi, "Closed", "{}"))
                .set_delay(std::time::Duration::from_secs(5)),
        )
        .mount(&server)
        .await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Desk, _>::builder(
        Arc::clone(&store),
        Handlers,
        ToolBox::new().with(Refund::default()),
    )
    .router(router(Provider::OpenAi, &server))
    .config(RunnerConfig {
        max_reasks: 1,
        decision_timeout: std::time::Duration::from_millis(200),
        ..RunnerConfig::default()
    })
    .build()
    .unwrap();
    runner.start("d", Desk::Intake).await.unwrap();
    let started = std::time::Instant::now();
    let record = runner.run("d").await.unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let journal = store.journal("d", None).await.unwrap();
    let asked = decisions(&journal);
    assert_eq!(asked.len(), 2, "one ask and one re-ask");
    assert!(
        asked
            .iter()
            .all(|e| e.error_code.as_deref() == Some("ask.timeout"))
    );
    assert_eq!(record.state_name, "Failed");
}

/// An endpoint that refuses every connection: each ask is journaled as `ask.unavailable`,
/// and the state's failure path is labelled `router unavailable`, not a routing failure (the
/// model said nothing) nor a store failure.
#[tokio::test]
async fn an_unreachable_endpoint_is_labelled_router_unavailable() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Desk, _>::builder(
        Arc::clone(&store),
        Handlers,
        ToolBox::new().with(Refund::default()),
    )
    .router(Arc::new(openai(&format!("http://{closed}"))))
    .config(RunnerConfig {
        max_reasks: 1,
        ..RunnerConfig::default()
    })
    .build()
    .unwrap();
    runner.start("down", Desk::Intake).await.unwrap();
    let record = runner.run("down").await.unwrap();
    let journal = store.journal("down", None).await.unwrap();
    let asked = decisions(&journal);
    assert_eq!(asked.len(), 2, "one ask and one re-ask: {asked:?}");
    assert!(
        asked
            .iter()
            .all(|e| e.error_code.as_deref() == Some("ask.unavailable")),
        "{asked:?}"
    );
    assert_eq!(record.state_name, "Failed");
    let reason = record.state["Failed"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("router unavailable: no answer in 2 asks"),
        "{reason}"
    );
}
