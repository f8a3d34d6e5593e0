//! Anthropic's messages API with tool use.

use std::collections::BTreeMap;

use agent_core::ErrorClass;
use agent_core::events::TokenSink;
use agent_core::router::{Conflict, RawChoice, RouteRequest, Router, RouterError, RouterReply};
use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tracing::Instrument;

use crate::config::{ApiKey, ConfigError, Env, HttpSettings, Streaming, check_base_url, join};
use crate::generate::{GenerateInput, Written};
use crate::http::{StreamFlow, Transport};
use crate::{
    DEFAULT_MAX_TOKENS, Ending, ambiguous_envelope, malformed, option_description, read_unique,
    tool_parameters,
};

/// Anthropic's endpoint.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The beta that enables strict tool use, sent in `anthropic-beta` when asked for.
pub const STRICT_TOOLS_BETA: &str = "structured-outputs-2025-11-13";

/// Configuration of an [`AnthropicRouter`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// Base URL without the version, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// The model, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// Sent as `x-api-key`.
    pub api_key: ApiKey,
    /// Output token limit of one decision (`max_tokens`, required by the API).
    pub max_tokens: u32,
    /// Sampling temperature; `None` leaves the API's default.
    pub temperature: Option<f32>,
    /// Timeouts, retries, limits.
    pub http: HttpSettings,
    /// Strict tool use: tools with `strict: true` and the strict form of each schema
    /// ([`crate::strict`]), with the [`STRICT_TOOLS_BETA`] header. Off by default (a beta
    /// not every model or proxy accepts). Every answer is still validated by the runner.
    pub strict_tools: bool,
    /// Ask for a streamed answer (server-sent events) or a whole one;
    /// [`Streaming::Auto`] by default: stream when someone listens.
    pub stream: Streaming,
    /// Prices of the models, to count what each answer cost in the metric of model
    /// spend ([`RouterReply::cost`]); `None` leaves answers unpriced (their tokens are
    /// still counted).
    pub prices: Option<std::sync::Arc<crate::PriceTable>>,
}

impl AnthropicConfig {
    /// Anthropic's API with this key and model.
    #[must_use]
    pub fn new(api_key: ApiKey, model: impl Into<String>) -> Self {
        Self {
            base_url: ANTHROPIC_BASE_URL.to_owned(),
            model: model.into(),
            api_key,
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: None,
            http: HttpSettings::default(),
            strict_tools: false,
            stream: Streaming::Auto,
            prices: None,
        }
    }

    /// Price every answer by `prices` ([`AnthropicConfig::prices`]).
    #[must_use]
    pub fn with_prices(mut self, prices: crate::PriceTable) -> Self {
        self.prices = Some(std::sync::Arc::new(prices));
        self
    }

    /// Stream answers always, never, or when someone listens ([`Streaming::Auto`]).
    #[must_use]
    pub fn with_streaming(mut self, stream: Streaming) -> Self {
        self.stream = stream;
        self
    }

    /// Use strict tool use, or not.
    #[must_use]
    pub fn with_strict_tools(mut self, strict: bool) -> Self {
        self.strict_tools = strict;
        self
    }

    /// Set the base URL (a proxy, or a test server).
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Set the output token limit.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Set the HTTP settings.
    #[must_use]
    pub fn with_http(mut self, http: HttpSettings) -> Self {
        self.http = http;
        self
    }

    /// Read `ANTHROPIC_API_KEY`, `ANTHROPIC_MODEL`, `ANTHROPIC_BASE_URL` and the shared
    /// `AGENT_LLM_*` settings from the process environment (see the crate docs' table).
    ///
    /// # Errors
    /// [`ConfigError::Missing`] naming `ANTHROPIC_API_KEY` or `ANTHROPIC_MODEL`;
    /// [`ConfigError::Invalid`] or [`ConfigError::BaseUrl`] for unusable values.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        let base_url = env
            .get("ANTHROPIC_BASE_URL")
            .unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned());
        check_base_url(&base_url)?;
        let api_key = env.require("ANTHROPIC_API_KEY", "the key sent as `x-api-key`")?;
        let model = env.require("ANTHROPIC_MODEL", "the model to route with")?;
        let (max_tokens, http) = env.common()?;
        let mut config = Self::new(ApiKey::new(api_key), model)
            .with_base_url(base_url)
            .with_http(http)
            .with_streaming(env.streaming()?);
        if let Some(m) = max_tokens {
            config.max_tokens = m;
        }
        Ok(config)
    }
}

