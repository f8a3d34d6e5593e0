//! # durable-agents-http
//!
//! The store of durable agents over HTTP, as an [axum](https://docs.rs/axum) router to mount
//! in a service ([`router`]) or to run on its own ([`serve`], which `agentctl serve` runs
//! for any store): list runs, read one with its history, journal and state at any version,
//! follow its events live as server-sent events (resuming with `Last-Event-ID`), send it a
//! signal, cancel it, retry it. No agent code is needed for any of it. A router given the
//! service's runners ([`ApiConfig::with_agent`]) also starts runs in a typed initial state,
//! one given webhooks ([`ApiConfig::with_webhook`]) starts one run per delivery of another
//! system's webhook ([`webhooks`]), and one given the runners' bus
//! ([`ApiConfig::with_ephemeral`]) streams token deltas.
//!
//! ```no_run
//! use std::sync::Arc;
//! use durable_agents::http::{ApiConfig, router};
//! use durable_agents::store::memory::MemoryStore;
//!
//! # async fn demo() -> std::io::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let api = router(store, ApiConfig::default().with_token("a-long-random-token-7f3e"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, api).await
//! # }
//! ```
//!
//! ## The run inspector
//! Every router also serves the run inspector under `/ui/`: web pages that show every run
//! as its graph, its timeline and its journal, live, and act on runs through this API with
//! its token (`docs/inspector.md`). Reads follow the rules below; where reads need the
//! token, a sign-in form (`/ui/login`) sets a cookie that reads the pages only.
//!
//! ## Security
//! - **Writes need a bearer token, always**: `Authorization: Bearer TOKEN`, compared in
//!   constant time. Without a configured token, writes are refused (`403`).
//! - **Reads need it off loopback**: [`serve`] refuses to listen on an address other than
//!   loopback without a token, and with one, every request needs it.
//!   [`ApiConfig::require_token_for_reads`] does the same for a mounted router.
//! - **Bodies are bounded** ([`ApiConfig::max_body_bytes`], 64 KiB by default) and **CORS is
//!   off** unless origins are given ([`ApiConfig::with_cors_origin`]).
//!
//! ## The document
//! `GET /v1/openapi.json` serves the OpenAPI 3.1 document, generated from the handlers and
//! the records' types ([`openapi`]); CI runs a property-based API tester against a live
//! server with it. `docs/http-api.md` describes every endpoint.
#![warn(missing_docs)]

mod agents;
mod auth;
mod budget;
mod edge;
mod edit;
mod error;
mod events;
mod extract;
mod hosts;
mod inspector;
mod limits;
mod openapi;
mod runs;
mod schedules;
mod socket;
mod throttle;
mod tools;
mod traces;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use agent_core::agent::{Agent, Handle};
use agent_core::events::{EphemeralBus, FollowConfig};
use agent_core::runner::Runner;
use agent_core::secrets::SealKeys;
use agent_core::store::{EventLog, HistoryStore, ScheduleStore, Store};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderValue;
use tower_http::cors::CorsLayer;

pub use error::ApiError;
pub use openapi::openapi;
pub use webhooks::{DeliveryKey, Webhook};

/// How the API serves.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    token: Option<String>,
    reads_need_token: bool,
    max_body_bytes: usize,
    cors_origins: Vec<HeaderValue>,
    ephemeral: Option<EphemeralBus>,
    agents: agents::Starters,
    webhooks: webhooks::Webhooks,
    seal_keys: SealKeys,
    allowed_hosts: Vec<String>,
    max_streams: usize,
    wrong_tokens: (u32, u32),
    metrics: Option<MetricsPage>,
    trace_url: inspector::TraceUrl,
}

