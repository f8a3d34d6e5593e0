//! Runs: list, read (with history, journal, pending signals and state at a version),
//! signal, drop a pending signal, cancel, terminate, retry, fork.

use agent_core::signals::SignalRefusal;
use agent_core::store::export::RunExport;
use agent_core::store::operator::{Requeue, RequeueMode, plan_requeue};
use agent_core::store::{
    HistoryStore, JournalEntry, Labels, Millis, OperatorNote, RunFilter, RunKey, RunRecord,
    RunStatus, SignalReceipt, SignalRecord, StateAtVersion, TransitionRecord, check_signal_key,
};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path, Query, at_most_i32, at_most_i64};
use crate::webhooks::IDEMPOTENCY_KEY;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/runs", get(list_runs))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/history", get(history))
        .route("/v1/runs/{id}/journal", get(journal))
        .route("/v1/runs/{id}/export", get(export))
        .route("/v1/runs/{id}/state/{version}", get(state_at))
        .route(
            "/v1/runs/{id}/signals",
            get(pending_signals).post(send_signal),
        )
        .route("/v1/runs/{id}/signals/{signal}", delete(drop_signal))
        .route("/v1/runs/{id}/cancel", post(cancel))
        .route("/v1/runs/{id}/terminate", post(terminate))
        .route("/v1/runs/{id}/retry", post(retry))
        .route("/v1/runs/{id}/fork", post(fork))
}

/// Runs per page when the request does not say, and at most.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;
/// The longest id a run has (the id a cursor carries is one).
const MAX_ID_CHARS: usize = 200;

/// Which runs to list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only this agent's runs.
    pub(crate) agent: Option<String>,
    /// Only runs in these statuses, comma-separated (`running,waiting`).
    pub(crate) status: Option<String>,
    /// Only runs carrying every one of these labels, comma-separated `key=value` pairs.
    pub(crate) label: Option<String>,
    /// Only the children of this run.
    pub(crate) parent: Option<String>,
    /// Only runs created at or after this time (milliseconds since the epoch).
    pub(crate) created_after: Option<Millis>,
    /// Only runs created before this time (milliseconds since the epoch).
    pub(crate) created_before: Option<Millis>,
    /// Only runs on this version of their agent.
    pub(crate) agent_version: Option<u32>,
    /// Runs per page (default 50, at most 500).
    #[param(minimum = 1, maximum = 500)]
    pub(crate) limit: Option<usize>,
    /// The `next` of the previous page (opaque).
    pub(crate) cursor: Option<String>,
}

/// A page of runs, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunPage {
    /// The runs.
    pub(crate) runs: Vec<RunRecord>,
    /// Give it as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next: Option<String>,
}

/// Where a page of runs ends: the key of its last run ([`RunKey`]), the next page being
/// the runs after it in the listing's order. Written `r1.{created_at}.{id as hex}`: the
/// id's bytes in hex, so that no character of an id can break the cursor's syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageCursor(RunKey);

impl PageCursor {
    fn parse(s: &str) -> Result<Self, ApiError> {
        let shown: String = s.chars().take(60).collect();
        let bad = || ApiError::bad_request(format!("not a cursor of this API: `{shown}`"));
        let mut parts = s.split('.');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("r1"), Some(at), Some(id), None) => {
                // `parse` checks: a time out of an i64's range is refused, not wrapped.
                let created_at: Millis = at.parse().map_err(|_| bad())?;
                if id.is_empty() || id.len() > 2 * 4 * MAX_ID_CHARS {
                    return Err(bad());
                }
                let id = unhex(id).ok_or_else(bad)?;
                if id.chars().count() > MAX_ID_CHARS || id.chars().any(char::is_control) {
                    return Err(bad());
                }
                Ok(Self(RunKey { created_at, id }))
            }
            (Some(at), Some(seen), None, None)
                if at.bytes().all(|b| b.is_ascii_digit())
                    && seen.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Err(ApiError::bad_request(format!(
                    "`{shown}` is a cursor of an earlier version of this API, which counted \
                     the runs of one millisecond; list again from the first page"
                )))
            }
            _ => Err(bad()),
        }
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("r1.{}.", self.0.created_at);
        for b in self.0.id.as_bytes() {
            let _ = write!(out, "{b:02x}");
        }
        out
    }
}

