//! The rate limits soak (issue 42): runs of [`Quote`], whose one state asks a model through
//! the real OpenAI router, driven by several worker processes that share one rate limit
//! kept in the store, against a [`Provider`] stand-in that enforces its own limit.
//!
//! ```text
//!   Ask (route = llm) ──► Accepted
//!                    └──► Declined
//! ```
//!
//! The stand-in answers OpenAI's `chat.completion` shape (a tool call choosing `Accepted`),
//! counts every answer by the run its prompt names, and refuses with a 429 and
//! `retry-after-ms` what would exceed its own limit (a sliding window) or what comes during
//! an outage the test declares. It is a scripted stand-in, named so: the OpenAI router, its
//! HTTP client and the runner's limits are the real ones.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::{RateLimit, Store};
use agent_core::tool::ToolBox;
use agent_core::{Agent, Ctx, StepResult};
use agent_llm::{ApiKey, HttpSettings, OpenAiConfig, OpenAiRouter};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The model the router names: the limit's key is `openai/<MODEL>`.
pub const MODEL: &str = "gpt-4o-mini";

/// A quote to accept or decline: one routed ask.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Quote {
    /// Ask the model.
    #[agent(initial, route = llm, to(Accepted, Declined))]
    Ask {
        /// The quote's id (the run's), which the prompt carries to the stand-in.
        quote: String,
    },
    /// The model accepted.
    #[agent(terminal)]
    Accepted,
    /// The model declined.
    #[agent(terminal)]
    Declined,
}

/// The handler: the model's choice, taken as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour;

impl QuoteHandlers for Behaviour {
    async fn ask(
        &self,
        ctx: Ctx<'_, quote::Ask>,
        route: quote::AskRoute,
        _: quote::Ask,
    ) -> StepResult<quote::Ask> {
        Ok(match route {
            quote::AskRoute::Accepted => ctx.to(quote::Accepted),
            quote::AskRoute::Declined => ctx.to(quote::Declined),
        })
    }
}

/// The run id of quote `i`.
#[must_use]
pub fn run_id(i: u64) -> String {
    format!("quote-{i:06}")
}

/// The shared limit the workers take their turns under: `per_second` asks a second.
///
/// # Panics
/// For a zero `per_second`.
#[must_use]
pub fn limit(per_second: u64) -> RateLimit {
    RateLimit::asks(
        format!("openai/{MODEL}"),
        per_second,
        Duration::from_secs(1),
    )
    .expect("a valid limit")
}

/// A runner of [`Quote`] asking the stand-in at `base` through the OpenAI router, its asks
/// under `limit` (none when `None`). The HTTP client does not retry: a 429 reaches the
/// runner, which pauses the limit for every worker.
///
/// # Panics
/// When the router cannot be built.
#[must_use]
pub fn runner(
    store: Arc<dyn Store>,
    base: &str,
    limit: Option<RateLimit>,
    config: RunnerConfig,
) -> Runner<Quote, Behaviour> {
    let mut http = HttpSettings::default();
    http.max_retries = 0;
    http.timeout = Duration::from_secs(20);
    let router = OpenAiRouter::new(
        OpenAiConfig::new(format!("{base}/v1"), MODEL)
            .with_api_key(ApiKey::new("sk-stand-in"))
            .with_max_tokens(64)
            .with_http(http),
    )
    .expect("the router builds");
    Runner::builder(store, Behaviour, ToolBox::new())
        .router(Arc::new(router))
        .config(RunnerConfig {
            rate_limits: limit.into_iter().collect(),
            ..config
        })
        .build()
        .expect("an agent without tools")
}

/// What the stand-in saw.
#[derive(Debug, Default)]
struct Record {
    /// When each answered request arrived, the last `window` of them.
    recent: VecDeque<Instant>,
    /// Answers per quote.
    answers: BTreeMap<String, u64>,
    /// Requests refused for the stand-in's own limit.
    over_limit: u64,
    /// Requests refused during the declared outage.
    in_outage: u64,
    /// Requests refused during the declared outage, per quote.
    outage_refusals: BTreeMap<String, u64>,
    /// The most answered requests in any window.
    busiest: usize,
    /// The declared outage's end.
    outage_until: Option<Instant>,
}

