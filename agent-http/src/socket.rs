//! A run over one WebSocket (`GET /v1/runs/{id}/socket`): its events as they are committed,
//! and its signals, for clients that cannot read server-sent events or send a `POST`.
//!
//! The events are the SSE stream's, with its cursor semantics: each message carries its
//! event's cursor, and a client that reconnects with `?after=` its last cursor misses
//! nothing. The upgrade is a read, under the API's rules for reads; a signal is a write and
//! needs the token, presented with the upgrade (`Authorization: Bearer`, or, from a browser,
//! which cannot set that header, the subprotocol `bearer.TOKEN` beside `durable-agents`).
//!
//! Messages, each a JSON text frame:
//! - server → client: `{"type": "event", "event": {...}}` (a [`RunEvent`], its `cursor`
//!   inside); `{"type": "signal_sent", "request": R, "id": N, "duplicate": B}`;
//!   `{"type": "error", "request": R, "error": {"code": ..., "message": ...}}` (`request`
//!   absent for an error of the stream itself, after which the server closes: reconnect
//!   with the last cursor);
//! - client → server: `{"type": "signal", "name": "...", "payload": {...}, "request": R,
//!   "key": K}`, `request` any string the client matches answers by (optional), `key` a
//!   dedup key that sends the signal once per run, as a `POST`'s `Idempotency-Key`
//!   (optional). A signal is checked as `POST /v1/runs/{id}/signals` checks it, with the
//!   same errors.

use std::net::SocketAddr;
use std::time::Duration;

use agent_core::events::Follower;
use agent_core::store::{EventCursor, EventKind, EventScope, RunEvent};
use axum::Router;
use axum::extract::State;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{Extensions, HeaderMap, header};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use utoipa::IntoParams;

use crate::AppState;
use crate::auth::{Attempt, throttled};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Path, Query, at_most_i64};

/// The subprotocol the server speaks, and the prefix of the one carrying a token.
const PROTOCOL: &str = "durable-agents";
const TOKEN_PROTOCOL: &str = "bearer.";
/// How often the server pings an idle socket (proxies close sockets that say nothing).
const PING_EVERY: Duration = Duration::from_secs(15);
/// The largest message a client may send, in bytes (a signal's body, as a `POST`'s).
const MAX_MESSAGE: usize = 64 * 1024;

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/runs/{id}/socket", get(run_socket))
}

/// Where to start, and when to end.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SocketQuery {
    /// Events after this cursor (the last one received); from the start when absent.
    #[param(minimum = 0)]
    after: Option<u64>,
    /// Close after the run's `run_finished` event.
    #[serde(default)]
    until_finished: bool,
}

/// A message from the client.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    /// Send the run a signal.
    Signal {
        name: String,
        #[serde(default)]
        payload: Value,
        #[serde(default)]
        request: Option<String>,
        /// Sends the signal once per run and key, as a `POST`'s `Idempotency-Key`.
        #[serde(default)]
        key: Option<String>,
    },
}

/// A run's events and signals over a WebSocket: see the [module](self).
#[utoipa::path(get, path = "/v1/runs/{id}/socket", tag = "events",
    params(("id" = String, Path, description = "The run"), SocketQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: JSON text messages, events from the server, signals from the client"),
        (status = 400, description = "Not a WebSocket upgrade, or an `after` that is not a cursor", body = ErrorBody),
        (status = 403, description = "A token that is not the server's", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 429, description = "Too many wrong tokens from this client", body = ErrorBody),
        (status = 503, description = "As many event streams open as the server allows (`Retry-After`)", body = ErrorBody),
    ))]
pub(crate) async fn run_socket(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<SocketQuery>,
    headers: HeaderMap,
    extensions: Extensions,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!(
            "`/v1/runs/{{id}}/socket` is a WebSocket: {e} (events over HTTP are at `/v1/runs/{{id}}/events/stream`)"
        ))
    })?;
    let after = EventCursor::from_u64(at_most_i64("after", q.after)?.unwrap_or(0));
    // A token presented must be the server's (throttled as every wrong token is); none
    // makes a socket that reads only.
    let may_signal = match presented_token(&headers) {
        None => false,
        Some(token) => {
            let client = extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip());
            match app.auth.attempt(token, client) {
                Attempt::Accepted => true,
                Attempt::Throttled(secs) => return Err(throttled(secs)),
                Attempt::Refused => {
                    return Err(ApiError::forbidden("the token is not the server's"));
                }
            }
        }
    };
    let permit = crate::events::stream_permit(&app)?;
    if app.store.load_run(&id).await?.is_none() {
        return Err(ApiError::not_found(format!("run `{id}` not found")));
    }
    let follower = app.hub.follower(EventScope::Run(id.clone()), after);
    let session = Session {
        app,
        run: id,
        may_signal,
        until_finished: q.until_finished,
    };
    Ok(upgrade
        .protocols([PROTOCOL])
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| session.serve(socket, follower, permit)))
}

