//! An operator's budget for a run (`POST /v1/runs/{id}/budget`): set, raised or removed;
//! the run keeps its spend and checks the new budget from its next claim.

use agent_core::store::{Budget, RunRecord};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path};

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/runs/{id}/budget", post(set_budget))
}

/// The run's new budget; `null` removes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetBody {
    /// Limits on what the whole run spends (each one absent: no limit); `null`, or no limit
    /// at all: none. Read as JSON first: serde reads a struct from an array too, which the
    /// document does not allow.
    #[schema(value_type = Option<Budget>)]
    budget: Option<Value>,
}

impl BudgetBody {
    fn budget(self) -> Result<Option<Budget>, ApiError> {
        let budget = match self.budget {
            None => return Ok(None),
            Some(limits @ Value::Object(_)) => serde_json::from_value::<Budget>(limits)
                .map_err(|e| ApiError::unprocessable(format!("`budget`: {e}")))?,
            Some(other) => {
                return Err(ApiError::unprocessable(format!(
                    "`budget` is an object of limits or null, not {other}"
                )));
            }
        };
        budget
            .validate()
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
        // A budget without a limit is none.
        Ok(Some(budget).filter(|b| !b.is_unlimited()))
    }
}

/// Set a run's budget for the whole run, or remove it: to raise the budget of a run that
/// spent it. Any status. The run's spend so far is kept and returned with it; the run
/// checks the new budget from its next claim (a failed one is then retried).
#[utoipa::path(post, path = "/v1/runs/{id}/budget", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = BudgetBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The run, with its new budget and its spend", body = RunRecord),
        (status = 400, description = "A body that is not JSON", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape, or a limit of zero, which can never be met", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
    ))]
pub(crate) async fn set_budget(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<BudgetBody>,
) -> Result<Json<RunRecord>, ApiError> {
    let budget = body.budget()?;
    let run = app.store.set_budget(&id, budget).await?;
    tracing::info!(run_id = %id, budget = ?run.budget, spend = %run.spend, "budget set");
    Ok(Json(run))
}
