//! Starting runs of the agents registered on the router ([`ApiConfig::with_agent`]): the
//! body's state is read as the agent's own enum, checked to be an initial state, and
//! started through the agent's runner ([`JsonStarter`]), as the service's own code would.
//!
//! [`ApiConfig::with_agent`]: crate::ApiConfig::with_agent

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use agent_core::runner::{JsonStarter, RunnerError, StartError};
use agent_core::store::{Labels, RunRecord, new_run_id};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path};

/// The agents runs can be started of, by name.
#[derive(Clone, Default)]
pub(crate) struct Starters(pub(crate) BTreeMap<String, Arc<dyn JsonStarter>>);

impl fmt::Debug for Starters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/agents/{agent}/runs", post(start_run))
}

/// A run to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    /// The run's id; a new one (`AGENT-` and a UUID v7) when absent. Starting is idempotent
    /// by id: the same id with the same state and labels returns the run.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\u0000]*$")]
    id: Option<String>,
    /// The initial state, as the agent's enum serializes (`{"Start": {"items": [..]}}` for
    /// serde's default representation).
    state: Value,
    /// Labels to find the run by (`GET /v1/runs?label=key=value`).
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, String>)]
    labels: Labels,
}

/// The run started.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Started {
    /// Whether this request created it (`false`: it existed, started with the same state).
    created: bool,
    /// The run.
    run: RunRecord,
}

/// Start a run of a registered agent in an initial state.
#[utoipa::path(post, path = "/v1/agents/{agent}/runs", tag = "operate",
    params(("agent" = String, Path, description = "The agent's name")),
    request_body = StartRun,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Started", body = Started),
        (status = 200, description = "It existed, started with the same state and labels", body = Started),
        (status = 400, description = "A body that does not parse, an id or label that is not valid", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No agent of that name is registered on this server", body = ErrorBody),
        (status = 409, description = "A run of that id exists, started otherwise", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape; a state that is not one of the agent's, or not an initial one", body = ErrorBody),
    ))]
pub(crate) async fn start_run(
    State(app): State<AppState>,
    Path(agent): Path<String>,
    Json(body): Json<StartRun>,
) -> Result<(StatusCode, Json<Started>), ApiError> {
    let Some(starter) = app.agents.0.get(&agent) else {
        let known: Vec<&str> = app.agents.0.keys().map(String::as_str).collect();
        return Err(ApiError::not_found(if known.is_empty() {
            format!("agent `{agent}` is not registered: this server starts no runs")
        } else {
            format!(
                "agent `{agent}` is not registered; runs can be started of `{}`",
                known.join("`, `")
            )
        }));
    };
    let existed = match &body.id {
        Some(id) => {
            let chars = id.chars().count();
            if chars == 0 || chars > 200 {
                return Err(ApiError::bad_request(format!(
                    "a run's id has 1 to 200 characters, not {chars}"
                )));
            }
            app.store.load_run(id).await?.is_some()
        }
        None => false,
    };
    let id = body.id.unwrap_or_else(|| new_run_id(&agent));
    let run = starter
        .start_json(id, body.state, body.labels)
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
        Json(Started {
            created: !existed,
            run,
        }),
    ))
}
