//! The HTTP layer both providers share: a reqwest client on rustls with the *ring* provider,
//! bounded retries with backoff honouring `retry-after`, error classification, and bodies
//! read chunk by chunk up to a limit.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use agent_core::ErrorClass;
use agent_core::router::{Conflict, RejectionCode, RouterError, RouterReply};
use eventsource_stream::{EventStreamError, Eventsource as _};
use futures::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};

use crate::config::{ApiKey, ConfigError, HttpSettings};

/// Error bodies are only read for their message: at most this much.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// The rustls configuration: the *ring* provider (the one sqlx compiles, so no second
/// crypto library is built) and the platform's certificate verifier, or the bundled Mozilla
/// roots (`webpki-roots`, which sqlx compiles too) on a system without a CA store, so a
/// minimal container can still reach a plain-HTTP local server or a public API. Built once
/// per process and passed to reqwest preconfigured: no process-wide default provider is
/// installed behind the application's back.
/// The *ring* provider. rustls 0.23.48 deprecates it, for lacking post-quantum key
/// exchange; it stays because it is the one sqlx compiles (aws-lc-rs would build a second
/// crypto library, and a C toolchain with it, into every user's binary).
#[allow(
    deprecated,
    reason = "ring is the provider sqlx compiles; rustls deprecates it for lacking post-quantum key exchange"
)]
pub(crate) fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

pub(crate) fn tls_config() -> Result<rustls::ClientConfig, ConfigError> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(ring_provider());
            let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            let mut config = match rustls_platform_verifier::Verifier::new(provider) {
                Ok(verifier) => builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth(),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "no usable platform certificate store; trusting the bundled Mozilla roots"
                    );
                    let roots = rustls::RootCertStore {
                        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                    };
                    builder.with_root_certificates(roots).with_no_client_auth()
                }
            };
            // reqwest is built without HTTP/2; a preconfigured config announces ALPN itself.
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(config)
        })
        .clone()
        .map_err(ConfigError::Client)
}

/// A client plus the settings and secret of one provider.
#[derive(Debug)]
pub(crate) struct Transport {
    client: reqwest::Client,
    pub(crate) settings: HttpSettings,
    secret: Option<ApiKey>,
    provider: &'static str,
}

/// A successful response: status 2xx and its body, within the limit.
pub(crate) struct Body {
    pub(crate) text: String,
}

impl Transport {
    /// The span of one model ask, named and attributed by the OpenTelemetry GenAI semantic
    /// conventions (a `chat` client span; the crate `durable-agents-observe` pins their
    /// version); [`Transport::finish_reply`] fills in what the answer says.
    pub(crate) fn chat_span(
        &self,
        model: &str,
        url: &reqwest::Url,
        request: &agent_core::router::RouteRequest,
    ) -> tracing::Span {
        use tracing::field::Empty;
        tracing::info_span!(
            "llm.decide",
            otel.name = %format_args!("chat {model}"),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = self.provider,
            gen_ai.request.model = model,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            server.address = url.host_str().unwrap_or_default(),
            server.port = url.port_or_known_default().unwrap_or_default(),
            error.type = Empty,
            agent = %request.agent,
            state = %request.state,
        )
    }

    /// Record on `span` ([`Transport::chat_span`]) what the ask gave: its tokens, or the
    /// error's class. Numbers and codes only: a text of the answer (the model's name, the
    /// finish reason) may hold a secret the runner is configured to hide and this crate
    /// does not know; the runner records the answering model on its `route` span, after
    /// its redaction.
    /// A router's answer, priced by `prices` when given ([`RouterReply::cost`]), its
    /// numbers recorded on the ask's span.
    pub(crate) fn finish_reply(
        span: &tracing::Span,
        mut reply: Result<RouterReply, RouterError>,
        prices: Option<&crate::PriceTable>,
    ) -> Result<RouterReply, RouterError> {
        if let Some(prices) = prices {
            prices.price_reply(&mut reply);
        }
        Self::record_reply(span, &reply);
        reply
    }