/// The text whose UTF-8 bytes `hex` spells (lowercase or uppercase), if it is any.
fn unhex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |c: u8| char::from(c).to_digit(16);
            u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

fn parse_statuses(list: Option<&str>) -> Result<Vec<RunStatus>, ApiError> {
    list.into_iter()
        .flat_map(|l| l.split(','))
        .filter(|s| !s.is_empty())
        .map(|s| {
            RunStatus::parse(s.trim()).ok_or_else(|| {
                let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::bad_request(format!("unknown status `{s}`; one of {}", known.join(", ")))
            })
        })
        .collect()
}

fn parse_labels(list: Option<&str>) -> Result<Labels, ApiError> {
    list.into_iter()
        .flat_map(|l| l.split(','))
        .filter(|s| !s.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("a label is `key=value`, not `{pair}`"))
                })
        })
        .collect()
}

/// List runs, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListQuery),
    responses(
        (status = 200, description = "A page of runs", body = RunPage),
        (status = 400, description = "A filter or cursor that does not parse", body = ErrorBody),
    ))]
pub(crate) async fn list_runs(
    State(app): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    list_page(app.store.as_ref(), q).await.map(Json)
}

/// A page of runs (what `GET /v1/runs` answers; the inspector's runs page shows it). It
/// reads at most `limit + 1` runs from the store, whatever the cursor: the cursor is the
/// last run's key, and the store seeks to it.
pub(crate) async fn list_page(store: &dyn HistoryStore, q: ListQuery) -> Result<RunPage, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    let cursor = q.cursor.as_deref().map(PageCursor::parse).transpose()?;
    let filter = RunFilter {
        agent: q.agent,
        statuses: parse_statuses(q.status.as_deref())?,
        // One more than the page, to know whether another follows.
        limit: Some(limit + 1),
        after: cursor.map(|c| c.0),
        labels: parse_labels(q.label.as_deref())?,
        spawned_by: q.parent,
        created_after: q.created_after,
        created_before: q.created_before,
        agent_version: at_most_i32("agent_version", q.agent_version)?,
        fingerprint: None,
    };
    let mut runs = store.list_runs(&filter).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = match runs.last() {
        Some(last) if more => Some(PageCursor(RunKey::of(last)).render()),
        _ => None,
    };
    Ok(RunPage { runs, next })
}

async fn load(app: &AppState, id: &str) -> Result<RunRecord, ApiError> {
    app.store
        .load_run(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))
}

/// One run, as stored now.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses(
        (status = 200, description = "The run", body = RunRecord),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn get_run(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RunRecord>, ApiError> {
    load(&app, &id).await.map(Json)
}

/// Transitions or journal entries per page when the request does not say, and at most.
const DEFAULT_RECORDS: usize = 100;
const MAX_RECORDS: usize = 1000;

fn records_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_RECORDS);
    if limit == 0 || limit > MAX_RECORDS {
        return Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_RECORDS}, not {limit}"
        )));
    }
    Ok(limit)
}

/// Which transitions.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryQuery {
    /// From this version on (0 when absent); the next page is from the last version read
    /// plus one.
    #[param(minimum = 0)]
    from: Option<u64>,
    /// Transitions per page (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// A run's committed transitions, by version, a page at a time: at most `limit` from
