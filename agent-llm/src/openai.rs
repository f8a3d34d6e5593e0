//! OpenAI-compatible chat completions: OpenAI, Ollama, vLLM, llama.cpp's server, and any
//! other server speaking `POST {base}/chat/completions` with function tools.

use std::collections::BTreeMap;

use agent_core::ErrorClass;
use agent_core::events::TokenSink;
use agent_core::router::{Conflict, RawChoice, RouteRequest, Router, RouterError, RouterReply};
use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::config::{ApiKey, ConfigError, Env, HttpSettings, Streaming, check_base_url, join};
use crate::generate::{GenerateInput, Written};
use crate::http::{StreamFlow, Transport};
use crate::{
    DEFAULT_MAX_TOKENS, Ending, ambiguous_envelope, malformed, option_description, read_unique,
    tool_parameters,
};

/// OpenAI's own endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Ollama's OpenAI-compatible endpoint on its default port.
pub const OLLAMA_BASE_URL: &str = "http://localhost:11434/v1";

/// Which request field carries the output token limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_completion_tokens`: what OpenAI wants (its reasoning models reject `max_tokens`).
    MaxCompletionTokens,
    /// `max_tokens`: what Ollama, vLLM and llama.cpp's server read.
    MaxTokens,
}

/// Configuration of an [`OpenAiRouter`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// Base URL up to and including the version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The model, e.g. `gpt-4.1-mini` or `llama3.1`.
    pub model: String,
    /// Sent as `Authorization: Bearer`; `None` for servers without auth (Ollama).
    pub api_key: Option<ApiKey>,
    /// Output token limit of one decision.
    pub max_tokens: u32,
    /// Which field carries `max_tokens`.
    pub max_tokens_field: MaxTokensField,
    /// Sampling temperature; `None` leaves the server's default (reasoning models accept
    /// no other).
    pub temperature: Option<f32>,
    /// Timeouts, retries, limits.
    pub http: HttpSettings,
    /// Offer tools with `strict: true` (structured outputs): the provider constrains
    /// decoding to the strict form of each option's schema ([`crate::strict`]). On by
    /// default for `OpenAI`'s own endpoint only; compatible servers differ in what they accept
    /// (vLLM constrains a required tool call to the schemas on its own; llama.cpp's server
    /// does not, its grammar lets free text come first). Every answer is still validated by
    /// the runner.
    pub strict_tools: bool,
    /// Ask for a streamed answer (server-sent events, with `stream_options.include_usage`)
    /// or a whole one; [`Streaming::Auto`] by default: stream when someone listens.
    pub stream: Streaming,
    /// How the options are put to the model: as tools (the default), or as one JSON
    /// schema the answer's text must match ([`Decoding::JsonSchema`], for servers that
    /// constrain decoding to a `response_format` but not to a required tool call, such as
    /// llama.cpp's).
    pub decoding: Decoding,
}

/// How [`OpenAiRouter`] asks: the answer is validated the same way in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Decoding {
    /// Every option a function tool, `tool_choice: "required"`.
    #[default]
    Tools,
    /// No tools: `response_format` is a JSON schema with one branch per option,
    /// `{"option": <its name>, "arguments": <its schema>}`, and the answer is the message's
    /// text. One option per answer (a state's `tools_per_answer` is not used).
    JsonSchema,
}

