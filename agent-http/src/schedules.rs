//! Schedules over HTTP (`/v1/schedules`): create, list, read, change, delete, pause,
//! resume, trigger and backfill them, through [`agent_core::schedule`]'s verbs, each one
//! compare-and-set write. A schedule of an agent registered on the router
//! ([`ApiConfig::with_agent`](crate::ApiConfig::with_agent)) has its initial state read as
//! the agent's enum; of any other agent, checked by name against its registered graph.
//! Writes need the token, as every write does.

use agent_core::runner::JsonStarter;
use agent_core::schedule::{self, NewSchedule, Schedule, ScheduleError, ScheduleUpdate};
use agent_core::store::{Millis, now_ms};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path, Query};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/schedules", get(list_schedules).post(create_schedule))
        .route(
            "/v1/schedules/{id}",
            get(get_schedule)
                .patch(update_schedule)
                .delete(delete_schedule),
        )
        .route("/v1/schedules/{id}/pause", post(pause_schedule))
        .route("/v1/schedules/{id}/resume", post(resume_schedule))
        .route("/v1/schedules/{id}/trigger", post(trigger_schedule))
        .route("/v1/schedules/{id}/backfill", post(backfill_schedule))
}

/// Which schedules to list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ScheduleQuery {
    /// Only this agent's schedules.
    agent: Option<String>,
}

/// A time range of ticks to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackfillRange {
    /// The range's start, milliseconds since the epoch.
    #[serde(deserialize_with = "crate::extract::integral_i64")]
    from: Millis,
    /// The range's end, included.
    #[serde(deserialize_with = "crate::extract::integral_i64")]
    to: Millis,
}

/// The ticks a backfill asked for.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Backfilled {
    /// How many ticks of the range it asked for (a tick that has its run starts none).
    ticks: usize,
    /// The schedule.
    schedule: Schedule,
}

fn api_error(e: ScheduleError) -> ApiError {
    match e {
        ScheduleError::NotFound(_) => ApiError::not_found(e.to_string()),
        ScheduleError::AlreadyExists(_) => ApiError::conflict(e.to_string()),
        ScheduleError::Invalid(_) => ApiError::bad_request(e.to_string()),
        ScheduleError::Spec(_)
        | ScheduleError::InitialState(_)
        | ScheduleError::UnknownAgent(_)
        | ScheduleError::TooManyTicks => ApiError::unprocessable(e.to_string()),
        ScheduleError::Store(e) => e.into(),
        ScheduleError::Start(e) => ApiError::internal(e.to_string()),
    }
}

fn starter<'a>(app: &'a AppState, agent: &str) -> Option<&'a dyn JsonStarter> {
    app.agents.0.get(agent).map(AsRef::as_ref)
}

/// List schedules, by id.
#[utoipa::path(get, path = "/v1/schedules", tag = "runs", params(ScheduleQuery),
    responses((status = 200, description = "The schedules", body = Vec<Schedule>)))]
pub(crate) async fn list_schedules(
    State(app): State<AppState>,
    Query(q): Query<ScheduleQuery>,
) -> Result<Json<Vec<Schedule>>, ApiError> {
    Ok(Json(app.store.list_schedules(q.agent.as_deref()).await?))
}

/// Read a schedule.
#[utoipa::path(get, path = "/v1/schedules/{id}", tag = "runs",
    params(("id" = String, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = Schedule),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
pub(crate) async fn get_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    app.store
        .load_schedule(&id)
        .await?
        .map(Json)
        .ok_or_else(|| api_error(ScheduleError::NotFound(id)))
}

/// Create a schedule: its spec, time zone, labels and initial state are checked first.
/// Idempotent by id: the same definition again answers 200 with the stored schedule.
#[utoipa::path(post, path = "/v1/schedules", tag = "operate", request_body = NewSchedule,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = Schedule),
        (status = 200, description = "It existed with this definition", body = Schedule),
        (status = 400, description = "A body that does not parse; an id or label that is not valid", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 409, description = "A schedule of that id exists with another definition", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A malformed cron expression, an unknown time zone, an interval under a second, an unknown agent, a state that is not one of its initial states", body = ErrorBody),
    ))]