/// A [`Router`] on Anthropic's messages API.
///
/// Every legal option is offered as a tool named exactly like the option, with
/// `tool_choice: {"type": "any", "disable_parallel_tool_use": true}` (false for a state whose
/// answers may call several tools, `tools_per_answer`). Every `tool_use` block
/// in the answer becomes a [`RawChoice`] (its `input` serialized as JSON text); nothing is
/// validated here.
#[derive(Debug)]
pub struct AnthropicRouter {
    config: AnthropicConfig,
    url: reqwest::Url,
    transport: Transport,
}

impl AnthropicRouter {
    /// A router with this configuration.
    ///
    /// # Errors
    /// [`ConfigError::BaseUrl`] for a base URL that does not parse, [`ConfigError::Client`]
    /// when TLS cannot be set up.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let url = join(&config.base_url, "v1/messages")?;
        let transport = Transport::new(
            "anthropic",
            config.http.clone(),
            Some(config.api_key.clone()),
        )?;
        Ok(Self {
            config,
            url,
            transport,
        })
    }

    /// A router configured by [`AnthropicConfig::from_env`].
    ///
    /// # Errors
    /// As [`AnthropicConfig::from_env`] and [`AnthropicRouter::new`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(AnthropicConfig::from_env()?)
    }

    /// Its configuration.
    #[must_use]
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// The JSON body sent for `request`.
    #[must_use]
    pub fn request_body(&self, request: &RouteRequest) -> Value {
        let tools: Vec<Value> = request
            .options
            .iter()
            .map(|o| {
                let (schema, strict) = tool_parameters(o, self.config.strict_tools);
                let mut tool = json!({
                    "name": o.name,
                    "description": option_description(o),
                    "input_schema": schema,
                });
                if strict {
                    tool["strict"] = json!(true);
                }
                tool
            })
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "system": request.system_prompt(),
            "messages": [{"role": "user", "content": request.user_prompt()}],
            "tools": tools,
            // Several calls only where the state allows them (`tools_per_answer`).
            "tool_choice": {
                "type": "any",
                "disable_parallel_tool_use": request.tools_per_answer <= 1,
            },
        });
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// The JSON body sent to have the model write text for `input` (no tools).
    #[must_use]
    pub fn generation_body(&self, input: &GenerateInput) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": input.max_tokens.unwrap_or(self.config.max_tokens),
            "messages": [{"role": "user", "content": input.user_message()}],
        });
        if let Some(instructions) = input.instructions.as_deref().filter(|i| !i.is_empty()) {
            body["system"] = json!(instructions);
        }
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// Have the model write text for `input`, streaming its tokens to `tokens` when
    /// [`AnthropicConfig::stream`] says so.
    pub(crate) async fn write(
        &self,
        input: &GenerateInput,
        tokens: &TokenSink,
    ) -> Result<Written, RouterError> {
        let stream = self.config.stream.wanted(tokens);
        let (text, conflicts) = self
            .complete(self.generation_body(input), stream, tokens, false)
            .await?;
        let reply = self.transport.parse_reply(&text, conflicts, |body| {
            parse_response(body, &self.config.model)
        })?;
        let root: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let written: String = root
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        Ok(Written::new(reply, self.transport.redact(&written)))
    }

    /// The body of the complete answer to `body`: whole, or streamed and reassembled into
    /// the shape of a whole message (so one parser reads both), with what the stream
    /// contradicted itself in (which the reassembled body cannot show). Text deltas go to
    /// `tokens`, and with `arguments` the tool inputs' JSON fragments too, through a sink
    /// that hides the router's own key (a provider may echo it), finished when the stream
    /// ends.
    async fn complete(
        &self,
        mut body: Value,
        stream: bool,
        tokens: &TokenSink,
        arguments: bool,
    ) -> Result<(String, Vec<Conflict>), RouterError> {
        if stream {
            body["stream"] = json!(true);
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| {
            RouterError::new(ErrorClass::Permanent, format!("anthropic: request: {e}"))
        })?;
        if !stream {
            let body = self
                .transport
                .post_json(&self.url, self.headers()?, bytes)
                .await?;
            return Ok((body.text, Vec::new()));
        }
        let tokens = tokens.hiding(self.config.api_key.expose());
        let mut acc = EventStream::new(tokens.clone(), arguments);
        let transport = &self.transport;
        let whole = transport
            .post_stream(&self.url, self.headers()?, bytes, &mut |event, data| {
                acc.event(transport, event, data)
            })
            .await;
        // Whatever the sink held back is published (or dropped by it) once, however the
        // stream ended.
        tokens.finish();
        match whole? {
            Some(body) => Ok((body.text, Vec::new())),
            None => acc
                .into_body()
                .map(|(v, conflicts)| (v.to_string(), conflicts))
                .map_err(|e| transport.redact_error(e)),
        }
    }

    fn headers(&self) -> Result<HeaderMap, RouterError> {
        let mut headers = HeaderMap::new();
        let mut key = HeaderValue::from_str(self.config.api_key.expose()).map_err(|_| {
            RouterError::new(
                ErrorClass::Auth,
                "anthropic: the API key is not a valid header value",
            )
        })?;
        key.set_sensitive(true);
        headers.insert("x-api-key", key);
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if self.config.strict_tools {
            headers.insert(
                "anthropic-beta",
                HeaderValue::from_static(STRICT_TOOLS_BETA),
            );
        }
        Ok(headers)
    }
}

