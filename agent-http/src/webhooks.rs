//! Webhooks: `POST /v1/webhooks/{name}` starts a run of one agent from the request's body,
//! or signals a run ([`Webhook::signalling`]), once per delivery.
//!
//! A sender retries a delivery it did not see acknowledged, so the run's id is derived from
//! the delivery's key (the `Idempotency-Key` header, another header, or a field of the
//! body): a retry finds the run its first delivery started (`200`), never a second one, and
//! a different body under a key already used is refused (`409`). The body is the initial
//! state as the agent's enum serializes, or the data of one named initial state
//! ([`Webhook::in_state`]); it is read through the agent's runner, with the API's errors.
//!
//! A signalling webhook reads the run's id from a field of the body and sends it a signal
//! (the whole body or one field as its payload), checked as `POST /v1/runs/{id}/signals`
//! checks it and stored under the delivery's key: a retry stores nothing more (`200`, the
//! first signal named), even after the run consumed the signal and moved on.
//!
//! A webhook signed with a shared secret ([`Webhook::signed_hmac_sha256`]) checks the
//! signature (`sha256=` and the hex HMAC-SHA256 of the raw body, the form GitHub and
//! most senders use) before it reads anything, in constant time, and needs no API token: the
//! signature is its credential. A webhook without a secret is an API write like any
//! other and needs the token.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use agent_core::agent::{Agent, Handle};
use agent_core::runner::{JsonSignaller, JsonStarter, Runner, RunnerError, StartError};
use agent_core::store::{Labels, MAX_SIGNAL_KEY_BYTES, RunRecord, StoreError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path};

/// The header a delivery's key is read from by default.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// The header a signed delivery carries its signature in by default.
pub const SIGNATURE_HEADER: &str = "X-Signature-256";
pub use agent_core::started_by::{WEBHOOK_DELIVERY_LABEL as DELIVERY_LABEL, WEBHOOK_LABEL};
/// The longest delivery key, in characters (the run's id is the webhook's name, `-` and it).
const MAX_KEY_CHARS: usize = 128;

/// Where a delivery's key is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryKey {
    /// In this request header.
    Header(String),
    /// In this field of the body, a JSON pointer (`/order/id`): a string or a number.
    Field(String),
}

/// An endpoint that starts or signals runs of one agent: see the [module](self).
#[derive(Clone)]
pub struct Webhook {
    name: String,
    action: Action,
    key: DeliveryKey,
    secret: Option<Arc<[u8]>>,
    signature_header: String,
}

/// What a delivery does.
#[derive(Clone)]
enum Action {
    /// Start a run in the body's state (or in `state`, with the body as its data).
    Start {
        starter: Arc<dyn JsonStarter>,
        state: Option<String>,
    },
    /// Send signal `signal` to the run whose id is at `run_field`, with the payload at
    /// `payload_field` (the whole body when `None`).
    Signal {
        signaller: Arc<dyn JsonSignaller>,
        signal: String,
        run_field: String,
        payload_field: Option<String>,
    },
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret is never printed.
        let mut debug = f.debug_struct("Webhook");
        debug.field("name", &self.name);
        match &self.action {
            Action::Start { starter, state } => {
                debug.field("agent", &starter.agent()).field("state", state)
            }
            Action::Signal {
                signaller,
                signal,
                run_field,
                payload_field,
            } => debug
                .field("agent", &signaller.agent())
                .field("signal", signal)
                .field("run_field", run_field)
                .field("payload_field", payload_field),
        };
        debug
            .field("key", &self.key)
            .field("signed", &self.secret.is_some())
            .finish_non_exhaustive()
    }
}

/// Refuse a webhook name that cannot be a path segment and the start of run ids.
fn check_name(name: &str) {
    assert!(
        !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')),
        "a webhook's name is 1 to 64 ASCII letters, digits, `-` or `_`, not `{name}`"
    );
}