impl OpenAiConfig {
    /// A server at `base_url` serving `model`, without a key.
    #[must_use]
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        let base_url = base_url.into();
        let openai = base_url.trim_end_matches('/') == OPENAI_BASE_URL;
        let max_tokens_field = if openai {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        };
        Self {
            base_url,
            model: model.into(),
            api_key: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_tokens_field,
            temperature: None,
            http: HttpSettings::default(),
            strict_tools: openai,
            stream: Streaming::Auto,
            decoding: Decoding::Tools,
        }
    }

    /// Ask with tools, or with one JSON schema ([`Decoding`]).
    #[must_use]
    pub fn with_decoding(mut self, decoding: Decoding) -> Self {
        self.decoding = decoding;
        self
    }

    /// Stream answers always, never, or when someone listens ([`Streaming::Auto`]).
    #[must_use]
    pub fn with_streaming(mut self, stream: Streaming) -> Self {
        self.stream = stream;
        self
    }

    /// Offer tools with `strict: true`, or not.
    #[must_use]
    pub fn with_strict_tools(mut self, strict: bool) -> Self {
        self.strict_tools = strict;
        self
    }

    /// OpenAI itself.
    #[must_use]
    pub fn openai(api_key: ApiKey, model: impl Into<String>) -> Self {
        Self::new(OPENAI_BASE_URL, model).with_api_key(api_key)
    }

    /// A local Ollama on its default port; no key.
    #[must_use]
    pub fn ollama(model: impl Into<String>) -> Self {
        Self::new(OLLAMA_BASE_URL, model)
    }

    /// Set the key.
    #[must_use]
    pub fn with_api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
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

    /// Read `OPENAI_BASE_URL`, `OPENAI_MODEL`, `OPENAI_API_KEY` and the shared
    /// `AGENT_LLM_*` settings from the process environment (see the crate docs' table).
    ///
    /// # Errors
    /// [`ConfigError::Missing`] naming `OPENAI_MODEL`, or `OPENAI_API_KEY` when the base URL
    /// is OpenAI's; [`ConfigError::Invalid`] or [`ConfigError::BaseUrl`] for unusable values.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(OPENAI_BASE_URL, &|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`, with
    /// `default_base_url` when `OPENAI_BASE_URL` is unset (the Ollama preset passes
    /// [`OLLAMA_BASE_URL`]).
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(
        default_base_url: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = Env::new(lookup);
        let base_url = env
            .get("OPENAI_BASE_URL")
            .unwrap_or_else(|| default_base_url.to_owned());
        check_base_url(&base_url)?;
        let model = env.require("OPENAI_MODEL", "the model to route with")?;
        let api_key = env.get("OPENAI_API_KEY").map(ApiKey::new);
        if api_key.is_none() && base_url.trim_end_matches('/') == OPENAI_BASE_URL {
            return Err(ConfigError::Missing {
                name: "OPENAI_API_KEY",
                what: "OpenAI needs a key (servers such as Ollama set `OPENAI_BASE_URL` instead)",
            });
        }
        let (max_tokens, http) = env.common()?;
        let mut config = Self::new(base_url, model)
            .with_http(http)
            .with_streaming(env.streaming()?);
        config.api_key = api_key;
        if let Some(m) = max_tokens {
            config.max_tokens = m;
        }
        Ok(config)
    }
}

/// A [`Router`] on an OpenAI-compatible chat completions endpoint.
///
/// Every legal option is offered as a function tool named exactly like the option
/// (transitions take an object of arguments, tools their input schema), with
/// `tool_choice: "required"` and `parallel_tool_calls` true only for a state whose answers
/// may call several tools (`tools_per_answer`). Every tool call in the
/// answer becomes a [`RawChoice`]; nothing is validated here, that is the runner's job.
#[derive(Debug)]
pub struct OpenAiRouter {
    config: OpenAiConfig,
    url: reqwest::Url,
    transport: Transport,
}

