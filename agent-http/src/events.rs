//! Events: pages of JSON, and live streams of server-sent events that resume from
//! `Last-Event-ID` (each event's id is its cursor), read through a
//! [`Follower`](agent_core::events::Follower), so a client that reconnects misses nothing.

use std::convert::Infallible;
use std::time::Duration;

use std::sync::Arc;

use agent_core::events::{Ephemeral, EphemeralBus, Follower};
use agent_core::store::{EventCursor, EventKind, EventScope, RunEvent};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path, Query};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/runs/{id}/events", get(run_events))
        .route("/v1/runs/{id}/events/stream", get(run_event_stream))
        .route("/v1/events", get(events))
        .route("/v1/events/stream", get(event_stream))
}

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// Where to read from.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// Events after this cursor (the `cursor` of the last event read); from the start when
    /// absent.
    #[param(minimum = 0)]
    after: Option<u64>,
    /// Events per page (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// Which runs, and where to read from.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ScopeQuery {
    /// Only this agent's runs; every run when absent.
    agent: Option<String>,
    /// Events after this cursor; from the start when absent.
    #[param(minimum = 0)]
    after: Option<u64>,
    /// Events per page (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// Where to stream from, and until when.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamQuery {
    /// Events after this cursor, when there is no `Last-Event-ID` header (which wins).
    #[param(minimum = 0)]
    after: Option<u64>,
    /// End the stream after the run's `run_finished` event (for clients that follow one
    /// run to its end).
    #[serde(default)]
    until_finished: bool,
}

/// Which runs to stream, and from where.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ScopeStreamQuery {
    /// Only this agent's runs; every run when absent.
    agent: Option<String>,
    /// Events after this cursor, when there is no `Last-Event-ID` header (which wins).
    #[param(minimum = 0)]
    after: Option<u64>,
}

/// A page of events, in cursor order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventPage {
    /// The events.
    events: Vec<RunEvent>,
    /// Read after it for the next page: the last event's cursor, or the one asked after
    /// when the page is empty.
    cursor: EventCursor,
}

fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    Ok(limit)
}

async fn page(
    app: &AppState,
    scope: &EventScope,
    after: Option<u64>,
    limit: Option<usize>,
) -> Result<Json<EventPage>, ApiError> {
    let after = EventCursor::from_u64(crate::extract::at_most_i64("after", after)?.unwrap_or(0));
    let events = app.store.events(scope, after, page_limit(limit)?).await?;
    let cursor = events.last().map_or(after, |e| e.cursor);
    Ok(Json(EventPage { events, cursor }))
}

/// A run's events after a cursor, as a page of JSON.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "events",
    params(("id" = String, Path, description = "The run"), PageQuery),
    responses(
        (status = 200, description = "A page of the run's events", body = EventPage),
        (status = 400, description = "A limit out of range, a cursor that is not a number", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn run_events(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Json<EventPage>, ApiError> {
    page(&app, &EventScope::Run(id), q.after, q.limit).await
}

/// Every run's events (or an agent's) after a cursor, as a page of JSON. Within a run in
/// commit order; across runs, in the store's order (see `docs/http-api.md`).
#[utoipa::path(get, path = "/v1/events", tag = "events", params(ScopeQuery),
    responses(
        (status = 200, description = "A page of events", body = EventPage),
        (status = 400, description = "A limit out of range, a cursor that is not a number", body = ErrorBody),
    ))]
pub(crate) async fn events(
    State(app): State<AppState>,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<EventPage>, ApiError> {
    let scope = q.agent.map_or(EventScope::All, EventScope::Agent);
    page(&app, &scope, q.after, q.limit).await
}

/// The cursor to stream after: `Last-Event-ID` if present, else `after`.
fn resume_point(headers: &HeaderMap, after: Option<u64>) -> Result<EventCursor, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not a cursor of this API")),
        None => Ok(EventCursor::from_u64(
            crate::extract::at_most_i64("after", after)?.unwrap_or(0),
        )),
    }
}

/// One event as SSE: its cursor as id, its type as event name, the event as JSON data.
fn sse_event(e: &RunEvent) -> Event {
    let kind = serde_json::to_value(&e.kind)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "event".to_owned());
    Event::default()
        .id(e.cursor.to_string())
        .event(kind)
        .json_data(e)
        .unwrap_or_else(|_| Event::default().comment("an event did not serialize"))
}