impl Webhook {
    /// `POST /v1/webhooks/{name}` starts runs of `runner`'s agent; the body is an initial
    /// state as the agent's enum serializes (`{"Received": {...}}`), the delivery's key the
    /// `Idempotency-Key` header, and the API's token is needed (until
    /// [`signed_hmac_sha256`](Self::signed_hmac_sha256)).
    ///
    /// # Panics
    /// When `name` is not 1 to 64 ASCII letters, digits, `-` or `_` (it is a path segment
    /// and the start of every run id it derives).
    #[must_use]
    pub fn starting<A, H>(name: impl Into<String>, runner: Runner<A, H>) -> Self
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        Self::new(
            name.into(),
            Action::Start {
                starter: Arc::new(runner),
                state: None,
            },
        )
    }

    fn new(name: String, action: Action) -> Self {
        check_name(&name);
        Self {
            name,
            action,
            key: DeliveryKey::Header(IDEMPOTENCY_KEY.to_owned()),
            secret: None,
            signature_header: SIGNATURE_HEADER.to_owned(),
        }
    }

    /// `POST /v1/webhooks/{name}` sends signal `signal` to the run of `runner`'s agent
    /// whose id is at `run_field` in the body (a JSON pointer, `/run_id`), with the whole
    /// body as its payload (or one field: [`payload_at`](Self::payload_at)), once per
    /// delivery key (the `Idempotency-Key` header by default); the API's token is needed
    /// (until [`signed_hmac_sha256`](Self::signed_hmac_sha256)).
    ///
    /// # Panics
    /// As [`starting`](Self::starting), for the name.
    #[must_use]
    pub fn signalling<A, H>(
        name: impl Into<String>,
        runner: Runner<A, H>,
        signal: impl Into<String>,
        run_field: impl Into<String>,
    ) -> Self
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        Self::new(
            name.into(),
            Action::Signal {
                signaller: Arc::new(runner),
                signal: signal.into(),
                run_field: run_field.into(),
                payload_field: None,
            },
        )
    }

    /// The body is the data of initial state `state` (`{"order_id": ...}`), not the enum.
    ///
    /// # Panics
    /// On a [signalling](Self::signalling) webhook, which starts nothing.
    #[must_use]
    pub fn in_state(mut self, state: impl Into<String>) -> Self {
        let Action::Start { state: s, .. } = &mut self.action else {
            panic!(
                "webhook `{}` signals runs: `in_state` is for a webhook that starts them",
                self.name
            );
        };
        *s = Some(state.into());
        self
    }

    /// The signal's payload is the body's field at `pointer` (`/delivery`), not the whole
    /// body; a delivery without it is refused (`422`).
    ///
    /// # Panics
    /// On a [starting](Self::starting) webhook, which sends no signal.
    #[must_use]
    pub fn payload_at(mut self, pointer: impl Into<String>) -> Self {
        let Action::Signal { payload_field, .. } = &mut self.action else {
            panic!(
                "webhook `{}` starts runs: `payload_at` is for a webhook that signals them",
                self.name
            );
        };
        *payload_field = Some(pointer.into());
        self
    }

    /// Where each delivery's key is (the `Idempotency-Key` header by default).
    #[must_use]
    pub fn key(mut self, key: DeliveryKey) -> Self {
        self.key = key;
        self
    }

    /// Deliveries are signed with `secret`: the header `X-Signature-256` (or
    /// [`signature_header`](Self::signature_header)) carries `sha256=` and the hex
    /// HMAC-SHA256 of the raw body. The API's token is then not needed.
    #[must_use]
    pub fn signed_hmac_sha256(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(Arc::from(secret.as_ref()));
        self
    }

    /// The header the signature is in (`X-Hub-Signature-256` for GitHub).
    #[must_use]
    pub fn signature_header(mut self, header: impl Into<String>) -> Self {
        self.signature_header = header.into();
        self
    }

    /// The webhook's name: its path segment.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    fn is_signed(&self) -> bool {
        self.secret.is_some()
    }

    /// The refusal of a delivery whose signature is missing or does not match its body.
    fn check_signature(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let header = &self.signature_header;
        let form = format!("`{header}: sha256=<hex of the HMAC-SHA256 of the body>`");
        let Some(value) = headers.get(header.as_str()) else {
            return Err(ApiError::unauthorized(format!(
                "webhook `{}` is signed and this delivery carries no signature: send {form}",
                self.name
            )));
        };
        let signature = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().strip_prefix("sha256="))
            .and_then(|hex| hex::decode(hex).ok())
            .ok_or_else(|| {
                ApiError::unauthorized(format!(
                    "the signature in `{header}` is not `sha256=` and hex: send {form}"
                ))
            })?;
        let mut mac =
            Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(body);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&signature).map_err(|_| {
            ApiError::unauthorized(format!(
                "the signature in `{header}` does not match the body: was it signed with \
                 webhook `{}`'s secret, over the body as sent?",
                self.name
            ))
        })
    }

    /// The delivery's key, checked.
    fn delivery_key(&self, headers: &HeaderMap, body: &Value) -> Result<String, ApiError> {
        let key = match &self.key {
            DeliveryKey::Header(name) => headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "no delivery key: webhook `{}` takes it from the `{name}` header, \
                         so that a retried delivery starts no second run",
                        self.name
                    ))
                })?,
            DeliveryKey::Field(pointer) => match body.pointer(pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "no delivery key: webhook `{}` takes it from the body's field \
                         `{pointer}`, a string or a number",
                        self.name
                    )));
                }
            },
        };
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS || key.chars().any(char::is_control) {
            return Err(ApiError::bad_request(format!(
                "a delivery key has 1 to {MAX_KEY_CHARS} characters and no control \
                 characters; this one has {chars}"
            )));
        }
        Ok(key)
    }
}