impl OpenAiRouter {
    /// A router with this configuration.
    ///
    /// # Errors
    /// [`ConfigError::BaseUrl`] for a base URL that does not parse, [`ConfigError::Client`]
    /// when TLS cannot be set up (no usable certificate store).
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let url = join(&config.base_url, "chat/completions")?;
        let transport = Transport::new("openai", config.http.clone(), config.api_key.clone())?;
        Ok(Self {
            config,
            url,
            transport,
        })
    }

    /// A router configured by [`OpenAiConfig::from_env`].
    ///
    /// # Errors
    /// As [`OpenAiConfig::from_env`] and [`OpenAiRouter::new`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(OpenAiConfig::from_env()?)
    }

    /// Its configuration.
    #[must_use]
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The JSON body sent for `request`.
    #[must_use]
    pub fn request_body(&self, request: &RouteRequest) -> Value {
        let tools: Vec<Value> = request
            .options
            .iter()
            .map(|o| {
                let (parameters, strict) = tool_parameters(o, self.config.strict_tools);
                let mut function = json!({
                    "name": o.name,
                    "description": option_description(o),
                    "parameters": parameters,
                });
                if strict {
                    function["strict"] = json!(true);
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": request.system_prompt()},
                {"role": "user", "content": request.user_prompt()},
            ],
            "tools": tools,
            "tool_choice": "required",
            // Several calls only where the state allows them (`tools_per_answer`).
            "parallel_tool_calls": request.tools_per_answer > 1,
        });
        let field = match self.config.max_tokens_field {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        };
        body[field] = json!(self.config.max_tokens);
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if self.config.decoding == Decoding::JsonSchema {
            into_json_schema_mode(&mut body);
        }
        body
    }

    /// The JSON body sent to have the model write text for `input` (no tools).
    #[must_use]
    pub fn generation_body(&self, input: &GenerateInput) -> Value {
        let mut messages = Vec::new();
        if let Some(instructions) = input.instructions.as_deref().filter(|i| !i.is_empty()) {
            messages.push(json!({"role": "system", "content": instructions}));
        }
        messages.push(json!({"role": "user", "content": input.user_message()}));
        let mut body = json!({"model": self.config.model, "messages": messages});
        let field = match self.config.max_tokens_field {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        };
        body[field] = json!(input.max_tokens.unwrap_or(self.config.max_tokens));
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// Have the model write text for `input`, streaming its tokens to `tokens` when
    /// [`OpenAiConfig::stream`] says so.
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
        let written = root
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(Written::new(reply, self.transport.redact(written)))
    }

    /// The body of the complete answer to `body`: whole, or streamed and reassembled into
    /// the shape of a whole one (so one parser reads both), with what the stream contradicted
    /// itself in (which the reassembled body cannot show). Text deltas go to `tokens`, and
    /// with `arguments` the tool calls' argument fragments too, through a sink that hides the
    /// router's own key (a provider may echo it), finished when the stream ends.
    async fn complete(
        &self,
        mut body: Value,
        stream: bool,
        tokens: &TokenSink,
        arguments: bool,
    ) -> Result<(String, Vec<Conflict>), RouterError> {
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let bytes = serde_json::to_vec(&body).map_err(|e| {
            RouterError::new(ErrorClass::Permanent, format!("openai: request: {e}"))
        })?;
        if !stream {
            let body = self
                .transport
                .post_json(&self.url, self.headers()?, bytes)
                .await?;
            return Ok((body.text, Vec::new()));
        }
        let tokens = match &self.config.api_key {
            Some(key) => tokens.hiding(key.expose()),
            None => tokens.clone(),
        };
        let mut acc = ChunkStream::new(tokens.clone(), arguments);
        let transport = &self.transport;
        let whole = transport
            .post_stream(&self.url, self.headers()?, bytes, &mut |event, data| {
                acc.event(transport, event, data)
            })
            .await;
        // Whatever the sink held back is published (or dropped by it) once, however the
        // stream ended.
        tokens.finish();
        if let Some(body) = whole? {
            return Ok((body.text, Vec::new()));
        }
        let (body, conflicts) = acc.into_body();
        Ok((body.to_string(), conflicts))
    }

    fn headers(&self) -> Result<HeaderMap, RouterError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.config.api_key {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    RouterError::new(
                        ErrorClass::Auth,
                        "openai: the API key is not a valid header value",
                    )
                })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(headers)
    }
}

#[async_trait]
impl Router for OpenAiRouter {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        let span = tracing::info_span!(
            "llm.decide",
            provider = "openai",
            model = %self.config.model,
            agent = %request.agent,
            state = %request.state,
        );
        async {
            let stream = self.config.stream.wanted(&request.tokens);
            let (text, conflicts) = self
                .complete(self.request_body(request), stream, &request.tokens, true)
                .await?;
            // One reduction for both decodings, streamed or not.
            let decoding = self.config.decoding;
            self.transport.parse_reply(&text, conflicts, |body| {
                reduce(body, &self.config.model, decoding)
            })
        }
        .instrument(span)
        .await
    }
}

/// Turn a chat completion body into a [`RouterReply`], faithfully: every tool call of every
/// choice becomes a [`RawChoice`] (arguments as the raw text the model wrote; an object, as
/// some servers send, is re-serialized), a `refusal` or `finish_reason: "content_filter"`
/// becomes [`RouterReply::refusal`], `finish_reason: "length"` sets
/// [`RouterReply::truncated`], `usage` gives the token counts. `fallback_model` names the
/// model when the body does not.
///
/// Nothing ambiguous is resolved here, it is recorded in [`RouterReply::conflicts`] for
/// [`validate_answer`](agent_core::router::validate_answer) to refuse: several choices
/// ([`Conflict::Messages`]), a repeated key anywhere in the body (then the reply carries only
/// that conflict and the body), a message giving its calls both as `tool_calls` and as the
/// legacy `function_call`, an end reason that is neither complete, truncated nor refused
/// ([`Conflict::Unfinished`]).
///
/// # Errors
/// A [`ErrorClass::Permanent`] [`RouterError`] when the body is not JSON, or not a JSON
/// object with a `choices` array (or carries an `error` object).
pub fn parse_response(body: &str, fallback_model: &str) -> Result<RouterReply, RouterError> {
    reduce(body, fallback_model, Decoding::Tools)
}