/// What `GET /metrics` answers: a scrape in the Prometheus text format.
#[derive(Clone)]
struct MetricsPage(Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsPage")
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            token: None,
            reads_need_token: false,
            max_body_bytes: 64 * 1024,
            cors_origins: Vec::new(),
            ephemeral: None,
            agents: agents::Starters::default(),
            webhooks: webhooks::Webhooks::default(),
            seal_keys: SealKeys::new(),
            allowed_hosts: Vec::new(),
            max_streams: DEFAULT_MAX_STREAMS,
            wrong_tokens: (throttle::PER_CLIENT, throttle::GLOBAL),
            metrics: None,
            trace_url: inspector::TraceUrl::default(),
        }
    }
}

/// How many event streams a server keeps open at once by default.
pub const DEFAULT_MAX_STREAMS: usize = 256;

impl ApiConfig {
    /// The bearer token requests must carry (every write, and every request when reads
    /// need it too).
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Every request needs the token, reads too (for a server reachable off loopback).
    #[must_use]
    pub fn require_token_for_reads(mut self) -> Self {
        self.reads_need_token = true;
        self
    }

    /// Bodies larger than this are refused (`413`).
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Allow browsers on `origin` (`https://ops.example.com`) to call the API.
    ///
    /// # Errors
    /// [`ApiError`] when `origin` is not a valid header value.
    pub fn with_cors_origin(mut self, origin: &str) -> Result<Self, ApiError> {
        let value = HeaderValue::from_str(origin)
            .map_err(|_| ApiError::bad_request(format!("not an origin: `{origin}`")))?;
        self.cors_origins.push(value);
        Ok(self)
    }

    /// Answer requests naming `host` (a name or an address, a port ignored) without the
    /// token, besides the loopback names (`localhost`, `127.0.0.1`, `::1`), which a server
    /// always answers to. A request naming any other host is refused (`403`) unless it
    /// carries the token: a page whose name an attacker points at this machine (DNS
    /// rebinding) cannot read through the user's browser.
    #[must_use]
    pub fn with_allowed_hosts<S: Into<String>>(
        mut self,
        hosts: impl IntoIterator<Item = S>,
    ) -> Self {
        self.allowed_hosts.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Keep at most `n` event streams open at once (by default [`DEFAULT_MAX_STREAMS`]): one
    /// more is answered `503` with `Retry-After`, so that followers cannot take every
    /// connection and task of the server.
    #[must_use]
    pub fn with_max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// After `per_client` wrong tokens from one client address within a minute (10 by
    /// default), refuse its next attempts for the rest of the minute without checking them
    /// (`429` with `Retry-After`): the API's bearer tokens, the sign-in form's, and the
    /// tokens of reads. After `everyone` wrong tokens from all clients together (100 by
    /// default), refuse every client that presented a wrong one in that minute too. A
    /// client that presented no wrong token is never refused.
    #[must_use]
    pub fn with_wrong_token_limits(mut self, per_client: u32, everyone: u32) -> Self {
        self.wrong_tokens = (per_client, everyone);
        self
    }

    /// The keys a signal's payload, and an edited state of an agent this service does not
    /// register, are sealed with before they are stored, as a runner seals them (`agentctl
    /// serve` reads them from `DURABLE_AGENTS_SEAL_KEYS`). Without keys, a signal whose
    /// payload holds a secret (a sensitive field, or one its declared type marks) is refused
    /// with 400, an edited state that holds one with 422, and nothing is stored.
    #[must_use]
    pub fn with_seal_keys(mut self, keys: SealKeys) -> Self {
        self.seal_keys = keys;
        self
    }

    /// Answer `GET /metrics` with what `render` returns: a scrape in the Prometheus text
    /// format (`durable-agents-observe`'s `Metrics::render`). A read like any other: free on
    /// loopback, the token required off it (and by `reads_need_token`), the `Host`
    /// allow-list applied; the metrics' labels carry no run id and nothing secret.
    #[must_use]
    pub fn with_metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.metrics = Some(MetricsPage(Arc::new(render)));
        self
    }

