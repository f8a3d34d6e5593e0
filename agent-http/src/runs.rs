//! Runs: list, read (with history, journal, pending signals and state at a version),
//! signal, drop a pending signal, cancel, terminate, retry, fork.

use agent_core::signals::SignalRefusal;
use agent_core::store::operator::{Requeue, RequeueMode, plan_requeue};
use agent_core::store::{
    JournalEntry, Labels, Millis, OperatorNote, RunFilter, RunRecord, RunStatus, SignalRecord,
    StateAtVersion, TransitionRecord,
};
use axum::Router;
use axum::extract::State;
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path, Query};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/runs", get(list_runs))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/history", get(history))
        .route("/v1/runs/{id}/journal", get(journal))
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
/// The most runs of one millisecond a cursor may say earlier pages listed.
const MAX_SEEN_IN_ONE_MS: usize = 100 * MAX_PAGE;

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
    /// The `next` of the previous page.
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

/// Where a page of runs ends: the creation time of its last run, and how many runs
/// created at that same millisecond were listed so far (runs are listed newest first,
/// those of one millisecond in a stable order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageCursor {
    created_at: Millis,
    seen_at_that_time: usize,
}

impl PageCursor {
    fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::bad_request(format!("not a cursor of this API: `{s}`"));
        let (at, seen) = s.split_once('.').ok_or_else(bad)?;
        let cursor = Self {
            created_at: at.parse().map_err(|_| bad())?,
            seen_at_that_time: seen.parse().map_err(|_| bad())?,
        };
        // What a page reads is bounded by the page and by the runs of one millisecond the
        // cursor skips; a cursor claiming more than any page could have seen is not ours.
        if cursor.seen_at_that_time > MAX_SEEN_IN_ONE_MS {
            return Err(bad());
        }
        Ok(cursor)
    }

    fn render(self) -> String {
        format!("{}.{}", self.created_at, self.seen_at_that_time)
    }
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
    list_page(&app, q).await.map(Json)
}