/// The webhooks of a server, by name.
#[derive(Clone, Default)]
pub(crate) struct Webhooks(pub(crate) BTreeMap<String, Webhook>);

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.values()).finish()
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/webhooks/{name}", post(deliver))
}

/// A signed webhook's deliveries pass to their handler, which checks the signature; every
/// other request here is an API write, checked for the token as every write is.
pub(crate) async fn check_auth(
    State((auth, hooks)): State<(Arc<Auth>, Webhooks)>,
    request: Request,
    next: Next,
) -> Response {
    let name = request.uri().path().rsplit('/').next().unwrap_or_default();
    if hooks.0.get(name).is_some_and(Webhook::is_signed) {
        return next.run(request).await;
    }
    crate::auth::check(State(auth), request, next).await
}

/// A delivery's outcome: a run started, or a signal sent.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Delivered {
    /// A starting webhook's.
    Started {
        /// Whether this delivery started the run (`false`: an earlier delivery with the
        /// same key did).
        created: bool,
        /// The run.
        run: Box<RunRecord>,
    },
    /// A signalling webhook's.
    Signalled {
        /// Whether this delivery stored the signal (`false`: an earlier delivery with the
        /// same key did).
        created: bool,
        /// The run signalled.
        run_id: String,
        /// The signal's id.
        signal_id: i64,
    },
}

/// Start a run from a webhook delivery, or signal one, once per delivery key.
#[utoipa::path(post, path = "/v1/webhooks/{name}", tag = "operate",
    params(
        ("name" = String, Path, description = "The webhook's name"),
        ("Idempotency-Key" = Option<String>, Header, description = "The delivery's key, for a webhook that takes it from this header (the default)"),
        ("X-Signature-256" = Option<String>, Header, description = "`sha256=` and the hex HMAC-SHA256 of the body, for a signed webhook"),
    ),
    request_body(content = Value, content_type = "application/json", description = "The initial state, or the data of the webhook's initial state"),
    security((), ("bearer" = [])),
    responses(
        (status = 201, description = "The delivery started a run, or sent a signal", body = Delivered),
        (status = 200, description = "An earlier delivery with this key started the run, or sent the signal", body = Delivered),
        (status = 400, description = "A body that is not JSON, or no valid delivery key", body = ErrorBody),
        (status = 401, description = "No token (an unsigned webhook), or no signature or a wrong one (a signed webhook)", body = ErrorBody),
        (status = 403, description = "A wrong token", body = ErrorBody),
        (status = 404, description = "No webhook of that name, or no run of the id a signalling webhook's body names", body = ErrorBody),
        (status = 409, description = "A delivery with this key started a run with another body, or the run to signal has ended", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 422, description = "A body that is not an initial state of the agent, a body without the run's id or the payload's field, or a signal the run does not wait for or whose payload is not the declared type", body = ErrorBody),
    ))]