    /// Link each run's timing page in the inspector (`/ui/runs/{id}/timing`) to the run's
    /// trace in a trace viewer: `template` is the viewer's URL with `{trace_id}` where the
    /// run's trace id goes (32 lowercase hex digits,
    /// [`RunTrace::of_record`](agent_core::trace::RunTrace::of_record)), for example
    /// `http://phoenix:6006/projects/default/traces/{trace_id}` or
    /// `http://jaeger:16686/trace/{trace_id}`. Without it, the page shows the trace id alone.
    ///
    /// # Errors
    /// [`ApiError`] when `template` is not an `http://` or `https://` URL holding
    /// `{trace_id}`.
    pub fn with_trace_url(mut self, template: &str) -> Result<Self, ApiError> {
        let web = template.starts_with("http://") || template.starts_with("https://");
        if !web || !template.contains("{trace_id}") {
            return Err(ApiError::bad_request(format!(
                "a trace viewer's URL is an http(s) URL holding `{{trace_id}}`, not `{template}`"
            )));
        }
        self.trace_url = inspector::TraceUrl(Some(template.into()));
        Ok(self)
    }

    /// Carry the ephemeral events of `bus` (token deltas, [`EphemeralBus`]) in each run's
    /// event stream, as SSE events named `token`, without an id. Give the bus the runners
    /// publish on ([`RunnerConfig::ephemeral`](agent_core::runner::RunnerConfig::ephemeral)):
    /// tokens reach only the clients of a server in the same process as the runner.
    #[must_use]
    pub fn with_ephemeral(mut self, bus: EphemeralBus) -> Self {
        self.ephemeral = Some(bus);
        self
    }

    /// Let clients start runs of agent `A` (`POST /v1/agents/{A::NAME}/runs`, a write):
    /// the body's state is read as `A`, checked to be an initial state, and started with
    /// `runner` ([`Runner::start_with_labels`]). The runs are then driven by whatever
    /// drives the service's runs (a worker over the same store).
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use durable_agents::http::{ApiConfig, router};
    /// # use durable_agents::runner::Runner;
    /// # fn demo<A: durable_agents::Agent + durable_agents::agent::Handle<H>, H: Send + Sync + 'static>(
    /// #     store: Arc<dyn durable_agents::store::Store>, runner: Runner<A, H>) {
    /// let api = router(store, ApiConfig::default().with_token("a-long-random-token-7f3e").with_agent(runner));
    /// # }
    /// ```
    #[must_use]
    pub fn with_agent<A, H>(mut self, runner: Runner<A, H>) -> Self
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        self.agents.0.insert(A::NAME.to_owned(), Arc::new(runner));
        self
    }

    /// Serve `webhook` at `POST /v1/webhooks/{name}`: each delivery starts one run of its
    /// agent ([`webhooks`]). A second webhook of the same name replaces the first.
    #[must_use]
    pub fn with_webhook(mut self, webhook: Webhook) -> Self {
        self.webhooks.0.insert(webhook.name().to_owned(), webhook);
        self
    }
}

/// What every handler shares.
#[derive(Clone, Debug)]
pub(crate) struct AppState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) ephemeral: Option<EphemeralBus>,
    pub(crate) agents: agents::Starters,
    pub(crate) webhooks: webhooks::Webhooks,
    pub(crate) seal_keys: SealKeys,
    /// One permit per event stream open.
    pub(crate) streams: Arc<tokio::sync::Semaphore>,
    /// What wakes the event streams: one watcher of the store for all of them, and reads
    /// shared by the streams of one scope, so an idle stream costs no read.
    pub(crate) hub: agent_core::events::EventHub,
    /// The token check, for a WebSocket's writes (its upgrade is a read).
    pub(crate) auth: Arc<auth::Auth>,
}

/// What the inspector's pages hold of the store: its reads and its events, never a write
/// (the pages are `GET`s; every action on a run goes through the API and its checks).
#[derive(Clone, Debug)]
pub(crate) struct Reader {
    pub(crate) store: Arc<dyn HistoryStore>,
    pub(crate) events: Arc<dyn EventLog>,
    /// Read only: the schedules page lists them.
    pub(crate) schedules: Arc<dyn ScheduleStore>,
    /// The agents this server starts runs of ([`ApiConfig::with_agent`]), by name: an
    /// agent's page offers its start form only for these.
    pub(crate) startable: Vec<String>,
}