/// [`parse_response`] for [`Decoding::JsonSchema`]: besides the tool calls a server may send
/// all the same, each choice's text is read as the decision, a JSON object
/// `{"option": …, "arguments": …}`. A key repeated in it (at any depth) is
/// [`Conflict::DuplicateKey`] (location `decision text`); text that is not JSON or of another
/// shape gives no choice (validation refuses that as no decision); text and tool calls in the
/// same message are two decisions, [`Conflict::DuplicateKey`] (location `message`).
///
/// # Errors
/// As [`parse_response`].
pub fn parse_json_schema_response(
    body: &str,
    fallback_model: &str,
) -> Result<RouterReply, RouterError> {
    reduce(body, fallback_model, Decoding::JsonSchema)
}

/// The one reduction of a chat completion body, for both decodings.
fn reduce(
    body: &str,
    fallback_model: &str,
    decoding: Decoding,
) -> Result<RouterReply, RouterError> {
    let fail = |what: &str| malformed("openai", what, body);
    let root = match read_unique("openai", "envelope", body)? {
        Ok(root) => root,
        Err(conflict) => return Ok(ambiguous_envelope(body, fallback_model, conflict)),
    };
    if !root.is_object() {
        return Err(fail("response is not a JSON object"));
    }
    if let Some(error) = root.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .unwrap_or("unknown error");
        return Err(RouterError::new(
            ErrorClass::Permanent,
            format!("openai: error in response: {message}"),
        ));
    }
    let choices = root
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("response has no `choices` array"))?;
    let mut reply = RouterReply {
        model: root
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(fallback_model)
            .to_owned(),
        raw_output: body.to_owned(),
        ..RouterReply::default()
    };
    // Which of several candidate messages the model meant is not ours to guess (`n > 1`, or
    // a server that adds one): every call of every one is kept, and the answer refused.
    if choices.len() > 1 {
        reply.conflicts.push(Conflict::Messages {
            count: choices.len(),
        });
    }
    for choice in choices {
        let message = choice.get("message");
        let calls = message
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for call in calls {
            let function = call.get("function").unwrap_or(&Value::Null);
            reply.choices.push(raw_call(function));
        }
        // The legacy single `function_call`, still sent by some compatible servers. Both
        // forms in one message are the calls said twice: which is meant is a guess.
        if let Some(function) = message
            .and_then(|m| m.get("function_call"))
            .filter(|f| f.is_object())
        {
            reply.choices.push(raw_call(function));
            if !calls.is_empty() {
                reply.conflicts.push(Conflict::DuplicateKey {
                    location: "message".into(),
                    detail: "the calls are given twice, as `tool_calls` and as the legacy \
                             `function_call`"
                        .into(),
                });
            }
        }
        if decoding == Decoding::JsonSchema {
            let text = message
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !text.trim().is_empty() {
                if !calls.is_empty() || message.is_some_and(|m| m["function_call"].is_object()) {
                    reply.conflicts.push(Conflict::DuplicateKey {
                        location: "message".into(),
                        detail: "the decision is given twice, as text and as tool calls".into(),
                    });
                }
                decision_text(text, &mut reply);
            }
        }
        if reply.refusal.is_none()
            && let Some(refusal) = message
                .and_then(|m| m.get("refusal"))
                .and_then(Value::as_str)
        {
            reply.refusal = Some(refusal.to_owned());
        }
        match choice.get("finish_reason") {
            None | Some(Value::Null) => {}
            Some(reason) => {
                let reason = reason
                    .as_str()
                    .map_or_else(|| reason.to_string(), str::to_owned);
                end(&mut reply, &reason);
            }
        }
    }
    let usage = root.get("usage");
    reply.input_tokens = usage
        .and_then(|u| u.get("prompt_tokens"))
        .and_then(Value::as_u64);
    reply.output_tokens = usage
        .and_then(|u| u.get("completion_tokens"))
        .and_then(Value::as_u64);
    Ok(reply)
}

