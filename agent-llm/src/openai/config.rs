//! The configuration of an [`OpenAiRouter`]: endpoint, model, key, decoding.

#[cfg(doc)]
use super::OpenAiRouter;
use crate::DEFAULT_MAX_TOKENS;
use crate::config::{ApiKey, ConfigError, Env, HttpSettings, Streaming, check_base_url};

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
    /// Prices of the models, to count what each answer cost in the metric of model
    /// spend ([`RouterReply::cost`](agent_core::router::RouterReply::cost)); `None` leaves
    /// answers unpriced (their tokens are still counted).
    pub prices: Option<std::sync::Arc<crate::PriceTable>>,
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
            prices: None,
        }
    }

    /// Price every answer by `prices` ([`OpenAiConfig::prices`]).
    #[must_use]
    pub fn with_prices(mut self, prices: crate::PriceTable) -> Self {
        self.prices = Some(std::sync::Arc::new(prices));
        self
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