impl axum::extract::FromRef<AppState> for Reader {
    fn from_ref(app: &AppState) -> Self {
        Self {
            store: Arc::clone(&app.store) as Arc<dyn HistoryStore>,
            events: Arc::clone(&app.store) as Arc<dyn EventLog>,
            schedules: Arc::clone(&app.store) as Arc<dyn ScheduleStore>,
            startable: app.agents.0.keys().cloned().collect(),
        }
    }
}

/// The API over `store`, to mount in a service (`Router::nest`, `Router::merge`) or to
/// serve as it is.
pub fn router(store: Arc<dyn Store>, config: ApiConfig) -> Router {
    let auth = Arc::new(auth::Auth::new(
        config.token.clone(),
        config.reads_need_token,
        throttle::Throttle::new(
            config.wrong_tokens.0,
            config.wrong_tokens.1,
            throttle::WINDOW,
        ),
    ));
    let state = AppState {
        hub: agent_core::events::EventHub::new(Arc::clone(&store), FollowConfig::default()),
        store,
        ephemeral: config.ephemeral.clone(),
        agents: config.agents.clone(),
        webhooks: config.webhooks.clone(),
        seal_keys: config.seal_keys.clone(),
        streams: Arc::new(tokio::sync::Semaphore::new(config.max_streams)),
        auth: Arc::clone(&auth),
    };
    let max_body = config.max_body_bytes;
    let limits = move |router: Router| {
        router
            // Bodies are refused by their declared length before anything reads them, and
            // by what was read when they declare none (chunked).
            .layer(DefaultBodyLimit::max(max_body))
            .layer(axum::middleware::from_fn(move |request, next| {
                limits::check_length(max_body, request, next)
            }))
    };
    let api = limits(
        Router::new()
            .merge(runs::routes())
            .merge(edit::routes())
            .merge(budget::routes())
            .merge(events::routes())
            .merge(socket::routes())
            .merge(agents::routes())
            .merge(tools::routes())
            .merge(schedules::routes())
            .merge(openapi::routes())
            .merge(metrics_route(config.metrics.clone()))
            .with_state(state.clone()),
    )
    .layer(axum::middleware::from_fn_with_state(
        Arc::clone(&auth),
        auth::check,
    ));
    // A signed webhook's signature is its credential; every other request there needs the
    // token as any write does.
    let hooks = limits(webhooks::routes().with_state(state.clone())).layer(
        axum::middleware::from_fn_with_state(
            (Arc::clone(&auth), config.webhooks.clone()),
            webhooks::check_auth,
        ),
    );
    // The inspector's pages (`/ui/`) check reads their own way (a sign-in cookie too).
    let mut app = api.merge(hooks).merge(limits(inspector::routes(
        state,
        Arc::clone(&auth),
        config.trace_url.clone(),
    )));
    if !config.cors_origins.is_empty() {
        app = app.layer(
            CorsLayer::new()
                .allow_origin(config.cors_origins)
                .allow_methods(tower_http::cors::Any)
                .allow_headers(tower_http::cors::Any),
        );
    }
    // Inside the routing, where the matched route names the span.
    app = app.layer(traces::layer());
    // Outermost: a request naming a host the server does not answer to is refused before
    // anything, the inspector's pages included; then one whose path or query holds a
    // control character. A route that does not exist answers in the API's error shape.
    let hosts = Arc::new(hosts::Hosts::new(&config.allowed_hosts, auth));
    app.fallback(|| async {
        ApiError::not_found("no such route: the API's routes are in /v1/openapi.json")
    })
    .layer(axum::middleware::from_fn(edge::check_uri))
    .layer(axum::middleware::from_fn_with_state(hosts, hosts::check))
}