/// Record one `finish_reason` by the one table ([`Ending::openai`]).
fn end(reply: &mut RouterReply, reason: &str) {
    match &reply.end_reason {
        None => reply.end_reason = Some(reason.to_owned()),
        // Several choices ending differently: already refused as several messages, and
        // recorded so the journal shows both.
        Some(first) if first != reason => reply.conflicts.push(Conflict::EndReasons {
            first: first.clone(),
            then: reason.to_owned(),
        }),
        Some(_) => {}
    }
    match Ending::openai(reason) {
        Ending::Complete => {}
        Ending::Truncated => reply.truncated = true,
        Ending::Refused => {
            if reply.refusal.is_none() {
                reply.refusal = Some("the provider's content filter stopped the answer".into());
            }
        }
        Ending::Unfinished => reply.conflicts.push(Conflict::Unfinished {
            reason: reason.to_owned(),
        }),
    }
}

/// The decision text of the JSON-schema mode: one choice when it is exactly
/// `{"option": <string>, "arguments": <any>}`, a conflict when a key repeats, else nothing.
fn decision_text(text: &str, reply: &mut RouterReply) {
    let answer = match read_unique("openai", "decision text", text) {
        Ok(Ok(answer)) => answer,
        Ok(Err(conflict)) => {
            reply.conflicts.push(conflict);
            return;
        }
        // Free text: no decision, which validation refuses as such.
        Err(_) => return,
    };
    let option = answer.get("option").and_then(Value::as_str);
    let arguments = answer.get("arguments");
    let only_those = answer.as_object().is_some_and(|o| o.len() == 2);
    if let (Some(option), Some(arguments), true) = (option, arguments, only_those) {
        reply.choices.push(RawChoice {
            name: option.to_owned(),
            arguments: arguments.to_string(),
        });
    }
}