/// version `from` on (a page shorter than `limit` is the last).
#[utoipa::path(get, path = "/v1/runs/{id}/history", tag = "runs",
    params(("id" = String, Path, description = "The run"), HistoryQuery),
    responses(
        (status = 200, description = "The transitions", body = Vec<TransitionRecord>),
        (status = 400, description = "A version or limit that is not a number in range", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn history(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Vec<TransitionRecord>>, ApiError> {
    let limit = records_limit(q.limit)?;
    let from = at_most_i64("from", q.from)?.unwrap_or(0);
    Ok(Json(app.store.history_from(&id, from, limit).await?))
}

/// A whole run as one document to download ([`RunExport`]): its record, its agent's graph,
/// every committed transition, its whole journal and its pending signals, as stored (sealed
/// values stay sealed). Not a page: it is read whole, so exports share the limit on open
/// event streams (`503` with `Retry-After` when the server has as many as it allows).
#[utoipa::path(get, path = "/v1/runs/{id}/export", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses(
        (status = 200, description = "The run, whole", body = RunExport,
            headers(("Content-Disposition" = String, description = "`attachment; filename=\"run-ID.json\"`"))),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 503, description = "As many exports and streams as the server allows are open", body = ErrorBody),
    ))]
pub(crate) async fn export(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let _permit = crate::events::stream_permit(&app)?;
    let export = agent_core::store::export::export_run(app.store.as_ref(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))?;
    Ok((
        [(
            axum::http::header::CONTENT_DISPOSITION,
            attachment_name(&id),
        )],
        Json(export),
    ))
}

/// `attachment; filename="run-ID.json"`, the id's characters that a file name or the header
/// cannot hold replaced by `_`.
pub(crate) fn attachment_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("attachment; filename=\"run-{safe}.json\"")
}

/// Which journal entries.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct JournalQuery {
    /// Only the calls of the step that started from this version.
    #[param(minimum = 0)]
    version: Option<u64>,
    /// From the entries of this version on (0 when absent; with `version`, the later of
    /// the two).
    #[param(minimum = 0)]
    from_version: Option<u64>,
    /// From this index in the first version on (0 when absent): the next page is from the
    /// last entry's `version` and `seq` plus one.
    #[param(minimum = 0)]
    from_seq: Option<u32>,
    /// Entries per page (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// A run's journal: its tool calls, decisions, compensations and child starts, by version
/// and index (secrets were redacted before they were stored), a page at a time: at most
/// `limit` entries from (`from_version`, `from_seq`) on (a page shorter than `limit` is
/// the last).
#[utoipa::path(get, path = "/v1/runs/{id}/journal", tag = "runs",
    params(("id" = String, Path, description = "The run"), JournalQuery),
    responses(
        (status = 200, description = "The journal", body = Vec<JournalEntry>),
        (status = 400, description = "A version, index or limit that is not a number in range; `version` with another `from_version`", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn journal(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<JournalQuery>,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    let limit = records_limit(q.limit)?;
    let version = at_most_i64("version", q.version)?;
    let from = (
        at_most_i64("from_version", q.from_version)?.unwrap_or(0),
        at_most_i32("from_seq", q.from_seq)?.unwrap_or(0),
    );
    // With `version`, that step's entries from `from` on: the page starts at the later of
    // the two, and whatever it read of later steps is left out.
    let from = version.map_or(from, |v| from.max((v, 0)));
    let mut entries = app.store.journal_from(&id, from, limit).await?;
    if let Some(v) = version {
        entries.retain(|e| e.version == v);
    }
    Ok(Json(entries))
}

/// A run's state at a version (time travel).
#[utoipa::path(get, path = "/v1/runs/{id}/state/{version}", tag = "runs",
    params(
        ("id" = String, Path, description = "The run"),
        ("version" = u64, Path, minimum = 0, description = "The version"),
    ),
    responses(
        (status = 200, description = "The state", body = StateAtVersion),
        (status = 400, description = "A version that is not a number", body = ErrorBody),
        (status = 404, description = "No such run or version (or it was pruned)", body = ErrorBody),
    ))]
pub(crate) async fn state_at(
    State(app): State<AppState>,
    Path((id, version)): Path<(String, u64)>,
) -> Result<Json<StateAtVersion>, ApiError> {
    at_most_i64("version", Some(version))?;
    app.store
        .state_at(&id, version)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("run `{id}` has no version {version}")))
}