/// `GET /metrics`: the configured page ([`ApiConfig::with_metrics`]), or 404 when there is
/// none. The route exists either way, so that the document describes every server alike
/// (another method there is 405, as on every route).
fn metrics_route(page: Option<MetricsPage>) -> Router<AppState> {
    let route = Router::new().route("/metrics", axum::routing::get(metrics));
    match page {
        Some(page) => route.layer(axum::Extension(page)),
        None => route,
    }
}

/// Every metric of the process, for Prometheus to scrape.
#[utoipa::path(get, path = "/metrics", tag = "runs",
    responses(
        (status = 200, description = "The metrics, in the Prometheus text format \
            (docs/observability.md lists them)",
            content_type = "text/plain; version=0.0.4; charset=utf-8", body = String),
        (status = 404, description = "The server was started without metrics \
            (`agentctl serve --metrics`)", body = error::ErrorBody),
    ))]
async fn metrics(
    page: Option<axum::Extension<MetricsPage>>,
) -> Result<impl axum::response::IntoResponse, error::ApiError> {
    let Some(axum::Extension(MetricsPage(render))) = page else {
        return Err(error::ApiError::not_found(
            "this server was started without metrics (`agentctl serve --metrics`)",
        ));
    };
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(),
    ))
}

/// The shortest token [`serve`] accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why [`serve`] did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Off loopback without a token: anyone who reaches the address could read every run.
    #[error(
        "refusing to listen on {0} without a token: every request there must carry one \
         (give a token, or listen on 127.0.0.1)"
    )]
    NoToken(SocketAddr),
    /// A token shorter than [`MIN_TOKEN_LEN`]: guessable.
    #[error(
        "the token has {0} characters; a token has at least {MIN_TOKEN_LEN} (for example \
         `openssl rand -hex 16`)"
    )]
    WeakToken(usize),
    /// The address could not be bound, or the server failed.
    #[error("cannot serve on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Serve the API over `store` on `addr` until `shutdown` completes. Off loopback, a token
/// is required and every request needs it.
///
/// # Errors
/// [`ServeError::NoToken`] off loopback without a token; [`ServeError::Io`] when the
/// address cannot be bound.
pub async fn serve(
    store: Arc<dyn Store>,
    config: ApiConfig,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if !addr.ip().is_loopback() && config.token.is_none() {
        return Err(ServeError::NoToken(addr));
    }
    check_token(&config)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Io { addr, source })?;
    serve_on(store, config, listener, shutdown).await
}

/// A configured token is long enough not to be guessed.
fn check_token(config: &ApiConfig) -> Result<(), ServeError> {
    match config.token.as_deref().map(|t| t.chars().count()) {
        Some(n) if n < MIN_TOKEN_LEN => Err(ServeError::WeakToken(n)),
        _ => Ok(()),
    }
}

/// [`serve`], on a listener already bound (tests, port 0).
///
/// # Errors
/// [`ServeError::NoToken`] off loopback without a token; [`ServeError::Io`] when the
/// server fails.
pub async fn serve_on(
    store: Arc<dyn Store>,
    mut config: ApiConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(|source| ServeError::Io {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })?;
    check_token(&config)?;
    if !addr.ip().is_loopback() {
        if config.token.is_none() {
            return Err(ServeError::NoToken(addr));
        }
        config.reads_need_token = true;
        // The address it listens on is a name it answers to.
        if !addr.ip().is_unspecified() {
            config.allowed_hosts.push(addr.ip().to_string());
        }
    }
    tracing::info!(%addr, "serving the store over HTTP");
    // With each client's address, which the throttle of wrong tokens counts by.
    // Served alone, the root is the inspector's: a person who opens the address lands on
    // the runs. (Mounted in a service, `router` leaves `/` to it.)
    let app = router(store, config)
        .route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::to("/ui/") }),
        )
        .into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| ServeError::Io { addr, source })
}