#[async_trait]
impl Router for AnthropicRouter {
    fn limit_key(&self) -> Option<String> {
        Some(self.transport.limit_key(&self.config.model))
    }

    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        let span = self
            .transport
            .chat_span(&self.config.model, &self.url, request);
        let reply = async {
            let stream = self.config.stream.wanted(&request.tokens);
            let (text, conflicts) = self
                .complete(self.request_body(request), stream, &request.tokens, true)
                .await?;
            self.transport.parse_reply(&text, conflicts, |body| {
                parse_response(body, &self.config.model)
            })
        }
        .instrument(span.clone())
        .await;
        Transport::finish_reply(&span, reply, self.config.prices.as_deref())
    }
}

/// Turn a messages API body into a [`RouterReply`], faithfully: every `tool_use` content
/// block becomes a [`RawChoice`] (its `input` serialized as JSON text), and `stop_reason`
/// is read by the one table (the crate docs' end reasons): `refusal` becomes
/// [`RouterReply::refusal`] (with the text blocks, if any), `max_tokens` or
/// `model_context_window_exceeded` sets [`RouterReply::truncated`], `pause_turn` or a
/// reason this crate does not know is [`Conflict::Unfinished`]. A repeated key anywhere in
/// the body gives a reply carrying only the body and [`Conflict::DuplicateKey`]. Input
/// tokens include cache reads and writes, as billed.
///
/// # Errors
/// A [`ErrorClass::Permanent`] [`RouterError`] when the body is not JSON, or not a JSON
/// object with a `content` array (or is an error object).
pub fn parse_response(body: &str, fallback_model: &str) -> Result<RouterReply, RouterError> {
    let fail = |what: &str| malformed("anthropic", what, body);
    let root = match read_unique("anthropic", "envelope", body)? {
        Ok(root) => root,
        Err(conflict) => return Ok(ambiguous_envelope(body, fallback_model, conflict)),
    };
    if !root.is_object() {
        return Err(fail("response is not a JSON object"));
    }
    if root.get("type").and_then(Value::as_str) == Some("error") {
        let message = root
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("unknown error");
        return Err(RouterError::new(
            ErrorClass::Permanent,
            format!("anthropic: error in response: {message}"),
        ));
    }
    let content = root
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("response has no `content` array"))?;
    let mut reply = RouterReply {
        model: root
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(fallback_model)
            .to_owned(),
        raw_output: body.to_owned(),
        ..RouterReply::default()
    };
    let mut text = String::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => reply.choices.push(RawChoice {
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: match block.get("input") {
                    None | Some(Value::Null) => String::new(),
                    Some(input) => input.to_string(),
                },
            }),
            Some("text") => {
                if let Some(t) = block.get("text").and_then(Value::as_str) {
                    text.push_str(t);
                }
            }
            _ => {}
        }
    }
    match root.get("stop_reason") {
        None | Some(Value::Null) => {}
        Some(reason) => {
            let reason = reason
                .as_str()
                .map_or_else(|| reason.to_string(), str::to_owned);
            match Ending::anthropic(&reason) {
                Ending::Complete => {}
                Ending::Truncated => reply.truncated = true,
                Ending::Refused => {
                    reply.refusal = Some(if text.trim().is_empty() {
                        "the model refused (stop_reason `refusal`)".to_owned()
                    } else {
                        text
                    });
                }
                Ending::Unfinished => reply.conflicts.push(Conflict::Unfinished {
                    reason: reason.clone(),
                }),
            }
            reply.end_reason = Some(reason);
        }
    }
    let usage = root.get("usage");
    let count = |field: &str| usage.and_then(|u| u.get(field)).and_then(Value::as_u64);
    reply.input_tokens = count("input_tokens").map(|n| {
        n.saturating_add(count("cache_creation_input_tokens").unwrap_or(0))
            .saturating_add(count("cache_read_input_tokens").unwrap_or(0))
    });
    reply.output_tokens = count("output_tokens");
    Ok(reply)
}

