//! # agent-llm
//!
//! [`Router`]s for `agent-core` that call real LLM APIs:
//!
//! - [`OpenAiRouter`]: OpenAI-compatible chat completions — OpenAI, Ollama, vLLM,
//!   llama.cpp's server — with a configurable base URL;
//! - [`AnthropicRouter`]: Anthropic's messages API.
//!
//! A router only turns a [`RouteRequest`] into one HTTP call and the response into a raw
//! [`RouterReply`]. It validates nothing: the runner checks every answer with
//! [`validate_answer`] against exactly the options it offered, re-asks a bounded number of
//! times, journals every decision and rejection, and takes the state's failure path. So a
//! model that names a tool not offered, a lookalike (`chargePayment`, a trailing space, a
//! Cyrillic `Р`), invalid JSON or several calls at once gets its answer rejected; nothing
//! runs.
//!
//! ## One canonical value, one decision function
//!
//! Every mode — OpenAI tool calls and [`Decoding::JsonSchema`], each whole or streamed, and
//! Anthropic whole or streamed — reduces the provider's answer to the same [`RouterReply`]:
//! every candidate call of every candidate message, the refusal, `truncated`, the end reason
//! as the provider gave it, and a [`Conflict`] for every duplicate or contradiction found.
//! A reduction never resolves an ambiguity (it keeps neither the first nor the last of two
//! end reasons, nor the first of two choices); [`validate_answer`] refuses any conflict
//! before anything else. The conflicts, and where they come from:
//!
//! | conflict | from | code |
//! |---|---|---|
//! | `Messages` | OpenAI `choices` with more than one entry, both decodings | `decision.several` |
//! | `DuplicateKey` | a key repeated in a body, a stream event, the JSON-schema decision text or a streamed tool input; calls given both as `tool_calls` and `function_call`, or as decision text and calls | `decision.duplicate_key` |
//! | `EndReasons` | a streamed end reason that changes (`length`, then `tool_calls`) | `decision.contradictory` |
//! | `Restarted` | a streamed part started again (a block index, `message_start`, a call's `id`) | `decision.contradictory` |
//! | `AfterEnd` | streamed content after its choice, block or message ended | `decision.contradictory` |
//! | `Unfinished` | an end reason outside the table below | `decision.unfinished` |
//!
//! End reasons, read by every mode of a provider through one table (a missing one is
//! accepted; compatible servers omit it):
//!
//! | provider | complete | truncated | refusal | otherwise |
//! |---|---|---|---|---|
//! | OpenAI | `stop`, `tool_calls`, `function_call` | `length` | `content_filter` | `Unfinished` |
//! | Anthropic | `end_turn`, `tool_use`, `stop_sequence` | `max_tokens`, `model_context_window_exceeded` | `refusal` | `Unfinished` (`pause_turn`, unknown) |
//!
//! A body that is not JSON at all is a [`RouterError`] (`ask.malformed`), not a reply.
//!
//! ## How a decision is asked
//!
//! Every legal option becomes a tool named exactly like the option, with the option's schema
//! as its parameters: the document every answer is then checked against (transitions take
//! the closed empty object, tools their closed input schema). The model must call one
//! (`tool_choice: "required"`, or `{"type": "any"}` for Anthropic) and only one (parallel
//! tool calls off). The system prompt states the rules; the user message carries the typed
//! state and the selected tool results (see [`RouteRequest::user_prompt`]).
//!
//! ## Streaming
//!
//! With [`Streaming::Auto`] (the default) a router asks for the provider's streamed answer
//! when someone listens to the request's [`TokenSink`](agent_core::events::TokenSink), and
//! publishes the text (and the tool call's argument fragments) as ephemeral deltas while it
//! comes, through [`TokenSink::hiding`](agent_core::events::TokenSink::hiding) with the
//! router's own key, finished when the stream ends. The stream is reassembled into the
//! non-streaming body and read by the same code, so the runner validates and journals the
//! complete answer exactly as a whole one; what only a stream can say (an end reason that
//! changes, a part restarted, content after an end) is recorded as a conflict beside it. It is
//! bounded like a whole body (bytes, deadline) plus an idle timeout; a stream cut before
//! its end is an error, never a partial decision. See the [guide](guide#streaming).
//!
//! ## Writing text
//!
//! [`GenerateText`] is a read tool that has the model write text for a handler, journaled
//! like every tool (a resumed run is served the journaled text), its tokens streamed to the
//! call's [`ToolContext::tokens`](agent_core::ToolContext::tokens), its usage and cost (by
//! a [`PriceTable`]) in its output. See [`generate`].
//!
//! ## Tutorial
//!
//! Pick a router from the environment, falling back to a scripted one (what the examples
//! do), ask, and validate:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use durable_agents::router::{
//!     OptionKind, RouteOption, RouteRequest, Router, ScriptedRouter, validate,
//! };
//! use serde_json::json;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // `AGENT_LLM_PROVIDER=ollama OPENAI_MODEL=llama3.1`, for example; nothing set means
//!     // `None`, and the scripted router stands in.
//!     let router: Arc<dyn Router> = match durable_agents::llm::router_from_env()? {
//!         Some(router) => router,
//!         None => Arc::new(ScriptedRouter::new([ScriptedRouter::choose("Payment", "{}")])),
//!     };
//!
//!     let request = RouteRequest {
//!         agent: "Checkout".into(),
//!         state: "Review".into(),
//!         state_data: json!({"cart": ["book"]}),
//!         options: vec![RouteOption {
//!             kind: OptionKind::Transition,
//!             name: "Payment".into(),
//!             description: "The customer confirmed the cart.".into(),
//!             schema: None,
//!         }],
//!         tool_results: vec![],
//!         feedback: vec![],
//!         tools_per_answer: 1,
//!         tokens: Default::default(),
//!     };
//!     let reply = router.decide(&request).await?;
//!     match validate(&request.options, &reply, &|_, _| Ok(())) {
//!         Ok(decision) => println!("decided: {decision:?}"),
//!         Err(rejection) => println!("rejected ({}): {}", rejection.code, rejection.message),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Or build one explicitly:
//!
//! ```no_run
//! use durable_agents::llm::{AnthropicConfig, AnthropicRouter, ApiKey, OpenAiConfig, OpenAiRouter};
//!
//! # fn main() -> Result<(), durable_agents::llm::ConfigError> {
//! let local = OpenAiRouter::new(OpenAiConfig::ollama("llama3.1"))?;
//! let vllm = OpenAiRouter::new(OpenAiConfig::new("http://gpu-box:8000/v1", "qwen2.5"))?;
//! let claude = AnthropicRouter::new(
//!     AnthropicConfig::new(ApiKey::new("sk-ant-..."), "claude-sonnet-4-5").with_max_tokens(512),
//! )?;
//! # let _ = (local, vllm, claude);
//! # Ok(())
//! # }
//! ```
//!
//! ## Environment
//!
//! [`router_from_env`] returns `None` unless `AGENT_LLM_PROVIDER` is set, so an API key
//! lying in a developer's shell never turns an offline example into a paid call.
//!
//! | variable | used by | meaning | default |
//! |---|---|---|---|
//! | `AGENT_LLM_PROVIDER` | [`router_from_env`] | `openai`, `ollama` or `anthropic` | unset: no router |
//! | `OPENAI_BASE_URL` | openai, ollama | base URL including `/v1` | `https://api.openai.com/v1`; ollama: `http://localhost:11434/v1` |
//! | `OPENAI_MODEL` | openai, ollama | model name | required |
//! | `OPENAI_API_KEY` | openai, ollama | bearer token | required for `api.openai.com` only |
//! | `ANTHROPIC_BASE_URL` | anthropic | base URL without `/v1` | `https://api.anthropic.com` |
//! | `ANTHROPIC_MODEL` | anthropic | model name | required |
//! | `ANTHROPIC_API_KEY` | anthropic | `x-api-key` | required |
//! | `AGENT_LLM_MAX_TOKENS` | all | output token limit of one decision | 1024 |
//! | `AGENT_LLM_TIMEOUT_SECS` | all | whole-request timeout | 120 |
//! | `AGENT_LLM_MAX_RETRIES` | all | retries after the first attempt | 3 |
//! | `AGENT_LLM_STREAM` | all | `auto`, `always` or `never` ([`Streaming`]) | `auto` |
//! | `AGENT_LLM_STREAM_IDLE_SECS` | all | longest silence inside a streamed answer | 60 |
//!
//! Empty variables count as unset. A missing or unusable one is a [`ConfigError`] naming it.
//!
//! ## HTTP behaviour
//!
//! - reqwest without default features, rustls on the *ring* crypto provider (the one sqlx
//!   compiles; no aws-lc), the platform's certificate store (the bundled Mozilla roots when
//!   the system has none), HTTP/1.1, no redirects (a redirect could carry the key to another
//!   host).
//! - Timeouts: connect and whole request ([`HttpSettings`]), and for streamed answers the
//!   silence between two reads.
//! - Retries on 408, 409, 429, 5xx (Anthropic's 529 included) and connection errors, with
//!   exponential backoff and jitter, honouring `retry-after-ms` and `retry-after` (seconds or
//!   an HTTP date) and `x-should-retry`; a provider asking to wait longer than
//!   [`HttpSettings::max_retry_after`] fails the call at once. Timeouts are not retried here
//!   (the runner decides).
//! - Errors carry an [`ErrorClass`]: 401/403 → `Auth`, 429 →
//!   `RateLimited`, 5xx and connection errors → `Retryable`, timeouts → `Timeout`, other
//!   4xx → `Permanent`.
//! - A response body past [`HttpSettings::max_response_bytes`] (1 MiB) is rejected while
//!   it streams in: chunks are read one by one and reading stops at the limit.
//! - Keys are wrapped in [`ApiKey`] (redacted `Debug`, no `Display`), sent in headers marked
//!   sensitive, and scrubbed from error messages; tracing fields never include them.
//!
//! The longer guide, with the request and response shapes and how to run the fuzz target,
//! is the [`guide`] module.
//!
//! [`RouteRequest::user_prompt`]: agent_core::router::RouteRequest::user_prompt
//! [`RouteRequest`]: agent_core::router::RouteRequest
//! [`RouterReply`]: agent_core::router::RouterReply
//! [`validate_answer`]: agent_core::router::validate_answer
//! [`Conflict`]: agent_core::router::Conflict
#![warn(missing_docs)]

