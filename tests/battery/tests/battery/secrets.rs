//! Item 11: secrets. Canary secrets are planted in tool credentials (fields of the tool
//! values) and in the environment (a child process started with canary variables, whose
//! tool reads its key from there). Everything the runner produces is captured: every
//! `RouteRequest` as sent to the router (with the system and user prompts providers
//! build from it), the journal, the run records, history and states, all `tracing`
//! output at TRACE level, and what telemetry would export (issue 44): every span as the
//! OpenTelemetry layer turns it into a span (names, attributes, events, links) and every
//! metric with its labels. No canary may appear in any of it.
//!
//! A tool that puts its credential in an error message or an output leaks it unless the
//! credential is configured in `RunnerConfig::secrets` (since ae18077): both cases are
//! checked with the secrets configured, and the default (not configured) is documented.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::router::ScriptedRouter;
use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::Store;
use agent_core::store::memory::MemoryStore;
use agent_core::{
    Agent, Ctx, Execute, RetryPolicy, StepResult, Tool, ToolBox, ToolContext, ToolError,
    ToolPolicy, kind,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const CRED_CANARY: &str = "sk-canary-CRED-7f3a9c1e";
const ENV_VAR: &str = "BATTERY_CANARY_KEY";
const ENV_CANARY: &str = "canary-ENV-41d2e8b0";

/// How the tools treat their credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Use it, never show it.
    Clean,
    /// Put it in the error message of a failed call (as many HTTP clients do).
    InError,
    /// Echo it in the output (a service that reflects request headers).
    InOutput,
}

/// A user to look up.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct User {
    /// Who.
    pub user: String,
}

/// A profile.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ProfileOut {
    /// The tier.
    pub tier: String,
    /// What the service reflected back.
    pub debug: Option<String>,
}

/// Look a profile up (read), with an API key.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    api_key: String,
    mode: Mode,
}

/// Notify the user (write), with another key.
#[derive(Clone, Debug)]
pub(crate) struct Notify {
    api_key: String,
    mode: Mode,
}

fn policy() -> ToolPolicy {
    ToolPolicy {
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: std::time::Duration::from_millis(1),
            max_backoff: std::time::Duration::from_millis(1),
            multiplier: 1.0,
            jitter: false,
        },
        ..ToolPolicy::default()
    }
}