    fn record_reply(span: &tracing::Span, reply: &Result<RouterReply, RouterError>) {
        match reply {
            Ok(reply) => {
                if let Some(tokens) = reply.input_tokens {
                    span.record("gen_ai.usage.input_tokens", tokens);
                }
                if let Some(tokens) = reply.output_tokens {
                    span.record("gen_ai.usage.output_tokens", tokens);
                }
            }
            Err(e) => {
                span.record("error.type", e.class.code());
            }
        }
    }

    pub(crate) fn new(
        provider: &'static str,
        settings: HttpSettings,
        secret: Option<ApiKey>,
    ) -> Result<Self, ConfigError> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config()?)
            .timeout(settings.timeout)
            .connect_timeout(settings.connect_timeout)
            // A redirect could carry the key header to another host; these APIs never redirect.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agent-llm/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(error_chain(&e)))?;
        Ok(Self {
            client,
            settings,
            secret,
            provider,
        })
    }

    /// Replace every occurrence of the key in `text` (a provider may echo it in an error).
    /// Parse a successful body with `parse`, keeping the key out of what is journaled: the
    /// error message, the raw output and the arguments (a provider or proxy may echo it).
    /// `earlier` are the conflicts a stream showed before its reassembled `body` was read:
    /// they come first in the reply, in the order seen.
    pub(crate) fn parse_reply(
        &self,
        body: &str,
        earlier: Vec<Conflict>,
        parse: impl FnOnce(&str) -> Result<RouterReply, RouterError>,
    ) -> Result<RouterReply, RouterError> {
        let mut reply = parse(body).map_err(|e| self.redact_error(e))?;
        reply.conflicts.splice(0..0, earlier);
        reply.conflicts = std::mem::take(&mut reply.conflicts)
            .into_iter()
            .map(|c| self.redact_conflict(c))
            .collect();
        reply.end_reason = reply.end_reason.as_deref().map(|r| self.redact(r));
        reply.raw_output = self.redact(&reply.raw_output);
        reply.model = self.redact(&reply.model);
        reply.refusal = reply.refusal.as_deref().map(|r| self.redact(r));
        for choice in &mut reply.choices {
            choice.name = self.redact(&choice.name);
            choice.arguments = self.redact(&choice.arguments);
        }
        Ok(reply)
    }

    /// `conflict` without the key in its texts.
    fn redact_conflict(&self, conflict: Conflict) -> Conflict {
        let r = |s: String| self.redact(&s);
        match conflict {
            Conflict::EndReasons { first, then } => Conflict::EndReasons {
                first: r(first),
                then: r(then),
            },
            Conflict::DuplicateKey { location, detail } => Conflict::DuplicateKey {
                location,
                detail: r(detail),
            },
            Conflict::Restarted { what } => Conflict::Restarted { what: r(what) },
            Conflict::AfterEnd { what } => Conflict::AfterEnd { what: r(what) },
            Conflict::Unfinished { reason } => Conflict::Unfinished { reason: r(reason) },
            other => other,
        }
    }

    /// `e` without the key in its message and raw output.
    pub(crate) fn redact_error(&self, mut e: RouterError) -> RouterError {
        e.message = self.redact(&e.message);
        e.raw_output = e.raw_output.map(|r| self.redact(&r));
        e
    }

    /// `text` without the key, in plain or JSON-escaped form.
    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.secret {
            Some(key) if key.expose().len() >= 8 => {
                agent_core::runner::redact_secrets(text, &[key.expose()])
            }
            _ => text.to_owned(),
        }
    }

    /// The name rate limits know `model` of this provider by: `openai/gpt-4o`.
    pub(crate) fn limit_key(&self, model: &str) -> String {
        format!("{}/{model}", self.provider)
    }

    fn error(&self, class: ErrorClass, message: &str) -> RouterError {
        RouterError::new(class, self.redact(&format!("{}: {message}", self.provider)))
    }

    /// POST `body` as JSON, retrying what may pass, and return the 2xx body.
    pub(crate) async fn post_json(
        &self,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<Body, RouterError> {
        let mut attempt = 0;
        loop {
            match self.json_once(url, &headers, &body).await {
                Ok(body) => return Ok(body),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e, wait)) => self.before_retry(&mut attempt, e, wait).await?,
            }
        }
    }

    /// One POST and its body.
    async fn json_once(
        &self,
        url: &reqwest::Url,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Body, Attempt> {
        let mut response = self.send_once(url, headers, body).await?;
        match read_limited(&mut response, self.settings.max_response_bytes, false).await {
            Ok(bytes) => Ok(Body {
                text: String::from_utf8_lossy(&bytes).into_owned(),
            }),
            Err(e) => {
                let error = self.read_error(e);
                // A connection dropped mid-body may pass; anything else not.
                if error.class == ErrorClass::Retryable {
                    Err(Attempt::Retry(error, None))
                } else {
                    Err(Attempt::Fatal(error))
                }
            }
        }
    }

    /// POST `body` asking for a stream of server-sent events and feed each event to `on`
    /// until it says the stream is complete. Connecting and error statuses are retried as
    /// for [`post_json`](Self::post_json); once events flow, nothing is retried here (deltas
    /// were already published; the runner re-asks, or retries the tool, under its own
    /// policy). Bounded by [`HttpSettings::max_response_bytes`] over the whole stream,
    /// [`HttpSettings::timeout`] from the request's start, and
    /// [`HttpSettings::stream_idle_timeout`] between two reads. A stream that ends before
    /// `on` saw its last event is an error, never a partial answer.
    ///
    /// A server that answers with a whole JSON body instead (some OpenAI-compatible servers
    /// ignore `stream`) has that body returned, read as on the non-streaming path.
    pub(crate) async fn post_stream(
        &self,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Vec<u8>,
        on: &mut (dyn FnMut(&str, &str) -> Result<StreamFlow, RouterError> + Send),
    ) -> Result<Option<Body>, RouterError> {
        let mut headers = headers;
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        let mut response = loop {
            match self.send_once(url, &headers, &body).await {
                Ok(response) => break response,
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e, wait)) => self.before_retry(&mut attempt, e, wait).await?,
            }
        };
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_sse {
            let bytes = read_limited(&mut response, self.settings.max_response_bytes, false)
                .await
                .map_err(|e| self.read_error(e))?;
            return Ok(Some(Body {
                text: String::from_utf8_lossy(&bytes).into_owned(),
            }));
        }
        let deadline = started + self.settings.timeout;
        let bytes = BoundedBytes {
            response,
            read: 0,
            limit: self.settings.max_response_bytes,
            idle: self.settings.stream_idle_timeout,
            deadline,
        }
        .into_stream();
        let mut events = std::pin::pin!(bytes.eventsource());
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| self.stream_error(e))?;
            if on(&event.event, &event.data)? == StreamFlow::Done {
                return Ok(None);
            }
        }
        Err(self.error(
            ErrorClass::Retryable,
            "the event stream ended before its last event (cut in the middle); no answer is taken from it",
        ))
    }

    fn stream_error(&self, e: EventStreamError<StreamFailure>) -> RouterError {
        match e {
            EventStreamError::Transport(StreamFailure::Idle(idle)) => self.error(
                ErrorClass::Timeout,
                &format!(
                    "the event stream stalled: nothing received for {} ms",
                    idle.as_millis()
                ),
            ),
            EventStreamError::Transport(StreamFailure::Deadline) => self.error(
                ErrorClass::Timeout,
                &format!(
                    "the event stream did not complete within {} s",
                    self.settings.timeout.as_secs_f64()
                ),
            ),
            EventStreamError::Transport(StreamFailure::Read(e)) => self.read_error(e),
            EventStreamError::Utf8(e) => self
                .error(
                    ErrorClass::Permanent,
                    &format!("the event stream is not UTF-8: {e}"),
                )
                .with_code(RejectionCode::AskMalformed),
            EventStreamError::Parser(e) => self
                .error(
                    ErrorClass::Permanent,
                    &format!("the event stream does not parse: {e}"),
                )
                .with_code(RejectionCode::AskMalformed),
        }
    }

    /// After failed attempt `attempt` (counted from 0): `Err` when the retries are spent,
    /// else wait as the provider asked, or with backoff, and count the attempt.
    async fn before_retry(
        &self,
        attempt: &mut u32,
        error: RouterError,
        wait: Option<Duration>,
    ) -> Result<(), RouterError> {
        if *attempt >= self.settings.max_retries {
            return Err(error);
        }
        let wait = wait.unwrap_or_else(|| backoff(&self.settings, *attempt));
        // The class only: the provider's message may carry secrets the router does not
        // know (the runner's); it is journaled, redacted, if the retries run out.
        tracing::warn!(
            provider = self.provider,
            attempt = *attempt + 1,
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            class = error.class.code(),
            "retrying the LLM call"
        );
        tokio::time::sleep(wait).await;
        *attempt += 1;
        Ok(())
    }

    /// One POST: the 2xx response, or what to do about the failure.
    async fn send_once(
        &self,
        url: &reqwest::Url,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<reqwest::Response, Attempt> {
        let outcome = self
            .client
            .post(url.clone())
            .headers(headers.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(body.to_vec())
            .send()
            .await;
        match outcome {
            Err(e) => {
                let class = classify_transport(&e);
                let error = self.error(class, &error_chain(&e));
                if class == ErrorClass::Retryable {
                    Err(Attempt::Retry(error, None))
                } else {
                    Err(Attempt::Fatal(error))
                }
            }
            Ok(response) if response.status().is_success() => Ok(response),
            Ok(mut response) => match self.failed_status(&mut response).await {
                Ok((error, wait)) => Err(Attempt::Retry(error, wait)),
                Err(error) => Err(Attempt::Fatal(error)),
            },
        }
    }

    /// An `error` event inside a stream: the same classes as the error body of an HTTP
    /// status (`overloaded_error` as a 529, `rate_limit_error` as a 429, ...).
    pub(crate) fn stream_error_event(&self, data: &str) -> RouterError {
        let class = error_event_class(data);
        self.error(
            class,
            &format!("error event in the stream: {}", error_message(data)),
        )
        .with_raw_output(self.redact(data))
    }

    /// A non-2xx answer: `Err` when it must not be retried, else the error to report if
    /// the retries run out and the wait the provider asked for.
    async fn failed_status(
        &self,
        response: &mut reqwest::Response,
    ) -> Result<(RouterError, Option<Duration>), RouterError> {
        let status = response.status();
        let headers = response.headers().clone();
        let text = read_limited(response, MAX_ERROR_BODY, true)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let class = classify_status(status);
        let message = format!("HTTP {status}: {}", error_message(&text));
        let error = self.error(class, &message);
        let retry = match should_retry_header(&headers) {
            // The provider's word wins, except that credentials refused stay refused.
            Some(explicit) => explicit && class != ErrorClass::Auth,
            None => retryable_status(status),
        };
        if !retry {
            return Err(error);
        }
        let asked = retry_after(&headers, SystemTime::now());
        if let Some(asked) = asked
            && asked > self.settings.max_retry_after
        {
            return Err(self
                .error(
                    class,
                    &format!(
                        "{message} (the provider asked to wait {}s, more than the {}s allowed)",
                        asked.as_secs(),
                        self.settings.max_retry_after.as_secs()
                    ),
                )
                .with_retry_after(Some(asked)));
        }
        // The wait asked for travels with the error: when the retries run out, the runner
        // pauses the shared rate limit of this model for every worker.
        Ok((error.with_retry_after(asked), asked))
    }

    pub(crate) fn read_error(&self, e: ReadError) -> RouterError {
        match e {
            ReadError::TooLarge { limit } => self.error(
                ErrorClass::Permanent,
                &format!("response body exceeds {limit} bytes; rejected while streaming"),
            ),
            ReadError::Http(e) => self.error(classify_transport(&e), &error_chain(&e)),
        }
    }
}

/// What a failed attempt calls for.
enum Attempt {
    /// Do not try again.
    Fatal(RouterError),
    /// Try again (after the wait the provider asked for, if any).
    Retry(RouterError, Option<Duration>),
}

/// Whether a stream goes on after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamFlow {
    /// More events are expected.
    More,
    /// That was the last event: the answer is complete.
    Done,
}

