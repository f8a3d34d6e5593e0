//! OpenAI-compatible chat completions: OpenAI, Ollama, vLLM, llama.cpp's server, and any
//! other server speaking `POST {base}/chat/completions` with function tools.

mod config;
mod response;
mod stream;

use agent_core::ErrorClass;
use agent_core::events::TokenSink;
#[cfg(doc)]
use agent_core::router::RawChoice;
use agent_core::router::{Conflict, RouteRequest, Router, RouterError, RouterReply};
use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::config::{ConfigError, join};
use crate::generate::{GenerateInput, Written};
use crate::http::Transport;
use crate::{option_description, tool_parameters};

pub use config::{Decoding, MaxTokensField, OLLAMA_BASE_URL, OPENAI_BASE_URL, OpenAiConfig};
use response::reduce;
pub use response::{parse_json_schema_response, parse_response};
use stream::ChunkStream;

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
            // One reduction for both decodings, streamed or not.
            let decoding = self.config.decoding;
            self.transport.parse_reply(&text, conflicts, |body| {
                reduce(body, &self.config.model, decoding)
            })
        }
        .instrument(span.clone())
        .await;
        Transport::finish_reply(&span, reply, self.config.prices.as_deref())
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