pub(crate) async fn deliver(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Delivered>), ApiError> {
    let Some(hook) = app.webhooks.0.get(&name) else {
        return Err(ApiError::not_found(format!("no webhook named `{name}`")));
    };
    hook.check_signature(&headers, &body)?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let key = hook.delivery_key(&headers, &body)?;
    match &hook.action {
        Action::Start { starter, state } => {
            start(hook, starter.as_ref(), state.as_deref(), &app, body, key).await
        }
        Action::Signal {
            signaller,
            signal,
            run_field,
            payload_field,
        } => {
            let key = hook.signal_key(&key);
            let run_id = body
                .pointer(run_field)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "webhook `{}` reads the run to signal from the body's field \
                         `{run_field}`, a string; this body has none",
                        hook.name
                    ))
                })?;
            let payload = match payload_field {
                None => body,
                Some(field) => body.pointer(field).cloned().ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "webhook `{}` reads the signal's payload from the body's field \
                         `{field}`; this body has none",
                        hook.name
                    ))
                })?,
            };
            let sent = signaller
                .signal_json(run_id.clone(), signal.clone(), payload, key)
                .await
                .map_err(|e| match e {
                    RunnerError::Store(StoreError::NotFound(_)) => {
                        ApiError::not_found(format!("no run `{run_id}` to signal"))
                    }
                    RunnerError::Store(e) => ApiError::from(e),
                    RunnerError::SignalRefused(refused) => crate::runs::signal_refusal(&refused),
                    RunnerError::Seal(e) => ApiError::bad_request(e.to_string()),
                    RunnerError::PayloadTooLarge(why) => ApiError::unprocessable(why),
                    e => ApiError::internal(e.to_string()),
                })?;
            let status = if sent.duplicate {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((
                status,
                Json(Delivered::Signalled {
                    created: !sent.duplicate,
                    run_id,
                    signal_id: sent.id,
                }),
            ))
        }
    }
}

impl Webhook {
    /// The key a signal of the delivery with key `key` is stored under: the webhook's name
    /// and the key, or a hash of the key when that would not fit the store's bound.
    fn signal_key(&self, key: &str) -> String {
        let plain = format!("webhook:{}:{key}", self.name);
        if plain.len() <= MAX_SIGNAL_KEY_BYTES {
            return plain;
        }
        format!(
            "webhook:{}:sha256:{}",
            self.name,
            hex::encode(Sha256::digest(key.as_bytes()))
        )
    }
}

/// Start a run of `starter`'s agent from a delivery, once per delivery key.
async fn start(
    hook: &Webhook,
    starter: &dyn JsonStarter,
    state: Option<&str>,
    app: &AppState,
    body: Value,
    key: String,
) -> Result<(StatusCode, Json<Delivered>), ApiError> {
    let id = format!("{}-{key}", hook.name);
    let existed = app.store.load_run(&id).await?.is_some();
    let state = match state {
        Some(state) => serde_json::json!({ state: body }),
        None => body,
    };
    let labels = Labels::from([
        (WEBHOOK_LABEL.to_owned(), hook.name.clone()),
        (DELIVERY_LABEL.to_owned(), key),
    ]);
    let run = starter
        .start_json(id, state, labels)
        .await
        .map_err(|e| match e {
            StartError::NotAnInitialState(message) => ApiError::unprocessable(message),
            StartError::Runner(RunnerError::Store(e)) => ApiError::from(e),
            // A state the runner would not store (`RunnerConfig::max_payload_bytes`).
            StartError::Runner(RunnerError::PayloadTooLarge(why)) => ApiError::unprocessable(why),
            StartError::Runner(e) => ApiError::internal(e.to_string()),
        })?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(Delivered::Started {
            created: !existed,
            run: Box::new(run),
        }),
    ))
}