/// A streamed message being reassembled from its events.
#[derive(Debug)]
struct EventStream {
    tokens: TokenSink,
    /// Publish tool inputs' JSON fragments as deltas too (decisions), not only text.
    arguments: bool,
    /// The message of `message_start`, its `content` filled at the end.
    message: Option<Value>,
    blocks: BTreeMap<u64, Block>,
    /// The first `stop_reason` a `message_delta` gave: the message has ended.
    stop_reason: Option<Value>,
    /// What the events contradict each other in (a message or block started twice, a stop
    /// reason that changes, content after an end, an event with a repeated key): the
    /// reassembled body cannot show it, so it is carried into the reply beside it.
    conflicts: Vec<Conflict>,
}

#[derive(Debug)]
#[allow(clippy::struct_field_names)] // `block.block` reads as "the block's value"
struct Block {
    /// The block as `content_block_start` gave it, deltas applied.
    block: Value,
    /// A tool use's input as JSON text, from its `input_json_delta`s.
    json: Option<String>,
    /// `content_block_stop` came.
    stopped: bool,
}

impl EventStream {
    fn new(tokens: TokenSink, arguments: bool) -> Self {
        Self {
            tokens,
            arguments,
            message: None,
            blocks: BTreeMap::new(),
            stop_reason: None,
            conflicts: Vec::new(),
        }
    }

    /// Record `conflict` once (a stream may repeat the same offence on every event).
    fn flag(&mut self, conflict: Conflict) {
        if !self.conflicts.contains(&conflict) {
            self.conflicts.push(conflict);
        }
    }