/// The tools of a request body turned into one `response_format` schema: a branch
/// `{"option": <name>, "arguments": <parameters>}` per tool, each tool's `$defs` moved to the
/// root (where its `#/$defs/...` references then point).
fn into_json_schema_mode(body: &mut Value) {
    let mut defs = Map::new();
    let branches: Vec<Value> = body["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|tool| {
            let mut parameters = tool["function"]["parameters"].clone();
            if let Some(Value::Object(own)) =
                parameters.as_object_mut().and_then(|p| p.remove("$defs"))
            {
                defs.extend(own);
            }
            json!({
                "type": "object",
                "properties": {
                    "option": {"const": tool["function"]["name"]},
                    "arguments": parameters,
                },
                "required": ["option", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let mut schema = json!({"anyOf": branches});
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    if let Some(object) = body.as_object_mut() {
        for key in ["tools", "tool_choice", "parallel_tool_calls"] {
            object.remove(key);
        }
        object.insert(
            "response_format".into(),
            json!({"type": "json_schema",
                   "json_schema": {"name": "decision", "strict": true, "schema": schema}}),
        );
    }
}

fn raw_call(function: &Value) -> RawChoice {
    RawChoice {
        name: function
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        arguments: match function.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        },
    }
}

/// A streamed chat completion being reassembled from its `chat.completion.chunk`s.
#[derive(Debug)]
struct ChunkStream {
    tokens: TokenSink,
    /// Publish argument fragments as deltas too (decisions), not only text.
    arguments: bool,
    /// `id`, `created`, `model`, `system_fingerprint`, ... of the first chunk.
    head: Map<String, Value>,
    choices: BTreeMap<u64, ChoiceAcc>,
    usage: Option<Value>,
    /// What the chunks contradict each other in (an end reason that changes, a call whose
    /// id changes, deltas after a choice ended, a chunk with a repeated key): the
    /// reassembled body cannot show it, so it is carried into the reply beside it.
    conflicts: Vec<Conflict>,
}

#[derive(Debug, Default)]
struct ChoiceAcc {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u64, CallAcc>,
    function_call: Option<CallAcc>,
    finish_reason: Option<Value>,
}

#[derive(Debug, Default)]
struct CallAcc {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl CallAcc {
    /// Add a `function` delta: fragments of the name and of the arguments, concatenated.
    fn add<'v>(&mut self, function: &'v Value) -> Option<&'v str> {
        if let Some(name) = function.get("name").and_then(Value::as_str) {
            self.name.push_str(name);
        }
        let fragment = function.get("arguments").and_then(Value::as_str)?;
        self.arguments.push_str(fragment);
        Some(fragment)
    }

    fn to_json(&self) -> Value {
        json!({"name": self.name, "arguments": self.arguments})
    }
}

impl ChunkStream {
    fn new(tokens: TokenSink, arguments: bool) -> Self {
        Self {
            tokens,
            arguments,
            head: Map::new(),
            choices: BTreeMap::new(),
            usage: None,
            conflicts: Vec::new(),
        }
    }

    /// One event of the stream: a chunk, an error, or `[DONE]`.
    fn event(
        &mut self,
        transport: &Transport,
        event: &str,
        data: &str,
    ) -> Result<StreamFlow, RouterError> {
        if data.trim() == "[DONE]" {
            return Ok(StreamFlow::Done);
        }
        if event == "error" {
            return Err(transport.stream_error_event(data));
        }
        let chunk = match read_unique("openai", "stream event", data) {
            Ok(Ok(chunk)) => chunk,
            // Unreadable as the provider meant it: recorded, and the stream is read no
            // further (the answer is refused whatever follows).
            Ok(Err(conflict)) => {
                self.conflicts.push(conflict);
                return Ok(StreamFlow::Done);
            }
            Err(e) => return Err(transport.redact_error(e)),
        };
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(transport.stream_error_event(data));
        }
        let Some(root) = chunk.as_object() else {
            return Err(transport.redact_error(malformed(
                "openai",
                "a stream chunk is not a JSON object",
                data,
            )));
        };
        for (key, value) in root {
            if !matches!(key.as_str(), "choices" | "usage" | "object") {
                self.head
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        if let Some(usage) = root.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        for choice in root
            .get("choices")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let choice_index = index;
            let acc = self.choices.entry(index).or_default();
            // A delta in the chunk that ends the choice is part of it; one in a later chunk
            // is not (which text or call was meant is a guess).
            let ended = acc.finish_reason.is_some();
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                match &acc.finish_reason {
                    // The first one stays in the reassembled body; the change is recorded.
                    Some(first) if first != reason => {
                        self.conflicts.push(Conflict::EndReasons {
                            first: end_text(first),
                            then: end_text(reason),
                        });
                    }
                    Some(_) => {}
                    None => acc.finish_reason = Some(reason.clone()),
                }
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if ended && carries_content(delta) {
                let what = format!("choice {index}");
                if !self
                    .conflicts
                    .contains(&Conflict::AfterEnd { what: what.clone() })
                {
                    self.conflicts.push(Conflict::AfterEnd { what });
                }
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                acc.content.get_or_insert_default().push_str(text);
                self.tokens.token(text);
            }
            if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
                acc.refusal.get_or_insert_default().push_str(text);
                self.tokens.token(text);
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                // Servers that omit `index` start a call with its `id`.
                let count = acc.tool_calls.len() as u64;
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(
                    if call.get("id").is_some_and(|id| !id.is_null()) {
                        count
                    } else {
                        count.saturating_sub(1)
                    },
                );
                let slot = acc.tool_calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    match &slot.id {
                        // Another call in the same slot: the first id stays, the restart is
                        // recorded (its fragments would otherwise be glued to the first's).
                        Some(first) if first != id => {
                            self.conflicts.push(Conflict::Restarted {
                                what: format!("tool call {index} of choice {choice_index}"),
                            });
                        }
                        Some(_) => {}
                        None => slot.id = Some(id.to_owned()),
                    }
                }
                if let Some(fragment) = call.get("function").and_then(|f| slot.add(f))
                    && self.arguments
                {
                    self.tokens.token(fragment);
                }
            }
            if let Some(function) = delta.get("function_call").filter(|f| f.is_object())
                && let Some(fragment) = acc.function_call.get_or_insert_default().add(function)
                && self.arguments
            {
                self.tokens.token(fragment);
            }
        }
        Ok(StreamFlow::More)
    }

    /// The `chat.completion` the chunks add up to, and the conflicts found on the way.
    fn into_body(self) -> (Value, Vec<Conflict>) {
        let mut root = self.head;
        root.insert("object".into(), json!("chat.completion"));
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, c)| {
                let mut message = json!({
                    "role": "assistant",
                    "content": c.content,
                    "refusal": c.refusal,
                });
                if !c.tool_calls.is_empty() {
                    message["tool_calls"] = c
                        .tool_calls
                        .values()
                        .map(|call| {
                            json!({"id": call.id, "type": "function", "function": call.to_json()})
                        })
                        .collect();
                }
                if let Some(f) = &c.function_call {
                    message["function_call"] = f.to_json();
                }
                json!({"index": index, "message": message, "finish_reason": c.finish_reason})
            })
            .collect();
        root.insert("choices".into(), Value::Array(choices));
        root.insert("usage".into(), self.usage.unwrap_or(Value::Null));
        (Value::Object(root), self.conflicts)
    }
}