impl Tool for Profile {
    const NAME: &'static str = "Profile";
    const DESCRIPTION: &'static str = "Look a customer's profile up.";
    type Kind = kind::Read;
    type Input = User;
    type Output = ProfileOut;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Profile {
    async fn execute(&self, input: User, _: &ToolContext) -> Result<ProfileOut, ToolError> {
        let auth = format!("Bearer {}", self.api_key);
        match self.mode {
            Mode::Clean => Ok(ProfileOut {
                tier: format!("gold:{}", input.user),
                debug: None,
            }),
            Mode::InError => Err(ToolError::retryable(format!(
                "503 from profiles (request had authorization: {auth})"
            ))),
            Mode::InOutput => Ok(ProfileOut {
                tier: "gold".into(),
                debug: Some(format!("request headers: authorization={auth}")),
            }),
        }
    }
}

impl Tool for Notify {
    const NAME: &'static str = "Notify";
    const DESCRIPTION: &'static str = "Send the customer a message.";
    type Kind = kind::Write;
    type Input = User;
    type Output = String;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Notify {
    async fn execute(&self, input: User, _: &ToolContext) -> Result<String, ToolError> {
        match self.mode {
            Mode::InError => Err(ToolError::auth(format!(
                "401: key {} is not allowed to notify {}",
                self.api_key, input.user
            ))),
            Mode::InOutput => Ok(format!("sent with key {}", self.api_key)),
            Mode::Clean => Ok(format!("sent to {}", input.user)),
        }
    }
}

/// A support flow: the router looks the profile up, then replies.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Profile), write(Notify)))]
pub(crate) enum Support {
    #[agent(initial, to(Triage))]
    Intake { user: String },
    #[agent(route = llm, tools(Profile), to(Reply, Closed))]
    Triage { user: String },
    #[agent(tools(Notify), to(Closed), on_error = Failed)]
    Reply { user: String },
    #[agent(terminal)]
    Closed,
    #[agent(terminal)]
    Failed { reason: String },
}

/// The flow's handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Desk;

impl SupportHandlers for Desk {
    async fn intake(
        &self,
        ctx: Ctx<'_, support::Intake>,
        support::Intake { user }: support::Intake,
    ) -> StepResult<support::Intake> {
        Ok(ctx.to(support::Triage { user }))
    }
    async fn triage(
        &self,
        ctx: Ctx<'_, support::Triage>,
        route: support::TriageRoute,
        support::Triage { user }: support::Triage,
    ) -> StepResult<support::Triage> {
        Ok(match route {
            support::TriageRoute::Reply => ctx.to(support::Reply { user }),
            support::TriageRoute::Closed => ctx.to(support::Closed),
        })
    }
    async fn reply(
        &self,
        ctx: Ctx<'_, support::Reply>,
        support::Reply { user }: support::Reply,
    ) -> StepResult<support::Reply> {
        ctx.call::<Notify>(User { user }).await?;
        Ok(ctx.to(support::Closed))
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything the runner produced for one run, by where it went.
struct Captured {
    parts: Vec<(&'static str, String)>,
}

impl Captured {
    fn leaks(&self, canaries: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for (place, text) in &self.parts {
            for c in canaries {
                if let Some(at) = text.find(c) {
                    let start = text[..at]
                        .char_indices()
                        .rev()
                        .nth(60)
                        .map_or(0, |(i, _)| i);
                    let end = (at + c.len() + 20).min(text.len());
                    let end = (end..=text.len())
                        .find(|&i| text.is_char_boundary(i))
                        .unwrap_or(text.len());
                    out.push(format!("{place}: …{}…", &text[start..end]));
                }
            }
        }
        out
    }
}

/// Run the support flow once with tools in `mode`, capturing prompts, journal, records
/// and logs. Call from a current-thread runtime: the log subscriber is thread-local.
async fn run_flow(mode: Mode, env_key: &str) -> Captured {
    run_flow_with(mode, env_key, None, Vec::new()).await
}

/// [`run_flow`] with both canaries configured as `RunnerConfig::secrets`.
async fn run_flow_redacted(mode: Mode, env_key: &str) -> Captured {
    run_flow_with(
        mode,
        env_key,
        None,
        vec![CRED_CANARY.to_owned(), env_key.to_owned()],
    )
    .await
}

/// [`run_flow`] with another router than the scripted one.
async fn run_flow_with(
    mode: Mode,
    env_key: &str,
    llm: Option<Arc<dyn agent_core::router::Router>>,
    secrets: Vec<String>,
) -> Captured {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    let sink = Sink::default();
    let writer = sink.clone();
    let exported = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_writer(move || writer.clone())
        .finish()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("battery")));
    let log_guard = tracing::subscriber::set_default(subscriber);
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let metrics = recorder.snapshotter();
    let metrics_guard = metrics::set_default_local_recorder(&recorder);

    let prompts = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&prompts);
    let router = Arc::new(ScriptedRouter::from_fn(move |req| {
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!(
                "{}\n{}\n{}",
                serde_json::to_string(req).unwrap_or_default(),
                req.system_prompt(),
                req.user_prompt()
            ));
        if req.tool_results.is_empty() && req.feedback.is_empty() {
            ScriptedRouter::choose("Profile", r#"{"user":"ada"}"#)
        } else {
            ScriptedRouter::choose("Reply", "{}")
        }
    }));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tools = ToolBox::new()
        .with(Profile {
            api_key: CRED_CANARY.to_owned(),
            mode,
        })
        .with(Notify {
            api_key: env_key.to_owned(),
            mode,
        });
    let router: Arc<dyn agent_core::router::Router> = llm.unwrap_or(router);
    let runner = Runner::<Support, Desk>::builder(Arc::clone(&store), Desk, tools)
        .router(router)
        .config(RunnerConfig {
            worker_id: "secrets".into(),
            secrets,
            ..RunnerConfig::default()
        })
        .build()
        .expect("tool box matches");
    tracing::info!(?runner, "runner configured");
    runner
        .start("support-1", Support::Intake { user: "ada".into() })
        .await
        .expect("start");
    let finished = runner.run("support-1").await.expect("run");
    let journal = store.journal("support-1", None).await.expect("journal");
    let history = store.history("support-1").await.expect("history");
    let mut states = Vec::new();
    for t in &history {
        states.push(store.state_at("support-1", t.version).await.expect("state"));
    }
    let tool_stats = store.tool_stats(0).await.expect("stats");
    drop(log_guard);
    drop(metrics_guard);
    let _ = provider.force_flush();
    let spans = exported.get_finished_spans().unwrap_or_default();
    assert!(
        !spans.is_empty(),
        "the OpenTelemetry layer exported no span"
    );
    let spans = spans
        .iter()
        .map(|s| format!("{} {:?} {:?} {:?}", s.name, s.attributes, s.events, s.links))
        .collect::<Vec<_>>()
        .join("\n");
    let metrics = metrics
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, _)| format!("{key:?}"))
        .collect::<Vec<_>>();
    assert!(!metrics.is_empty(), "no metric was recorded");
    let metrics = metrics.join("\n");
    let logs = String::from_utf8_lossy(&sink.0.lock().unwrap_or_else(PoisonError::into_inner))
        .into_owned();
    let prompts = prompts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .join("\n");
    Captured {
        parts: vec![
            ("prompt", prompts),
            (
                "journal",
                serde_json::to_string(&journal).unwrap_or_default(),
            ),
            (
                "run record",
                format!(
                    "{} {finished:?}",
                    serde_json::to_string(&finished).unwrap_or_default()
                ),
            ),
            (
                "history",
                serde_json::to_string(&history).unwrap_or_default(),
            ),
            ("states", serde_json::to_string(&states).unwrap_or_default()),
            (
                "tool stats",
                serde_json::to_string(&tool_stats).unwrap_or_default(),
            ),
            ("logs", logs),
            ("exported spans", spans),
            ("metric labels", metrics),
        ],
    }
}