    /// One event of the stream.
    fn event(
        &mut self,
        transport: &Transport,
        event: &str,
        data: &str,
    ) -> Result<StreamFlow, RouterError> {
        if event == "error" {
            return Err(transport.stream_error_event(data));
        }
        let fail = |what: &str| transport.redact_error(malformed("anthropic", what, data));
        let root = match read_unique("anthropic", "stream event", data) {
            Ok(Ok(root)) => root,
            // Unreadable as the provider meant it: recorded, and the stream is read no
            // further (the answer is refused whatever follows).
            Ok(Err(conflict)) => {
                self.conflicts.push(conflict);
                return Ok(StreamFlow::Done);
            }
            Err(e) => return Err(transport.redact_error(e)),
        };
        let kind = root
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_owned();
        let index = root.get("index").and_then(Value::as_u64);
        // Content once the message said how it ended is not part of what it said.
        if self.stop_reason.is_some()
            && matches!(kind.as_str(), "content_block_start" | "content_block_delta")
        {
            self.flag(Conflict::AfterEnd {
                what: "the message".into(),
            });
        }
        match kind.as_str() {
            "error" => return Err(transport.stream_error_event(data)),
            "message_start" => {
                let message = root
                    .get("message")
                    .filter(|m| m.is_object())
                    .ok_or_else(|| fail("`message_start` carries no message"))?;
                // A second message: which one is the answer is a guess; the first stays.
                if self.message.is_some() {
                    self.flag(Conflict::Restarted {
                        what: "the message".into(),
                    });
                } else {
                    self.message = Some(message.clone());
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (index, root.get("content_block")) else {
                    return Err(fail("`content_block_start` without an index or a block"));
                };
                // The same index again: the first block stays, the restart is recorded.
                if self.blocks.contains_key(&index) {
                    self.flag(Conflict::Restarted {
                        what: format!("content block {index}"),
                    });
                    return Ok(StreamFlow::More);
                }
                let json = matches!(
                    block.get("type").and_then(Value::as_str),
                    Some("tool_use" | "server_tool_use")
                )
                .then(String::new);
                if let Some(text) = block.get("text").and_then(Value::as_str) {
                    self.tokens.token(text);
                }
                self.blocks.insert(
                    index,
                    Block {
                        block: block.clone(),
                        json,
                        stopped: false,
                    },
                );
            }
            "content_block_delta" => {
                let Some(i) = index.filter(|i| self.blocks.contains_key(i)) else {
                    return Err(fail("`content_block_delta` for a block never started"));
                };
                if self.blocks[&i].stopped {
                    self.flag(Conflict::AfterEnd {
                        what: format!("content block {i}"),
                    });
                }
                let Some(block) = self.blocks.get_mut(&i) else {
                    return Err(fail("`content_block_delta` for a block never started"));
                };
                let delta = root.get("delta").unwrap_or(&Value::Null);
                let text = |field: &str| delta.get(field).and_then(Value::as_str);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = text("text").unwrap_or_default();
                        append(&mut block.block, "text", t);
                        self.tokens.token(t);
                    }
                    Some("input_json_delta") => {
                        let t = text("partial_json").unwrap_or_default();
                        block.json.get_or_insert_default().push_str(t);
                        if self.arguments {
                            self.tokens.token(t);
                        }
                    }
                    Some("thinking_delta") => {
                        append(
                            &mut block.block,
                            "thinking",
                            text("thinking").unwrap_or_default(),
                        );
                    }
                    Some("signature_delta") => {
                        block.block["signature"] = json!(text("signature").unwrap_or_default());
                    }
                    Some("citations_delta") => {
                        if let Some(citation) = delta.get("citation") {
                            let citations = &mut block.block["citations"];
                            if !citations.is_array() {
                                *citations = json!([]);
                            }
                            if let Some(list) = citations.as_array_mut() {
                                list.push(citation.clone());
                            }
                        }
                    }
                    // Kinds of delta added later are not ours to guess at.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = index.and_then(|i| self.blocks.get_mut(&i)) {
                    block.stopped = true;
                }
            }
            "message_delta" => {
                let Some(message) = self.message.as_mut() else {
                    return Err(fail("`message_delta` before `message_start`"));
                };
                let mut changed = None;
                if let Some(delta) = root.get("delta").and_then(Value::as_object) {
                    for (k, v) in delta {
                        if k == "stop_reason" && !v.is_null() {
                            match &self.stop_reason {
                                // The first stays in the body; a different later one is a
                                // contradiction, not a correction.
                                Some(first) if first != v => {
                                    changed = Some((end_text(first), end_text(v)));
                                    continue;
                                }
                                Some(_) => continue,
                                None => self.stop_reason = Some(v.clone()),
                            }
                        }
                        message[k.as_str()] = v.clone();
                    }
                }
                // Counts in `message_delta` are cumulative: they replace those of the start.
                if let Some(usage) = root.get("usage").and_then(Value::as_object) {
                    if !message["usage"].is_object() {
                        message["usage"] = json!({});
                    }
                    for (k, v) in usage.iter().filter(|(_, v)| !v.is_null()) {
                        message["usage"][k.as_str()] = v.clone();
                    }
                }
                if let Some((first, then)) = changed {
                    self.flag(Conflict::EndReasons { first, then });
                }
            }
            "message_stop" => return Ok(StreamFlow::Done),
            // `ping` and event types added later.
            _ => {}
        }
        Ok(StreamFlow::More)
    }

    /// The message the events add up to, and the conflicts found on the way. A tool use's
    /// input is read as the non-streaming envelope is: a repeated key is a conflict (the
    /// input then kept as its text), and text that is not JSON is kept as a JSON string
    /// (no object schema accepts it).
    fn into_body(mut self) -> Result<(Value, Vec<Conflict>), RouterError> {
        let mut message = match self.message.take() {
            Some(message) => message,
            // The stream stopped at a conflict before any message: the reply is that
            // conflict, on an empty message.
            None if !self.conflicts.is_empty() => json!({"type": "message", "content": []}),
            None => {
                return Err(malformed(
                    "anthropic",
                    "the stream has no `message_start`",
                    "",
                ));
            }
        };
        let mut content = Vec::with_capacity(self.blocks.len());
        for (
            _,
            Block {
                mut block, json, ..
            },
        ) in std::mem::take(&mut self.blocks)
        {
            if let Some(json) = json {
                block["input"] = if json.trim().is_empty() {
                    json!({})
                } else {
                    match read_unique("anthropic", "tool input", &json) {
                        Ok(Ok(input)) => input,
                        Ok(Err(conflict)) => {
                            self.conflicts.push(conflict);
                            Value::String(json)
                        }
                        Err(_) => Value::String(json),
                    }
                };
            }
            content.push(block);
        }
        message["content"] = Value::Array(content);
        Ok((message, self.conflicts))
    }
}

/// An end reason as text (a string as it is, anything else as JSON).
fn end_text(reason: &Value) -> String {
    reason
        .as_str()
        .map_or_else(|| reason.to_string(), str::to_owned)
}

/// Append `text` to the string field `field` of `block`.
fn append(block: &mut Value, field: &str, text: &str) {
    let mut s = block
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    s.push_str(text);
    block[field] = json!(s);
}