/// An end reason as text (a string as it is, anything else as JSON).
fn end_text(reason: &Value) -> String {
    reason
        .as_str()
        .map_or_else(|| reason.to_string(), str::to_owned)
}

/// Whether a delta carries any of the answer: text, a refusal, a call or a fragment of one.
fn carries_content(delta: &Value) -> bool {
    let text = |field: &str| {
        delta
            .get(field)
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
    };
    text("content")
        || text("refusal")
        || delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty())
        || delta.get("function_call").is_some_and(Value::is_object)
}

/// The variable-reading part of the provider choice, for [`crate::router_from_lookup`].
pub(crate) fn from_lookup(
    default_base_url: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenAiRouter, ConfigError> {
    OpenAiRouter::new(OpenAiConfig::from_lookup(default_base_url, lookup)?)
}

#[cfg(test)]
mod json_schema_tests {
    use agent_core::router::{Conflict, RejectionCode};
    use serde_json::json;

    use super::{into_json_schema_mode, parse_json_schema_response};

    fn completion(content: &str) -> String {
        json!({
            "model": "m",
            "choices": [{"message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
        })
        .to_string()
    }

    #[test]
    fn the_tools_become_one_schema_with_their_defs_at_the_root() {
        let mut body = json!({
            "model": "m",
            "tools": [
                {"type": "function", "function": {"name": "Pay", "parameters": {
                    "type": "object", "properties": {"line": {"$ref": "#/$defs/Line"}},
                    "$defs": {"Line": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "Closed", "parameters": {
                    "type": "object", "properties": {}, "additionalProperties": false}}},
            ],
            "tool_choice": "required",
            "parallel_tool_calls": false,
        });
        into_json_schema_mode(&mut body);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        let schema = &body["response_format"]["json_schema"]["schema"];
        assert_eq!(schema["$defs"]["Line"], json!({"type": "string"}));
        assert_eq!(
            schema["anyOf"][0]["properties"]["option"],
            json!({"const": "Pay"})
        );
        assert!(
            schema["anyOf"][0]["properties"]["arguments"]
                .get("$defs")
                .is_none()
        );
        assert_eq!(
            schema["anyOf"][1]["properties"]["option"],
            json!({"const": "Closed"})
        );
    }

    #[test]
    fn the_answer_is_the_text_and_its_keys_must_be_unique() {
        let reply =
            parse_json_schema_response(&completion(r#"{"option":"Pay","arguments":{"n":1}}"#), "m")
                .unwrap();
        assert_eq!(reply.choices.len(), 1);
        assert_eq!(reply.choices[0].name, "Pay");
        assert_eq!(reply.choices[0].arguments, r#"{"n":1}"#);

        // A repeated key is recorded as a conflict (the one decision function refuses it),
        // never resolved to one of the copies.
        for duplicated in [
            r#"{"option":"Closed","option":"Pay","arguments":{}}"#,
            r#"{"option":"Pay","arguments":{"n":1,"n":999999}}"#,
        ] {
            let reply = parse_json_schema_response(&completion(duplicated), "m").unwrap();
            assert!(reply.choices.is_empty(), "{duplicated}");
            assert!(
                matches!(&reply.conflicts[..], [Conflict::DuplicateKey { location, .. }]
                    if location == "decision text"),
                "{duplicated}: {:?}",
                reply.conflicts
            );
            assert_eq!(reply.conflicts[0].code(), RejectionCode::DuplicateKey);
        }
        // Free text, another shape, or extra keys: no choice (validation refuses it).
        for other in [
            "I would pay.",
            r#"{"option":"Pay"}"#,
            r#"{"option":"Pay","arguments":{},"also":"Closed"}"#,
            "",
        ] {
            let reply = parse_json_schema_response(&completion(other), "m").unwrap();
            assert!(
                reply.choices.is_empty() && reply.conflicts.is_empty(),
                "{other}: {reply:?}"
            );
        }
    }
}