/// Why the bytes of a stream stopped coming.
#[derive(Debug)]
pub(crate) enum StreamFailure {
    /// Nothing for this long.
    Idle(Duration),
    /// The whole-request deadline passed.
    Deadline,
    /// Past the byte limit, or the connection failed.
    Read(ReadError),
}

impl std::fmt::Display for StreamFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Idle(d) => write!(f, "no data for {} ms", d.as_millis()),
            Self::Deadline => f.write_str("deadline passed"),
            Self::Read(ReadError::TooLarge { limit }) => write!(f, "more than {limit} bytes"),
            Self::Read(ReadError::Http(e)) => write!(f, "{e}"),
        }
    }
}

/// A response body as a stream of chunks, each read within the idle timeout and before the
/// deadline, all of them within the byte limit: what the SSE parser is fed, so it never
/// buffers more than the limit nor waits longer than the bounds.
struct BoundedBytes {
    response: reqwest::Response,
    read: usize,
    limit: usize,
    idle: Duration,
    deadline: tokio::time::Instant,
}

impl BoundedBytes {
    fn into_stream(
        self,
    ) -> impl futures::Stream<Item = Result<Vec<u8>, StreamFailure>> + Send + 'static {
        futures::stream::unfold(Some(self), async |state| {
            let mut s = state?;
            let now = tokio::time::Instant::now();
            if now >= s.deadline {
                return Some((Err(StreamFailure::Deadline), None));
            }
            let wait = s.idle.min(s.deadline - now);
            let chunk = match tokio::time::timeout(wait, s.response.chunk()).await {
                Err(_) if wait < s.idle => Err(StreamFailure::Deadline),
                Err(_) => Err(StreamFailure::Idle(s.idle)),
                Ok(Err(e)) => Err(StreamFailure::Read(ReadError::Http(e))),
                Ok(Ok(None)) => return None,
                Ok(Ok(Some(chunk))) => {
                    s.read += chunk.len();
                    if s.read > s.limit {
                        Err(StreamFailure::Read(ReadError::TooLarge { limit: s.limit }))
                    } else {
                        Ok(chunk.to_vec())
                    }
                }
            };
            // After a failure the stream ends: the failure is the last item.
            let next = chunk.is_ok().then_some(s);
            Some((chunk, next))
        })
    }
}

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Past the limit: the rest is never read.
    TooLarge { limit: usize },
    /// The connection failed or timed out.
    Http(reqwest::Error),
}