pub(crate) async fn create_schedule(
    State(app): State<AppState>,
    Json(body): Json<NewSchedule>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    let existed = !body.id.is_empty() && app.store.load_schedule(&body.id).await?.is_some();
    let starter = starter(&app, &body.agent);
    let schedule = schedule::create_schedule(app.store.as_ref(), body, starter, now_ms())
        .await
        .map_err(api_error)?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(schedule)))
}

/// Change a schedule: the fields given replace its own (a new spec ticks from now).
#[utoipa::path(patch, path = "/v1/schedules/{id}", tag = "operate", request_body = ScheduleUpdate,
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed", body = Schedule),
        (status = 400, description = "A body that does not parse; a label that is not valid", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A spec that does not tick; a state that is not an initial state", body = ErrorBody),
    ))]
pub(crate) async fn update_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<ScheduleUpdate>,
) -> Result<Json<Schedule>, ApiError> {
    let agent = app
        .store
        .load_schedule(&id)
        .await?
        .map(|s| s.agent)
        .ok_or_else(|| api_error(ScheduleError::NotFound(id.clone())))?;
    schedule::update_schedule(
        app.store.as_ref(),
        &id,
        body,
        starter(&app, &agent),
        now_ms(),
    )
    .await
    .map(Json)
    .map_err(api_error)
}

/// Delete a schedule; the runs it started stay.
#[utoipa::path(delete, path = "/v1/schedules/{id}", tag = "operate",
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
pub(crate) async fn delete_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    schedule::delete_schedule(app.store.as_ref(), &id)
        .await
        .map_err(api_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pause a schedule: no tick starts a run until it is resumed.
#[utoipa::path(post, path = "/v1/schedules/{id}/pause", tag = "operate",
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Paused", body = Schedule),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
pub(crate) async fn pause_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    schedule::pause_schedule(app.store.as_ref(), &id, now_ms())
        .await
        .map(Json)
        .map_err(api_error)
}

/// Resume a paused schedule from its next tick (the ticks of the pause start nothing).
#[utoipa::path(post, path = "/v1/schedules/{id}/resume", tag = "operate",
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Resumed", body = Schedule),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
pub(crate) async fn resume_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    schedule::resume_schedule(app.store.as_ref(), &id, now_ms())
        .await
        .map(Json)
        .map_err(api_error)
}

/// Ask for a tick now: a worker of the agent starts its run at its next pass, whatever
/// the overlap policy, also while paused.
#[utoipa::path(post, path = "/v1/schedules/{id}/trigger", tag = "operate",
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Asked for", body = Schedule),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
    ))]
pub(crate) async fn trigger_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    schedule::trigger_schedule(app.store.as_ref(), &id, now_ms())
        .await
        .map(|s| (StatusCode::ACCEPTED, Json(s)))
        .map_err(api_error)
}

/// Ask for every tick of a past time range: a worker of the agent starts the runs of
/// those that have none.
#[utoipa::path(post, path = "/v1/schedules/{id}/backfill", tag = "operate",
    request_body = BackfillRange,
    params(("id" = String, Path, description = "The schedule's id")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Asked for", body = Backfilled),
        (status = 400, description = "A body that does not parse", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A range of more than 1000 ticks", body = ErrorBody),
    ))]
pub(crate) async fn backfill_schedule(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Json(range): Json<BackfillRange>,
) -> Result<(StatusCode, Json<Backfilled>), ApiError> {
    let (schedule, ticks) =
        schedule::backfill_schedule(app.store.as_ref(), &id, range.from, range.to, now_ms())
            .await
            .map_err(api_error)?;
    Ok((StatusCode::ACCEPTED, Json(Backfilled { ticks, schedule })))
}