use std::sync::Arc;

use agent_core::ErrorClass;
use agent_core::router::{
    Conflict, OptionKind, RejectionCode, RouteOption, Router, RouterError, RouterReply,
};
use serde_json::Value;

pub mod anthropic;
mod config;
pub mod generate;
mod http;
pub mod openai;
pub mod strict;

pub use anthropic::{AnthropicConfig, AnthropicRouter};
pub use config::{ApiKey, ConfigError, HttpSettings, Streaming};
pub use generate::{
    Cost, GenerateInput, GenerateText, Generation, Generator, Price, PriceTable, Usage,
};
pub use http::{backoff, classify_status, retry_after};

/// The TLS configuration of every HTTP client of the framework (rustls on the *ring*
/// provider, the platform's certificate verifier or the bundled Mozilla roots), for another
/// client to reach HTTPS the same way: the OTLP exporter of `durable-agents-observe`.
///
/// # Errors
/// [`ConfigError::Client`] when TLS cannot be set up.
pub fn tls_client_config() -> Result<rustls::ClientConfig, ConfigError> {
    http::tls_config()
}
pub use openai::{Decoding, MaxTokensField, OpenAiConfig, OpenAiRouter};

#[doc = include_str!("../../docs/llm-providers.md")]
pub mod guide {}