/// Read the body chunk by chunk, stopping as soon as it would pass `limit`. With
/// `truncate`, keep the first `limit` bytes instead of failing (for error messages).
pub(crate) async fn read_limited(
    response: &mut reqwest::Response,
    limit: usize,
    truncate: bool,
) -> Result<Vec<u8>, ReadError> {
    if !truncate
        && let Some(len) = response.content_length()
        && len > limit as u64
    {
        return Err(ReadError::TooLarge { limit });
    }
    let mut buf = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Http)? {
        if buf.len() + chunk.len() > limit {
            if truncate {
                let room = limit - buf.len();
                buf.extend_from_slice(&chunk[..room]);
                return Ok(buf);
            }
            return Err(ReadError::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// The class of a failure to talk to the provider at all.
pub(crate) fn classify_transport(e: &reqwest::Error) -> ErrorClass {
    if e.is_timeout() {
        ErrorClass::Timeout
    } else if e.is_builder() || e.is_redirect() {
        ErrorClass::Permanent
    } else {
        // Connect errors, resets, a connection closed mid-body: a passing fault.
        ErrorClass::Retryable
    }
}

/// The class of an HTTP error status.
#[must_use]
pub fn classify_status(status: StatusCode) -> ErrorClass {
    match status.as_u16() {
        401 | 403 => ErrorClass::Auth,
        408 => ErrorClass::Timeout,
        429 => ErrorClass::RateLimited,
        409 | 500..=599 => ErrorClass::Retryable,
        _ => ErrorClass::Permanent,
    }
}

/// Whether the client retries this status itself (the OpenAI and Anthropic SDKs retry the
/// same set).
fn retryable_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 429 | 500..=599)
}

/// `x-should-retry: true|false`, sent by OpenAI and Anthropic to override the default.
fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// How long the provider asked us to wait: `retry-after-ms` (OpenAI), or `retry-after` as
/// seconds or an HTTP date (RFC 9110). A date in the past means no wait.
#[must_use]
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    // Far beyond any wait anyone honours; keeps `from_secs_f64` away from overflow.
    const CAP_SECS: f64 = 1.0e9;
    let seconds =
        |v: f64| (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(CAP_SECS)));
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|ms| seconds(ms / 1000.0))
    {
        return Some(ms);
    }
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Exponential backoff with jitter before retry `attempt + 1` (`attempt` counts retries
/// from 0): `initial * 2^attempt`, capped, times a random factor in `[0.5, 1.0]` so many
/// workers do not retry in step. The one policy of the workspace,
/// [`agent_core::RetryPolicy::backoff`], with the settings' bounds.
#[must_use]
pub fn backoff(settings: &HttpSettings, attempt: u32) -> Duration {
    agent_core::RetryPolicy {
        max_attempts: settings.max_retries.saturating_add(1),
        initial_backoff: settings.initial_backoff,
        max_backoff: settings.max_backoff,
        multiplier: 2.0,
        jitter: true,
    }
    .backoff(attempt.saturating_add(1))
}

/// The message inside a provider's JSON error body (`{"error":{"message":...}}` for both
/// OpenAI and Anthropic), or the body itself, shortened.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        let error = v.get("error")?;
        let message = error
            .get("message")
            .and_then(serde_json::Value::as_str)
            .or_else(|| error.as_str())?;
        let kind = error.get("type").and_then(serde_json::Value::as_str);
        Some(match kind {
            Some(kind) => format!("{kind}: {message}"),
            None => message.to_owned(),
        })
    });
    // Not shortened here: the runner redacts its secrets first, then shortens.
    message.unwrap_or_else(|| body.to_owned())
}