/// The child side of `planted_canaries_never_leak`: runs with canary variables in its
/// environment; the `Notify` tool reads its key from there.
#[tokio::test]
#[ignore = "child process of planted_canaries_never_leak"]
async fn child_secrets() {
    if !battery::child::is("secrets") {
        return;
    }
    let env_key = std::env::var(ENV_VAR).expect("planted canary");
    let captured = run_flow(Mode::Clean, &env_key).await;
    let leaks = captured.leaks(&[CRED_CANARY, ENV_CANARY]);
    let sizes: Vec<String> = captured
        .parts
        .iter()
        .map(|(p, t)| format!("{p}={}B", t.len()))
        .collect();
    println!("FIGURE item11 captured: {}", sizes.join(" "));
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// Clean tools holding canary credentials (one of them read from a planted environment
/// variable, next to other canary variables): no canary anywhere.
#[test]
fn planted_canaries_never_leak() {
    let out = battery::child::command("secrets::child_secrets")
        .env("BATTERY_CHILD", "secrets")
        .env(ENV_VAR, ENV_CANARY)
        .env("OPENAI_API_KEY", ENV_CANARY)
        .env("ANTHROPIC_API_KEY", ENV_CANARY)
        .env("DATABASE_PASSWORD", ENV_CANARY)
        .env("RUST_LOG", "trace")
        .output()
        .expect("spawn child");
    std::io::stderr().write_all(&out.stdout).ok();
    std::io::stderr().write_all(&out.stderr).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child found leaks");
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run: {stdout}"
    );
}