/// Output token limit of one decision when none is configured.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

/// The router the environment asks for, or `None` when `AGENT_LLM_PROVIDER` is unset (the
/// caller then falls back to a scripted router). See the crate docs for the variables.
///
/// # Errors
/// [`ConfigError::UnknownProvider`] for an unknown provider name, [`ConfigError::Missing`]
/// naming a required variable that is not set, [`ConfigError::Invalid`] or
/// [`ConfigError::BaseUrl`] for unusable values, [`ConfigError::Client`] when TLS cannot be
/// set up.
pub fn router_from_env() -> Result<Option<Arc<dyn Router>>, ConfigError> {
    router_from_lookup(&|name| std::env::var(name).ok())
}

/// Like [`router_from_env`], reading variables through `lookup` (tests pass a map).
///
/// # Errors
/// As [`router_from_env`].
pub fn router_from_lookup(
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Router>>, ConfigError> {
    let provider = lookup("AGENT_LLM_PROVIDER")
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty());
    let Some(provider) = provider else {
        return Ok(None);
    };
    let router: Arc<dyn Router> = match provider.as_str() {
        "openai" => Arc::new(openai::from_lookup(openai::OPENAI_BASE_URL, lookup)?),
        "ollama" => Arc::new(openai::from_lookup(openai::OLLAMA_BASE_URL, lookup)?),
        "anthropic" => Arc::new(AnthropicRouter::new(AnthropicConfig::from_lookup(lookup)?)?),
        _ => return Err(ConfigError::UnknownProvider(truncate(&provider, 40))),
    };
    Ok(Some(router))
}

