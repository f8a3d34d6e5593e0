//! Configuration: API keys that never print, HTTP settings, and reading both from the
//! environment.

use std::fmt;
use std::time::Duration;

/// An API key. Its `Debug` output is redacted and it has no `Display`, so it cannot end up
/// in logs, errors or tracing fields by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a key.
    #[must_use]
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the one place that puts it in a request header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// Timeouts, retries and limits of the HTTP calls to a provider.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpSettings {
    /// Whole request, from connecting to the last byte of the body.
    pub timeout: Duration,
    /// Establishing the connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Retries after the first attempt, on 408, 409, 429, 5xx and connection errors.
    pub max_retries: u32,
    /// First backoff; doubled on every retry (with jitter), capped at `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest computed backoff.
    pub max_backoff: Duration,
    /// Longest `retry-after` honoured; a provider asking for more fails the call at once
    /// with [`agent_core::ErrorClass::RateLimited`] instead of blocking the worker.
    pub max_retry_after: Duration,
    /// Largest response body accepted; a larger one is rejected while it streams in. A
    /// streamed answer counts every byte of its event stream against the same limit.
    pub max_response_bytes: usize,
    /// Longest silence tolerated inside a streamed answer (no byte at all, keep-alive
    /// comments and pings included), before its first event too. A stalled stream fails
    /// with [`agent_core::ErrorClass::Timeout`], like a request past [`Self::timeout`],
    /// which still bounds the whole stream.
    pub stream_idle_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_mins(2),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_mins(1),
            max_response_bytes: 1024 * 1024,
            stream_idle_timeout: Duration::from_mins(1),
        }
    }
}

/// Whether a router (or a [`Generator`](crate::Generator)) asks the provider for a
/// streamed answer (server-sent events) or a whole one.
///
/// Either way the answer is the same: a streamed one is reassembled into the provider's
/// non-streaming shape and read by the same code, validated by the runner as a whole, and
/// journaled once. Streaming only adds the deltas published on the request's
/// [`TokenSink`](agent_core::events::TokenSink) while it comes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streaming {
    /// Stream when someone listens to the deltas
    /// ([`TokenSink::is_listened`](agent_core::events::TokenSink::is_listened)); nothing
    /// changes for those who do not watch.
    #[default]
    Auto,
    /// Always stream (a server that answers with a whole JSON body anyway is still read).
    Always,
    /// Never stream.
    Never,
}

impl Streaming {
    /// Whether to stream an answer whose deltas go to `tokens`.
    #[must_use]
    pub fn wanted(self, tokens: &agent_core::events::TokenSink) -> bool {
        match self {
            Self::Auto => tokens.is_listened(),
            Self::Always => true,
            Self::Never => false,
        }
    }
}

/// Configuration that could not be read or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required environment variable is not set (or is empty).
    #[error("environment variable `{name}` is not set: {what}")]
    Missing {
        /// The variable.
        name: &'static str,
        /// What it should hold.
        what: &'static str,
    },
    /// An environment variable holds something unusable. The value is not repeated here,
    /// since it may be a secret.
    #[error("environment variable `{name}` is not valid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// `AGENT_LLM_PROVIDER` names no known provider.
    #[error(
        "unknown provider `{0}` in `AGENT_LLM_PROVIDER`; expected `openai`, `ollama` or `anthropic`"
    )]
    UnknownProvider(String),
    /// A base URL that does not parse.
    #[error("invalid base URL: {0}")]
    BaseUrl(String),
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// Reads variables: the process environment, or a map in tests.
pub(crate) struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Env<'a> {
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self { lookup }
    }

    /// A set, non-empty variable (surrounding whitespace trimmed).
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    pub(crate) fn require(
        &self,
        name: &'static str,
        what: &'static str,
    ) -> Result<String, ConfigError> {
        self.get(name).ok_or(ConfigError::Missing { name, what })
    }

    pub(crate) fn number<T: std::str::FromStr>(
        &self,
        name: &'static str,
    ) -> Result<Option<T>, ConfigError>
    where
        T::Err: fmt::Display,
    {
        self.get(name)
            .map(|v| {
                v.parse::<T>().map_err(|e| ConfigError::Invalid {
                    name,
                    reason: format!("expected a whole number: {e}"),
                })
            })
            .transpose()
    }

    /// `AGENT_LLM_STREAM`: `auto`, `always` or `never`.
    pub(crate) fn streaming(&self) -> Result<Streaming, ConfigError> {
        match self
            .get("AGENT_LLM_STREAM")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("auto") => Ok(Streaming::Auto),
            Some("always") => Ok(Streaming::Always),
            Some("never") => Ok(Streaming::Never),
            Some(_) => Err(ConfigError::Invalid {
                name: "AGENT_LLM_STREAM",
                reason: "expected `auto`, `always` or `never`".into(),
            }),
        }
    }

    /// The shared settings: `AGENT_LLM_MAX_TOKENS`, `AGENT_LLM_TIMEOUT_SECS`,
    /// `AGENT_LLM_MAX_RETRIES`, `AGENT_LLM_STREAM_IDLE_SECS`.
    pub(crate) fn common(&self) -> Result<(Option<u32>, HttpSettings), ConfigError> {
        let max_tokens = self.number::<u32>("AGENT_LLM_MAX_TOKENS")?;
        if max_tokens == Some(0) {
            return Err(ConfigError::Invalid {
                name: "AGENT_LLM_MAX_TOKENS",
                reason: "must be at least 1".into(),
            });
        }
        let mut http = HttpSettings::default();
        if let Some(secs) = self.number::<u64>("AGENT_LLM_TIMEOUT_SECS")? {
            if secs == 0 {
                return Err(ConfigError::Invalid {
                    name: "AGENT_LLM_TIMEOUT_SECS",
                    reason: "must be at least 1".into(),
                });
            }
            http.timeout = Duration::from_secs(secs);
        }
        if let Some(n) = self.number::<u32>("AGENT_LLM_MAX_RETRIES")? {
            http.max_retries = n;
        }
        if let Some(secs) = self.number::<u64>("AGENT_LLM_STREAM_IDLE_SECS")? {
            if secs == 0 {
                return Err(ConfigError::Invalid {
                    name: "AGENT_LLM_STREAM_IDLE_SECS",
                    reason: "must be at least 1".into(),
                });
            }
            http.stream_idle_timeout = Duration::from_secs(secs);
        }
        Ok((max_tokens, http))
    }
}

/// Check that a base URL parses as an `http(s)` URL, without echoing it (it may carry
/// credentials).
pub(crate) fn check_base_url(url: &str) -> Result<reqwest::Url, ConfigError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| ConfigError::BaseUrl(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::BaseUrl(format!(
            "scheme `{}` is not http or https",
            parsed.scheme()
        )));
    }
    Ok(parsed)
}

/// Append `segment` to a base URL's path (`https://h/v1` + `chat/completions`).
pub(crate) fn join(base: &str, segment: &str) -> Result<reqwest::Url, ConfigError> {
    let trimmed = base.trim_end_matches('/');
    check_base_url(&format!("{trimmed}/{segment}"))
}