fn stream_of(
    follower: Follower,
    until_finished: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    // Ends right after the last event to send, without waiting for another.
    futures::stream::unfold(Some(follower), move |follower| async move {
        let mut follower = follower?;
        match follower.next().await {
            Ok(e) => {
                let last = until_finished && matches!(e.kind, EventKind::RunFinished { .. });
                Some((Ok(sse_event(&e)), (!last).then_some(follower)))
            }
            // The store is away: say so and end; the client reconnects with its
            // Last-Event-ID and misses nothing.
            Err(err) => Some((
                Ok(Event::default().event("error").data(err.to_string())),
                None,
            )),
        }
    })
}

/// A run's events as server-sent events, live: what is stored after the cursor, then each
/// event as it is committed. Resume with `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/runs/{id}/events/stream", tag = "events",
    params(("id" = String, Path, description = "The run"), StreamQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received")),
    responses(
        (status = 200, description = "`text/event-stream`: one event per SSE message, its id the cursor, its name the event's type, its data the event as JSON; on a server given the runner's bus, also `token` messages (ephemeral deltas, without an id)", content_type = "text/event-stream", body = String),
        (status = 400, description = "A Last-Event-ID or `after` that is not a cursor", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 503, description = "As many event streams open as the server allows (`Retry-After`)", body = ErrorBody),
    ))]
pub(crate) async fn run_event_stream(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let after = resume_point(&headers, q.after)?;
    let permit = stream_permit(&app)?;
    if app.store.load_run(&id).await?.is_none() {
        return Err(ApiError::not_found(format!("run `{id}` not found")));
    }
    // Subscribe before the first read, so that no delta published after it is missed.
    let tokens = app.ephemeral.as_ref().map(EphemeralBus::subscribe);
    let follower = app.hub.follower(EventScope::Run(id.clone()), after);
    let durable = stream_of(follower, q.until_finished);
    let stream = match tokens {
        None => durable.left_stream(),
        Some(rx) => with_tokens(durable, rx, id).right_stream(),
    };
    Ok(Sse::new(holding(stream, permit)).keep_alive(keep_alive()))
}

/// A permit to keep one more event stream open, or `503` with `Retry-After`.
pub(crate) fn stream_permit(app: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    Arc::clone(&app.streams).try_acquire_owned().map_err(|_| {
        ApiError::busy(
            "the server keeps as many event streams open as it allows; try again shortly",
            5,
        )
    })
}

/// `stream`, holding `permit` until it ends or its client goes away, and counted among
/// the open streams ([`EVENT_FOLLOWERS`](agent_core::metrics::EVENT_FOLLOWERS)) as long.
fn holding<S: Stream>(
    stream: S,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = S::Item> {
    let counted = agent_core::metrics::Follower::open("sse");
    stream.map(move |item| {
        let _held = (&permit, &counted);
        item
    })
}

/// The durable events, and the run's token deltas as they come, interleaved; ends when the
/// durable events end (`until_finished`). Deltas a slow client missed are dropped (their
/// `seq` shows the gap); the durable events never are.
fn with_tokens(
    durable: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    rx: broadcast::Receiver<Arc<Ephemeral>>,
    run_id: String,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let tokens = futures::stream::unfold(rx, move |mut rx| {
        let run_id = run_id.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(e) if e.run_id == run_id => return Some((Some(token_event(&e)), rx)),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    // The durable stream's end is marked with `None`, which ends the merged stream.
    let durable = durable
        .map(|Ok(e)| Some(e))
        .chain(futures::stream::once(std::future::ready(None)));
    futures::stream::select(durable, tokens)
        .scan((), |(), item| std::future::ready(item))
        .map(Ok)
}

/// A token delta as SSE: named `token`, without an id (`Last-Event-ID` only ever names a
/// durable event), the delta as JSON data.
fn token_event(e: &Ephemeral) -> Event {
    Event::default()
        .event("token")
        .json_data(e)
        .unwrap_or_else(|_| Event::default().comment("a delta did not serialize"))
}

/// Every run's events (or an agent's) as server-sent events, live. Resume with
/// `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events",
    params(ScopeStreamQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received")),
    responses(
        (status = 200, description = "`text/event-stream`, as for one run", content_type = "text/event-stream", body = String),
        (status = 400, description = "A Last-Event-ID or `after` that is not a cursor", body = ErrorBody),
        (status = 503, description = "As many event streams open as the server allows (`Retry-After`)", body = ErrorBody),
    ))]
pub(crate) async fn event_stream(
    State(app): State<AppState>,
    Query(q): Query<ScopeStreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let after = resume_point(&headers, q.after)?;
    let permit = stream_permit(&app)?;
    let scope = q.agent.map_or(EventScope::All, EventScope::Agent);
    let follower = app.hub.follower(scope, after);
    Ok(Sse::new(holding(stream_of(follower, false), permit)).keep_alive(keep_alive()))
}

fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(Duration::from_secs(15))
}