/// The token an upgrade presents: `Authorization: Bearer`, or a `bearer.TOKEN` subprotocol.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    crate::auth::bearer(headers).or_else(|| {
        headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .find_map(|p| p.trim().strip_prefix(TOKEN_PROTOCOL))
    })
}

/// One socket's run, and what it may do.
struct Session {
    app: AppState,
    run: String,
    may_signal: bool,
    until_finished: bool,
}

/// What the socket's loop is told by the task reading the run's events.
enum Fed {
    Event(Box<RunEvent>),
    /// The store failed: the stream ends, and the client reconnects from its cursor.
    Failed(String),
}

impl Session {
    async fn serve(self, mut socket: WebSocket, follower: Follower, permit: OwnedSemaphorePermit) {
        let _held = (permit, agent_core::metrics::Follower::open("websocket"));
        // The follower reads on a task of its own, so that waiting for the next event is
        // never cut short by a client's message (the channel's receive is cancel-safe).
        let (tx, mut events) = mpsc::channel(16);
        let reader = tokio::spawn(follow(follower, tx));
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                fed = events.recv() => {
                    let Some(fed) = fed else { break };
                    match fed {
                        Fed::Event(event) => {
                            let last = self.until_finished
                                && matches!(event.kind, EventKind::RunFinished { .. });
                            let message = json!({"type": "event", "event": event});
                            if send(&mut socket, &message).await.is_err() {
                                break;
                            }
                            if last {
                                let _ = socket.send(Message::Close(None)).await;
                                break;
                            }
                        }
                        Fed::Failed(error) => {
                            let message = json!({"type": "error", "error": {
                                "code": "unavailable", "message": error}});
                            let _ = send(&mut socket, &message).await;
                            break;
                        }
                    }
                }
                received = socket.recv() => match received {
                    Some(Ok(Message::Text(text))) => {
                        let answer = self.answer(text.as_str()).await;
                        if send(&mut socket, &answer).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(Message::Binary(_))) => {
                        let answer = error_message(None, &ApiError::bad_request(
                            "messages are JSON text frames",
                        ));
                        if send(&mut socket, &answer).await.is_err() {
                            break;
                        }
                    }
                    // Pings are answered by the protocol layer; pongs need nothing.
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    None | Some(Ok(Message::Close(_)) | Err(_)) => break,
                },
                _ = ping.tick() => {
                    if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                        break;
                    }
                }
            }
        }
        reader.abort();
    }

    /// The answer to one message from the client.
    async fn answer(&self, text: &str) -> Value {
        let request: Request = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                return error_message(
                    None,
                    &ApiError::bad_request(format!(
                        "not a message of this socket: {e}; send \
                         {{\"type\": \"signal\", \"name\": \"...\", \"payload\": ...}}"
                    )),
                );
            }
        };
        let Request::Signal {
            name,
            payload,
            request,
            key,
        } = request;
        if !self.may_signal {
            let refusal = if self.app.auth.has_token() {
                ApiError::unauthorized(
                    "signals need the token: open the socket with `Authorization: Bearer \
                     TOKEN`, or the subprotocol `bearer.TOKEN`",
                )
            } else {
                ApiError::forbidden(
                    "writes are refused: the server has no token (start it with one)",
                )
            };
            return error_message(request.as_deref(), &refusal);
        }
        match crate::runs::signal_run(&self.app, &self.run, &name, payload, key.as_deref()).await {
            Ok(sent) => json!({
                "type": "signal_sent", "request": request, "id": sent.id, "duplicate": sent.duplicate,
            }),
            Err(e) => error_message(request.as_deref(), &e),
        }
    }
}

async fn follow(mut follower: Follower, tx: mpsc::Sender<Fed>) {
    loop {
        let fed = match follower.next().await {
            Ok(e) => Fed::Event(Box::new(e)),
            Err(e) => Fed::Failed(e.to_string()),
        };
        let failed = matches!(fed, Fed::Failed(_));
        if tx.send(fed).await.is_err() || failed {
            return;
        }
    }
}

fn error_message(request: Option<&str>, e: &ApiError) -> Value {
    json!({"type": "error", "request": request, "error": e.detail()})
}

async fn send(socket: &mut WebSocket, message: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(message.to_string().into())).await
}