/// A signal to send.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignalBody {
    /// The signal's name (what the run waits for).
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\u0000]*$")]
    name: String,
    /// Its payload.
    #[serde(default)]
    payload: Value,
}

/// The id of a signal sent.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SignalSent {
    /// Store-assigned, increasing.
    id: i64,
    /// Whether a signal had been sent under the request's `Idempotency-Key` before: it is
    /// the one named, and nothing was stored now (always `false` without a key).
    duplicate: bool,
}

/// Send a signal to a run; it is kept until a step that waits for it consumes it.
#[utoipa::path(post, path = "/v1/runs/{id}/signals", tag = "operate",
    params(
        ("id" = String, Path, description = "The run"),
        ("Idempotency-Key" = Option<String>, Header, description = "Sends the signal once per run and key (1 to 200 bytes): a retry with the key stores nothing and names the first signal"),
    ),
    request_body = SignalBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Sent", body = SignalSent),
        (status = 400, description = "A body that is not JSON, a name that is empty or too long, a string holding a NUL, a payload holding a secret the server has no key to seal, an `Idempotency-Key` that is empty, over 200 bytes or not text", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "A run that has ended: no state will consume the signal", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape, a signal no state of the run's agent waits for, or a payload that is not the type the waiting state declared", body = ErrorBody),
    ))]
pub(crate) async fn send_signal(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<SignalBody>,
) -> Result<Json<SignalSent>, ApiError> {
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| {
            ApiError::bad_request("the `Idempotency-Key` header is not visible ASCII text")
        })?),
    };
    let receipt = signal_run(&app, &id, &body.name, body.payload, key).await?;
    Ok(Json(SignalSent {
        id: receipt.id,
        duplicate: receipt.duplicate,
    }))
}

/// Send signal `name` to run `id`, as every sender of the API does (a `POST`, a
/// WebSocket's message, a webhook): checked, its secret parts sealed, then stored; once
/// per dedup `key` when there is one (a retry of a key already stored is answered with
/// the first signal, unchecked: the run may have consumed it and moved on).
pub(crate) async fn signal_run(
    app: &AppState,
    id: &str,
    name: &str,
    mut payload: Value,
    key: Option<&str>,
) -> Result<SignalReceipt, ApiError> {
    if let Some(key) = key {
        check_signal_key(key).map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some(first) = app.store.signal_by_key(id, key).await? {
            return Ok(SignalReceipt {
                id: first,
                duplicate: true,
            });
        }
    }
    // Kept until a state consumes it: one nothing will consume, or whose payload the state
    // that consumes it could not read, is refused by the check every sender shares.
    let run = load(app, id).await?;
    // The request's span links to the run it wakes (its trace is the run's, not this
    // request's).
    agent_core::trace::link_to_run(&tracing::Span::current(), &run);
    let graph = app
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    agent_core::signals::check_signal(&run, graph.as_ref(), name, &payload)
        .map_err(|refused| signal_refusal(&refused))?;
    // Stored as a runner would store it: its secret parts sealed (the run's graph says
    // which fields its payload type marks).
    agent_core::secrets::seal_signal_payload(&mut payload, graph.as_ref(), name, &app.seal_keys)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(match key {
        Some(key) => app.store.send_signal_once(id, name, &payload, key).await?,
        None => SignalReceipt {
            id: app.store.send_signal(id, name, &payload).await?,
            duplicate: false,
        },
    })
}

/// The API's answer to a signal the run refuses.
pub(crate) fn signal_refusal(refused: &SignalRefusal) -> ApiError {
    match refused {
        SignalRefusal::BadName { .. } => ApiError::bad_request(refused.to_string()),
        SignalRefusal::RunEnded { .. } => ApiError::conflict(refused.to_string()),
        SignalRefusal::NotWaitedFor { .. } | SignalRefusal::BadPayload { .. } => {
            ApiError::unprocessable(refused.to_string())
        }
    }
}