/// A model provider stand-in enforcing `allowed` answers per `window` (sliding).
#[derive(Clone, Debug)]
pub struct Provider {
    record: Arc<Mutex<Record>>,
    allowed: usize,
    window: Duration,
}

/// What the stand-in saw, at the end.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Answers per quote.
    pub answers: BTreeMap<String, u64>,
    /// Requests refused for the stand-in's own limit.
    pub over_limit: u64,
    /// Requests refused during the declared outage.
    pub in_outage: u64,
    /// The most refusals of one quote during the outage.
    pub most_outage_refusals: u64,
    /// The most answered requests in any window.
    pub busiest: usize,
}

impl Provider {
    /// A stand-in allowing `allowed` answers in any `window`.
    #[must_use]
    pub fn new(allowed: usize, window: Duration) -> Self {
        Self {
            record: Arc::new(Mutex::new(Record::default())),
            allowed,
            window,
        }
    }

    /// Serve it on a loopback port; its base URL.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind the stand-in");
        let addr = listener.local_addr().expect("its address");
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    /// Refuse every request for `length` from now, with a 429 asking to wait until then.
    ///
    /// # Panics
    /// When the record's lock is poisoned.
    pub fn outage(&self, length: Duration) {
        self.record.lock().expect("the record").outage_until = Some(Instant::now() + length);
    }

    /// What it saw so far.
    ///
    /// # Panics
    /// When the record's lock is poisoned.
    #[must_use]
    pub fn seen(&self) -> Seen {
        let r = self.record.lock().expect("the record");
        Seen {
            answers: r.answers.clone(),
            over_limit: r.over_limit,
            in_outage: r.in_outage,
            most_outage_refusals: r.outage_refusals.values().copied().max().unwrap_or(0),
            busiest: r.busiest,
        }
    }
}

/// The quote a prompt names (its state carries the run's id).
fn quote_of(body: &str) -> String {
    body.find("quote-")
        .and_then(|at| body.get(at..at + "quote-000000".len()))
        .unwrap_or("?")
        .to_owned()
}

/// A 429 in OpenAI's shape, asking to wait `wait`.
fn too_many(wait: Duration) -> Response {
    let body = json!({"error": {
        "message": "Rate limit reached for gpt-4o-mini on requests per min (RPM).",
        "type": "requests", "param": null, "code": "rate_limit_exceeded"
    }});
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    // Rounded up, as a provider's own clock would have it: a client that waits exactly this
    // long comes back after the refusal's reason is over, never a millisecond before.
    let ms = u64::try_from(wait.as_micros().div_ceil(1_000)).unwrap_or(u64::MAX);
    let ms = HeaderValue::from(ms.max(1));
    response.headers_mut().insert("retry-after-ms", ms);
    response
}

async fn answer(State(provider): State<Provider>, body: String) -> Response {
    let now = Instant::now();
    {
        let mut r = provider.record.lock().expect("the record");
        if let Some(until) = r.outage_until.filter(|u| *u > now) {
            r.in_outage += 1;
            *r.outage_refusals.entry(quote_of(&body)).or_default() += 1;
            return too_many(until - now);
        }
        while r
            .recent
            .front()
            .is_some_and(|t| now - *t >= provider.window)
        {
            r.recent.pop_front();
        }
        if r.recent.len() >= provider.allowed {
            r.over_limit += 1;
            let oldest = r.recent.front().copied().unwrap_or(now);
            return too_many(provider.window.saturating_sub(now - oldest));
        }
        r.recent.push_back(now);
        r.busiest = r.busiest.max(r.recent.len());
        *r.answers.entry(quote_of(&body)).or_default() += 1;
    }
    axum::Json(chat_completion()).into_response()
}

/// A `chat.completion` choosing `Accepted`, as OpenAI answers a forced tool call.
fn chat_completion() -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1_741_570_283,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant", "content": null, "refusal": null, "annotations": [],
                "tool_calls": [{
                    "id": "call_Gk3oxnFq3cmVnMvEiFn6sx00",
                    "type": "function",
                    "function": {"name": "Accepted", "arguments": "{}"}
                }]
            },
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 212, "completion_tokens": 9, "total_tokens": 221},
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}