/// The class of a provider's error object (`{"error": {"type": ...}}` of an `error` event or
/// an error body): the class of the HTTP status that carries that type.
fn error_event_class(data: &str) -> ErrorClass {
    let parsed: Option<serde_json::Value> = serde_json::from_str(data).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let field = |name: &str| {
        error
            .and_then(|e| e.get(name))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    // A numeric `code` (some OpenAI-compatible servers) is the status itself.
    if let Some(status) = error
        .and_then(|e| e.get("code"))
        .and_then(serde_json::Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
    {
        return classify_status(status);
    }
    let status = match (field("type").as_str(), field("code").as_str()) {
        // Anthropic's error types, with the statuses its API documents for them.
        ("overloaded_error", _) => 529,
        ("api_error" | "server_error", _) => 500,
        ("timeout_error", _) => 504,
        ("rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens", _)
        | (_, "rate_limit_exceeded") => 429,
        ("authentication_error", _) | (_, "invalid_api_key") => 401,
        ("permission_error", _) => 403,
        ("not_found_error", _) => 404,
        ("request_too_large", _) => 413,
        ("invalid_request_error", _) => 400,
        // An error the stream does not name: a fault of the server's, which may pass.
        _ => 500,
    };
    classify_status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
}

/// An error and its sources, `: `-joined (reqwest's own message hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tests {
    /// Builds with or without a system CA store (run with `SSL_CERT_FILE=/dev/null
    /// SSL_CERT_DIR=/empty/dir` to take the bundled-roots path).
    #[test]
    fn the_tls_config_builds() {
        let platform =
            rustls_platform_verifier::Verifier::new(std::sync::Arc::new(super::ring_provider()));
        eprintln!("platform verifier available: {}", platform.is_ok());
        let config = super::tls_config().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