/// Who asks for an operator's action, and why. The body is optional, and may be `null`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorBody {
    /// Who (recorded with the transition).
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000]*$")]
    by: Option<String>,
    /// Why.
    #[serde(default)]
    #[schema(max_length = 2000, pattern = "^[^\\u0000]*$")]
    reason: Option<String>,
}

impl OperatorBody {
    fn note(self) -> Result<OperatorNote, ApiError> {
        let by = self.by.unwrap_or_else(|| "http".to_owned());
        let reason = self.reason.unwrap_or_default();
        if by.chars().count() > 200 || reason.chars().count() > 2000 {
            return Err(ApiError::bad_request(
                "`by` has at most 200 characters, `reason` at most 2000",
            ));
        }
        Ok(OperatorNote::new(by, reason))
    }
}

/// Cancel a run: its saga's compensations run and it ends cancelled. A run a worker holds
/// gets the request, which the worker turns into the cancel at its next commit.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = Option<OperatorBody>,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Cancelled, compensating, or the cancel requested", body = RunRecord),
        (status = 400, description = "A body that is not JSON, a `by` or `reason` too long", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "The run ended otherwise", body = ErrorBody),
    ))]
pub(crate) async fn cancel(
    State(app): State<AppState>,
    Path(id): Path<String>,
    body: Option<Json<Option<OperatorBody>>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.and_then(|Json(b)| b).unwrap_or_default().note()?;
    Ok(Json(app.store.cancel_run(&id, &note).await?))
}

/// Terminate a run: it stops at once, nothing compensated, in a `terminate` transition with
/// who and why. A worker holding it is fenced out. This also closes out a failed,
/// quarantined or dead-lettered run.
#[utoipa::path(post, path = "/v1/runs/{id}/terminate", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = Option<OperatorBody>,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Terminated (or terminated already)", body = RunRecord),
        (status = 400, description = "A body that is not JSON, a `by` or `reason` too long", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "The run completed, was compensated or was cancelled", body = ErrorBody),
    ))]
pub(crate) async fn terminate(
    State(app): State<AppState>,
    Path(id): Path<String>,
    body: Option<Json<Option<OperatorBody>>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.and_then(|Json(b)| b).unwrap_or_default().note()?;
    Ok(Json(app.store.terminate_run(&id, &note).await?))
}

/// The signals of a run that no step consumed yet, oldest first, with their ids.
#[utoipa::path(get, path = "/v1/runs/{id}/signals", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses(
        (status = 200, description = "The pending signals", body = Vec<SignalRecord>),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn pending_signals(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<SignalRecord>>, ApiError> {
    Ok(Json(app.store.pending_signals(&id).await?))
}

/// Drop a pending signal (one no handler accepts), recorded in a `signal_dropped`
/// transition with who and why; the run keeps its state, status and wait. A failed run can
/// then be retried without it.
#[utoipa::path(delete, path = "/v1/runs/{id}/signals/{signal}", tag = "operate",
    params(
        ("id" = String, Path, description = "The run"),
        ("signal" = i64, Path, description = "The pending signal's id"),
    ),
    request_body = Option<OperatorBody>,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Dropped: the run after its `signal_dropped` version", body = RunRecord),
        (status = 400, description = "A body that is not JSON, a `by` or `reason` too long", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run, or no pending signal of that id", body = ErrorBody),
        (status = 409, description = "The run ended, or a worker holds it now", body = ErrorBody),
    ))]
pub(crate) async fn drop_signal(
    State(app): State<AppState>,
    Path((id, signal)): Path<(String, i64)>,
    body: Option<Json<Option<OperatorBody>>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.and_then(|Json(b)| b).unwrap_or_default().note()?;
    Ok(Json(app.store.drop_signal(&id, signal, &note).await?))
}

/// Retry a failed, quarantined or dead-lettered run: it goes back to running (or, when
/// its compensations failed, to compensating) for a worker to pick up.
#[utoipa::path(post, path = "/v1/runs/{id}/retry", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Re-queued, or running already", body = RunRecord),
        (status = 413, description = "A body over the limit (none is read)", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "The run waits or ended: nothing to retry", body = ErrorBody),
    ))]