/// A page of runs (what `GET /v1/runs` answers; the inspector's runs page shows it).
pub(crate) async fn list_page(app: &AppState, q: ListQuery) -> Result<RunPage, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    let cursor = q.cursor.as_deref().map(PageCursor::parse).transpose()?;
    let skip = cursor.map_or(0, |c| c.seen_at_that_time);
    let mut created_before = q.created_before;
    if let Some(c) = cursor {
        let through = c.created_at.saturating_add(1);
        created_before = Some(created_before.map_or(through, |b| b.min(through)));
    }
    let filter = RunFilter {
        agent: q.agent,
        statuses: parse_statuses(q.status.as_deref())?,
        // One more than the page, to know whether another follows.
        limit: Some(skip + limit + 1),
        labels: parse_labels(q.label.as_deref())?,
        spawned_by: q.parent,
        created_after: q.created_after,
        created_before,
        agent_version: q.agent_version,
        fingerprint: None,
    };
    let listed = app.store.list_runs(&filter).await?;
    let mut runs: Vec<RunRecord> = match cursor {
        // Leave out the runs of the cursor's millisecond the earlier pages listed.
        Some(c) => {
            let mut left = c.seen_at_that_time;
            listed
                .into_iter()
                .filter(|r| {
                    if left > 0 && r.created_at == c.created_at {
                        left -= 1;
                        false
                    } else {
                        true
                    }
                })
                .collect()
        }
        None => listed,
    };
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = match runs.last() {
        Some(last) if more => {
            let on_page = runs
                .iter()
                .filter(|r| r.created_at == last.created_at)
                .count();
            let before = cursor
                .filter(|c| c.created_at == last.created_at)
                .map_or(0, |c| c.seen_at_that_time);
            Some(
                PageCursor {
                    created_at: last.created_at,
                    seen_at_that_time: before + on_page,
                }
                .render(),
            )
        }
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

/// Every committed transition of a run, by version.
#[utoipa::path(get, path = "/v1/runs/{id}/history", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses(
        (status = 200, description = "The transitions", body = Vec<TransitionRecord>),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn history(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<TransitionRecord>>, ApiError> {
    Ok(Json(app.store.history(&id).await?))
}

/// Which journal entries.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct JournalQuery {
    /// Only the calls of the step that started from this version.
    #[param(minimum = 0)]
    version: Option<u64>,
}

/// A run's journal: its tool calls, decisions, compensations and child starts, by version
/// and index (secrets were redacted before they were stored).
#[utoipa::path(get, path = "/v1/runs/{id}/journal", tag = "runs",
    params(("id" = String, Path, description = "The run"), JournalQuery),
    responses(
        (status = 200, description = "The journal", body = Vec<JournalEntry>),
        (status = 400, description = "A version that is not a number", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn journal(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<JournalQuery>,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    load(&app, &id).await?;
    Ok(Json(app.store.journal(&id, q.version).await?))
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
    #[schema(min_length = 1, max_length = 200)]
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
}

/// Send a signal to a run; it is kept until a step that waits for it consumes it.
#[utoipa::path(post, path = "/v1/runs/{id}/signals", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = SignalBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Sent", body = SignalSent),
        (status = 400, description = "A body that is not JSON, a name that is empty or too long, a payload holding a secret the server has no key to seal", body = ErrorBody),
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
    Json(body): Json<SignalBody>,
) -> Result<Json<SignalSent>, ApiError> {
    // Stored as a runner would store it: its secret parts sealed (the run's graph says
    // which fields its payload type marks).
    let mut payload = body.payload;
    // Kept until a state consumes it: one nothing will consume, or whose payload the state
    // that consumes it could not read, is refused by the check every sender shares.
    let run = load(&app, &id).await?;
    let graph = app
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    agent_core::signals::check_signal(&run, graph.as_ref(), &body.name, &payload).map_err(
        |refused| match refused {
            SignalRefusal::BadName { .. } => ApiError::bad_request(refused.to_string()),
            SignalRefusal::RunEnded { .. } => ApiError::conflict(refused.to_string()),
            SignalRefusal::NotWaitedFor { .. } | SignalRefusal::BadPayload { .. } => {
                ApiError::unprocessable(refused.to_string())
            }
        },
    )?;
    agent_core::secrets::seal_signal_payload(
        &mut payload,
        graph.as_ref(),
        &body.name,
        &app.seal_keys,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let id = app.store.send_signal(&id, &body.name, &payload).await?;
    Ok(Json(SignalSent { id }))
}

/// Who asks for an operator's action, and why.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorBody {
    /// Who (recorded with the transition).
    #[serde(default)]
    #[schema(max_length = 200)]
    by: Option<String>,
    /// Why.
    #[serde(default)]
    #[schema(max_length = 2000)]
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
    request_body = OperatorBody,
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
    body: Option<Json<OperatorBody>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.map(|Json(b)| b).unwrap_or_default().note()?;
    Ok(Json(app.store.cancel_run(&id, &note).await?))
}

/// Terminate a run: it stops at once, nothing compensated, in a `terminate` transition with
/// who and why. A worker holding it is fenced out. This also closes out a failed,
/// quarantined or dead-lettered run.
#[utoipa::path(post, path = "/v1/runs/{id}/terminate", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = OperatorBody,
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
    body: Option<Json<OperatorBody>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.map(|Json(b)| b).unwrap_or_default().note()?;
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
    request_body = OperatorBody,
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
    body: Option<Json<OperatorBody>>,
) -> Result<Json<RunRecord>, ApiError> {
    let note = body.map(|Json(b)| b).unwrap_or_default().note()?;
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
    version: u64,
    /// The new run's id (1 to 200 characters); `{id}.fork-v{version}` when absent, so that
    /// sending the same request twice forks once.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
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
    use super::PageCursor;

    #[test]
    fn page_cursors_read_back_and_refuse_garbage() {
        let c = PageCursor {
            created_at: 1_700_000_000_123,
            seen_at_that_time: 3,
        };
        assert_eq!(PageCursor::parse(&c.render()).unwrap(), c);
        for bad in ["", "12", "a.b", "12.-1", "1.2.3"] {
            assert!(PageCursor::parse(bad).is_err(), "{bad}");
        }
    }
}