/// A tool whose error message carries its credential (the message reaches the journal,
/// the run's error, the `Failed` state, the router's feedback and the logs): with the
/// credentials configured as `RunnerConfig::secrets`, every copy is redacted.
#[tokio::test]
async fn secret_in_tool_error_is_redacted() {
    let captured = run_flow_redacted(Mode::InError, ENV_CANARY).await;
    let leaks = captured.leaks(&[CRED_CANARY, ENV_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// A tool whose output echoes its credential (the output reaches the journal and the
/// router's prompt): with the credentials configured as secrets, every copy is redacted.
#[tokio::test]
async fn secret_in_tool_output_is_redacted() {
    let captured = run_flow_redacted(Mode::InOutput, ENV_CANARY).await;
    let leaks = captured.leaks(&[CRED_CANARY, ENV_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// A one-route HTTP server answering every request with `status` and `body`; returns its
/// base URL and the requests it received.
async fn fake_provider(status: u16, body: String) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            let requests = Arc::clone(&requests);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .and_then(|v| v.trim().parse::<usize>().ok())
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            requests
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(text);
                            break;
                        }
                    }
                }
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (format!("http://{addr}/v1"), seen)
}

/// The flow with the router `make_router` builds for a fake provider answering `status`
/// and `body`: what was captured, and every request the provider received.
async fn flow_against_provider(
    make_router: fn(&str) -> Arc<dyn agent_core::router::Router>,
    status: u16,
    body: String,
) -> (Captured, String) {
    flow_against_provider_with(make_router, status, body, Vec::new()).await
}

/// [`flow_against_provider`] with `secrets` configured in the runner.
async fn flow_against_provider_with(
    make_router: fn(&str) -> Arc<dyn agent_core::router::Router>,
    status: u16,
    body: String,
    secrets: Vec<String>,
) -> (Captured, String) {
    let (url, requests) = fake_provider(status, body).await;
    let captured = run_flow_with(Mode::Clean, ENV_CANARY, Some(make_router(&url)), secrets).await;
    let sent = requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .join("\n");
    (captured, sent)
}

fn openai_router(base_url: &str) -> Arc<dyn agent_core::router::Router> {
    let config = agent_llm::openai::OpenAiConfig::new(base_url, "canary-model")
        .with_api_key(agent_llm::ApiKey::new(CRED_CANARY));
    Arc::new(agent_llm::openai::OpenAiRouter::new(config).expect("router"))
}

/// The real OpenAI-compatible router with a canary API key, against a provider that
/// rejects the key and echoes it in its error (as OpenAI does, partly masked): the key is
/// sent (in the request's `Authorization` header) and appears nowhere else.
#[tokio::test]
async fn llm_router_key_echoed_in_an_error_never_leaks() {
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {CRED_CANARY}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#
    );
    let (captured, sent) = flow_against_provider(openai_router, 401, body).await;
    assert!(sent.contains(CRED_CANARY), "the key was not sent: {sent}");
    let leaks = captured.leaks(&[CRED_CANARY, ENV_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// The same router, against a provider (or proxy) that echoes the key in a successful
/// answer's text: the raw output is journaled with the decision.
#[tokio::test]
async fn llm_router_key_echoed_in_an_answer_never_leaks() {
    let body = format!(
        r#"{{"id":"c1","object":"chat.completion","model":"canary-model","choices":[{{"index":0,"message":{{"role":"assistant","content":"debug: authorization Bearer {CRED_CANARY}","tool_calls":[{{"id":"call_1","type":"function","function":{{"name":"Closed","arguments":"{{}}"}}}}]}},"finish_reason":"tool_calls"}}],"usage":{{"prompt_tokens":1,"completion_tokens":1}}}}"#
    );
    let (captured, _) = flow_against_provider(openai_router, 200, body).await;
    let leaks = captured.leaks(&[CRED_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

fn anthropic_router(base_url: &str) -> Arc<dyn agent_core::router::Router> {
    // The router adds `v1/messages` to the base URL itself.
    let config = agent_llm::anthropic::AnthropicConfig::new(
        agent_llm::ApiKey::new(CRED_CANARY),
        "canary-model",
    )
    .with_base_url(base_url.trim_end_matches("/v1"));
    Arc::new(agent_llm::anthropic::AnthropicRouter::new(config).expect("router"))
}

/// The real Anthropic router with a canary API key, against a provider (or proxy) that
/// rejects the key and echoes it in an error of Anthropic's shape: the key is sent (in the
/// `x-api-key` header) and appears nowhere else.
#[tokio::test]
async fn anthropic_key_echoed_in_an_error_never_leaks() {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key: {CRED_CANARY}"}}}}"#
    );
    let (captured, sent) = flow_against_provider(anthropic_router, 401, body).await;
    assert!(
        sent.contains("/v1/messages"),
        "not the messages API: {sent}"
    );
    assert!(sent.contains(CRED_CANARY), "the key was not sent: {sent}");
    let leaks = captured.leaks(&[CRED_CANARY, ENV_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// The same router, against a provider that echoes the key in a successful answer's text
/// block next to its `tool_use` block: the raw output is journaled with the decision.
#[tokio::test]
async fn anthropic_key_echoed_in_an_answer_never_leaks() {
    let body = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"canary-model","content":[{{"type":"text","text":"debug: x-api-key {CRED_CANARY}"}},{{"type":"tool_use","id":"toolu_1","name":"Closed","input":{{}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
    );
    let (captured, _) = flow_against_provider(anthropic_router, 200, body).await;
    // The answer was parsed and journaled (with the key scrubbed), not lost on the way.
    assert!(
        captured
            .parts
            .iter()
            .any(|(_, text)| text.contains("debug: x-api-key")),
        "the answer's text reached no capture"
    );
    let leaks = captured.leaks(&[CRED_CANARY]);
    assert!(leaks.is_empty(), "canaries leaked:\n{}", leaks.join("\n"));
}

/// Without `RunnerConfig::secrets`, a credential in a tool's error or output is stored and
/// prompted as it is: the runner cannot know it is a secret. Documents the default.
#[tokio::test]
async fn unconfigured_secrets_are_not_redacted() {
    for mode in [Mode::InError, Mode::InOutput] {
        let captured = run_flow(mode, ENV_CANARY).await;
        assert!(
            !captured.leaks(&[CRED_CANARY]).is_empty(),
            "{mode:?}: expected the unconfigured canary in the captures"
        );
    }
}

/// A secret the runner is told about but the router is not (a key a proxy echoes, a
/// customer's token the model repeats).
const PLANTED: &str = "tok-PLANTED-5e0c2b9a71d4";

/// How the planted secret is written into a response.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// As it is.
    Plain,
    /// Every character as a JSON `\uXXXX` escape (one level: a string of the envelope).
    Escaped,
    /// Escaped twice: inside a JSON string that is itself inside the envelope's string
    /// (`OpenAI`'s `arguments`).
    EscapedTwice,
    /// Split in two by a zero-width space: the whole secret never appears, its two halves do.
    Split,
    /// In base64, one byte off its alignment (`base64("x" + secret)`).
    Base64,
    /// In lowercase hex.
    Hex,
    /// Percent-encoded, every byte.
    Percent,
}

impl Form {
    const ENCODED: [Self; 3] = [Self::Base64, Self::Hex, Self::Percent];

    /// What must not appear when the secret was planted in this form: every 8-byte slice
    /// of it, and for an encoded form every 12-byte slice of what was written (its first
    /// and last characters depend on what surrounds it, so they are left out).
    fn needles(self) -> Vec<String> {
        let mut out: Vec<String> = (0..=PLANTED.len() - 8)
            .map(|i| PLANTED[i..i + 8].to_owned())
            .collect();
        if matches!(self, Self::Base64 | Self::Hex | Self::Percent) {
            let text = written(self);
            let core = &text[3..text.len() - 3];
            out.extend((0..=core.len() - 12).map(|i| core[i..i + 12].to_owned()));
        }
        out
    }
}

fn written(form: Form) -> String {
    let once = PLANTED.chars().fold(String::new(), |mut out, c| {
        let _ = write!(out, "\\u{:04x}", u32::from(c));
        out
    });
    match form {
        Form::Plain => PLANTED.to_owned(),
        Form::Escaped => once,
        Form::EscapedTwice => once.replace('\\', "\\\\"),
        Form::Split => format!("{}\u{200b}{}", &PLANTED[..12], &PLANTED[12..]),
        Form::Base64 => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(format!("x{PLANTED}"))
        }
        Form::Hex => hex::encode(PLANTED),
        Form::Percent => PLANTED.bytes().fold(String::new(), |mut out, b| {
            let _ = write!(out, "%{b:02X}");
            out
        }),
    }
}

/// Every field of every response shape both routers read (and some they only store), with
/// `@` where the secret goes; (router, status, body template).
fn planted_shapes() -> Vec<(&'static str, u16, String)> {
    let openai = |id: &str,
                  model: &str,
                  content: &str,
                  name: &str,
                  args: &str,
                  refusal: &str,
                  finish: &str| {
        format!(
            r#"{{"id":"{id}","object":"chat.completion","model":"{model}","system_fingerprint":"fp_@","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}","refusal":{refusal},"tool_calls":[{{"id":"call_@","type":"function","function":{{"name":"{name}","arguments":"{args}"}}}}]}},"finish_reason":"{finish}"}}],"usage":{{"prompt_tokens":1,"completion_tokens":1}}}}"#
        )
    };
    let anthropic = |id: &str, model: &str, text: &str, name: &str, input: &str, stop: &str| {
        format!(
            r#"{{"id":"{id}","type":"message","role":"assistant","model":"{model}","content":[{{"type":"text","text":"{text}"}},{{"type":"tool_use","id":"toolu_@","name":"{name}","input":{input}}}],"stop_reason":"{stop}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        )
    };
    let long = format!("{}@", "x".repeat(4090));
    let ok = |provider, body| (provider, 200, body);
    vec![
        ok(
            "openai",
            openai("c-@", "m", "", "Closed", "{}", "null", "tool_calls"),
        ),
        ok(
            "openai",
            openai("c", "model-@", "", "Closed", "{}", "null", "tool_calls"),
        ),
        ok(
            "openai",
            openai("c", "m", "debug @", "Closed", "{}", "null", "tool_calls"),
        ),
        ok(
            "openai",
            openai("c", "m", &long, "Closed", "{}", "null", "tool_calls"),
        ),
        ok(
            "openai",
            openai("c", "m", "", "Reply@", "{}", "null", "tool_calls"),
        ),
        ok(
            "openai",
            openai("c", "m", "", "Profile", r#"{\"user\":\"@\"}"#, "null", "x"),
        ),
        ok(
            "openai",
            openai("c", "m", "", "Closed", r#"{\"note\":\"@\"}"#, "null", "x"),
        ),
        // As a key of the arguments, not a value.
        ok(
            "openai",
            openai(
                "c",
                "m",
                "",
                "Profile",
                r#"{\"@\":1}"#,
                "null",
                "tool_calls",
            ),
        ),
        ok(
            "openai",
            openai("c", "m", "", "Closed", "{}", r#""I will not: @""#, "stop"),
        ),
        ok("openai", openai("c", "m", "", "Closed", "{}", "null", "@")),
        (
            "openai",
            400,
            r#"{"error":{"message":"bad request: @","type":"x"}}"#.to_owned(),
        ),
        ok("openai", "<html>proxy login for @</html>".to_owned()),
        ok(
            "anthropic",
            anthropic("msg_@", "m", "", "Closed", "{}", "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "model-@", "", "Closed", "{}", "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "debug @", "Closed", "{}", "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", &long, "Closed", "{}", "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "", "Closed@", "{}", "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "", "Closed", r#"{"note":"@"}"#, "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "", "Profile", r#"{"user":"@"}"#, "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "", "Profile", r#"{"@":1}"#, "tool_use"),
        ),
        ok(
            "anthropic",
            anthropic("msg", "m", "I will not: @", "Closed", "{}", "refusal"),
        ),
        ok("anthropic", anthropic("msg", "m", "", "Closed", "{}", "@")),
        (
            "anthropic",
            529,
            r#"{"type":"error","error":{"type":"x","message":"busy @"}}"#.to_owned(),
        ),
        ok("anthropic", String::new()),
    ]
}

/// Every stored or sent byte sequence is free of the planted secret and of every 8-byte
/// slice of it, wherever and however it was planted: plain, JSON-escaped, escaped twice,
/// split in two by an inserted character, straddling the journal's truncation point.
#[tokio::test]
async fn a_secret_planted_in_any_response_field_is_never_stored() {
    let mut checked = 0;
    for (provider, status, template) in planted_shapes() {
        let forms: &[Form] = match (provider, template.contains(r#"\"@\""#)) {
            // Inside OpenAI's `arguments` string, one more level of escaping applies.
            ("openai", true) => &[Form::Plain, Form::EscapedTwice, Form::Split],
            _ if !template.contains('{') => &[Form::Plain, Form::Split],
            _ => &[Form::Plain, Form::Escaped, Form::Split],
        };
        for form in forms.iter().chain(&Form::ENCODED) {
            let needles = form.needles();
            let windows: Vec<&str> = needles.iter().map(String::as_str).collect();
            let body = template.replace('@', &written(*form));
            let make: fn(&str) -> Arc<dyn agent_core::router::Router> = match provider {
                "openai" => openai_router,
                _ => anthropic_router,
            };
            let (captured, sent) =
                flow_against_provider_with(make, status, body.clone(), vec![PLANTED.to_owned()])
                    .await;
            let mut leaks = captured.leaks(&windows);
            if let Some(w) = windows.iter().find(|w| sent.contains(**w)) {
                leaks.push(format!("sent to the provider: `{w}`"));
            }
            assert!(
                leaks.is_empty(),
                "{provider} {status} {form:?} {body}:\n{}",
                leaks.join("\n")
            );
            checked += 1;
        }
    }
    assert!(checked >= 130, "{checked} cases");
    println!("planted cases checked: {checked}");
}