pub(crate) async fn retry(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RunRecord>, ApiError> {
    let run = load(&app, &id).await?;
    match plan_requeue(&run, RequeueMode::Retry) {
        Ok(Requeue::Already) => Ok(Json(run)),
        Ok(Requeue::To(status, error)) => Ok(Json(app.store.set_status(&id, status, error).await?)),
        Err(refused) => Err(ApiError::conflict(refused.to_string())),
    }
}

/// Where to fork a run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    /// The version whose state the new run starts from.
    #[serde(deserialize_with = "crate::extract::integral")]
    version: u64,
    /// The new run's id (1 to 200 characters); `{id}.fork-v{version}` when absent, so that
    /// sending the same request twice forks once.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
    )]
    new_id: Option<String>,
}

/// Fork a run: a new run, at version 0, from the run's state at a version, for a worker to
/// pick up. The run itself is not changed. Forking is idempotent by the new run's id.
#[utoipa::path(post, path = "/v1/runs/{id}/fork", tag = "operate",
    params(("id" = String, Path, description = "The run to fork")),
    request_body = ForkBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The new run (or the same fork, already made)", body = RunRecord),
        (status = 400, description = "A body that is not JSON, an id that is not valid, a version after the run's", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run, or that version is no longer stored", body = ErrorBody),
        (status = 409, description = "A run of the new id exists with other content", body = ErrorBody),
    ))]
pub(crate) async fn fork(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<ForkBody>,
) -> Result<Json<RunRecord>, ApiError> {
    let run = load(&app, &id).await?;
    if body.version > run.version {
        return Err(ApiError::bad_request(format!(
            "run `{id}` is at version {}; there is no version {} to fork",
            run.version, body.version
        )));
    }
    let new_id = body
        .new_id
        .unwrap_or_else(|| format!("{id}.fork-v{}", body.version));
    let chars = new_id.chars().count();
    if !(1..=200).contains(&chars) || new_id.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "a run's id has 1 to 200 characters and no control character ({chars} given)"
        )));
    }
    Ok(Json(app.store.fork(&id, body.version, &new_id).await?))
}

#[cfg(test)]
mod tests {
    use super::{PageCursor, RunKey, attachment_name};

    #[test]
    fn a_download_is_named_after_the_run_with_nothing_a_header_cannot_hold() {
        assert_eq!(
            attachment_name("order-42@2026"),
            r#"attachment; filename="run-order-42@2026.json""#
        );
        let hostile = attachment_name("a\"b\r\nSet-Cookie: x/é");
        assert_eq!(
            hostile,
            r#"attachment; filename="run-a_b__Set-Cookie__x__.json""#
        );
        assert!(axum::http::HeaderValue::from_str(&hostile).is_ok());
    }

    #[test]
    fn page_cursors_read_back_and_refuse_garbage() {
        for id in ["run-1", "a.b~c/d", "ünïcode ✓", "x"] {
            let c = PageCursor(RunKey {
                created_at: 1_700_000_000_123,
                id: id.to_owned(),
            });
            assert_eq!(PageCursor::parse(&c.render()).unwrap(), c, "{id}");
        }
        let negative = PageCursor(RunKey {
            created_at: -5,
            id: "r".to_owned(),
        });
        assert_eq!(PageCursor::parse(&negative.render()).unwrap(), negative);
        for bad in [
            "",
            "12",
            "a.b",
            "12.-1",
            "1.2.3",
            "r1..72",
            "r1.1.",
            "r1.1.7",
            "r1.1.zz",
            "r1.1.ff",
            "r1.1.00",
            "r1.9223372036854775808.72",
            "r1.-9223372036854775809.72",
            "r1.18446744073709551615.72",
            "r1.1.72.72",
            "r2.1.72",
        ] {
            assert!(PageCursor::parse(bad).is_err(), "{bad}");
        }
        let old = PageCursor::parse("1700000000123.3").unwrap_err();
        assert!(old.to_string().contains("earlier version"), "{old}");
    }
}