/// The description a tool carries: what kind of option it is, then the graph's text.
pub(crate) fn option_description(option: &RouteOption) -> String {
    let kind = match option.kind {
        OptionKind::Transition => format!(
            "Transition: move the agent to state `{}` and end this decision.",
            option.name
        ),
        OptionKind::Tool => format!(
            "Tool: call `{}`; you will be asked again with its result.",
            option.name
        ),
    };
    if option.description.trim().is_empty() {
        kind
    } else {
        format!("{kind} {}", option.description.trim())
    }
}

/// The parameters schema a tool carries: the option's schema, the one its answer is checked
/// against (the closed empty object for an option offered without one), without `$schema`,
/// which some servers reject and which does not change what validates.
pub(crate) fn option_schema(option: &RouteOption) -> Value {
    let mut schema = option
        .schema
        .clone()
        .unwrap_or_else(agent_core::schema::closed_empty_object);
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
    }
    schema
}

/// An option as a tool's parameters: the strict form of its schema when `strict` is asked
/// and the schema has one (then `true`), else the schema as it is.
pub(crate) fn tool_parameters(option: &RouteOption, strict: bool) -> (Value, bool) {
    let schema = option_schema(option);
    if strict && let Some(s) = strict::strict_schema(&schema) {
        return (s, true);
    }
    (schema, false)
}

/// A provider's envelope (a whole body, a stream event, the decision text of the
/// JSON-schema mode) read with unique keys: `Ok(Ok(value))`, or `Ok(Err(conflict))` when a
/// key is repeated. A repeated key is not an error of the transport but an ambiguity of the
/// answer: the reduction records it ([`Conflict::DuplicateKey`]) and
/// [`validate_answer`](agent_core::router::validate_answer) refuses it, like every other
/// ambiguity. Text that is not JSON at all is `Err` ([`RejectionCode::AskMalformed`]).
pub(crate) fn read_unique(
    provider: &str,
    location: &str,
    text: &str,
) -> Result<Result<Value, Conflict>, RouterError> {
    match agent_core::json::from_str_unique(text) {
        Ok(value) => Ok(Ok(value)),
        Err(e @ agent_core::json::JsonError::DuplicateKey { .. }) => {
            Ok(Err(Conflict::DuplicateKey {
                location: location.to_owned(),
                detail: e.to_string(),
            }))
        }
        Err(e) => Err(RouterError::new(
            ErrorClass::Permanent,
            format!("{provider}: response is not a JSON document ({e})"),
        )
        .with_code(RejectionCode::AskMalformed)
        .with_raw_output(text)),
    }
}

/// The answer that is nothing but a repeated key in its envelope: the raw text kept for the
/// journal, the conflict for the one decision function.
pub(crate) fn ambiguous_envelope(body: &str, model: &str, conflict: Conflict) -> RouterReply {
    RouterReply {
        model: model.to_owned(),
        raw_output: body.to_owned(),
        conflicts: vec![conflict],
        ..RouterReply::default()
    }
}

/// What an end reason says about the answer, by the provider's table (see the guide's
/// "What comes back"). Every mode of a provider reads its end reason through this one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The answer is complete: its calls (or its text) are the decision.
    Complete,
    /// Cut short (token limit, context window): sets [`RouterReply::truncated`].
    Truncated,
    /// The provider or the model refused: sets [`RouterReply::refusal`].
    Refused,
    /// Not complete, not cut, not refused (`pause_turn`, a reason this crate does not know):
    /// [`Conflict::Unfinished`].
    Unfinished,
}

impl Ending {
    /// OpenAI's `finish_reason`.
    pub(crate) fn openai(reason: &str) -> Self {
        match reason {
            "stop" | "tool_calls" | "function_call" => Self::Complete,
            "length" => Self::Truncated,
            "content_filter" => Self::Refused,
            _ => Self::Unfinished,
        }
    }

    /// Anthropic's `stop_reason`.
    pub(crate) fn anthropic(reason: &str) -> Self {
        match reason {
            "end_turn" | "tool_use" | "stop_sequence" => Self::Complete,
            "max_tokens" | "model_context_window_exceeded" => Self::Truncated,
            "refusal" => Self::Refused,
            _ => Self::Unfinished,
        }
    }
}

/// A body that parses but is not the provider's shape.
pub(crate) fn malformed(provider: &str, what: &str, body: &str) -> RouterError {
    RouterError::new(ErrorClass::Permanent, format!("{provider}: {what}"))
        .with_code(RejectionCode::AskMalformed)
        .with_raw_output(body)
}

/// At most `max` bytes of `s`, cut at a character boundary, with `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
