//! Editing a stopped run's state (`POST /v1/runs/{id}/state`): a whole state or a JSON Patch
//! of the current one, with who and why, written as one `edited` transition
//! ([`agent_core::store::edit`]). Where the service registers the run's agent, the state is
//! read as the agent's enum and sealed as its runner seals states before anything is
//! written; elsewhere (`agentctl serve`) it is checked against the stored graph, sealed with
//! the service's keys ([`ApiConfig::with_seal_keys`](crate::ApiConfig::with_seal_keys)), and
//! read by the next worker before any handler runs.

use agent_core::secrets::{DEFAULT_SENSITIVE_FIELDS, Redactor};
use agent_core::store::edit::{Edit, EditCheck, EditError, StateEdit};
use agent_core::store::{OperatorNote, OperatorStore, RunRecord, StoreError};
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
    Router::new().route("/v1/runs/{id}/state", post(edit_state))
}

/// A run's new state, with who and why: the whole state (`state`) or a JSON Patch of the
/// current one (`patch`), one of them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum EditBody {
    /// The whole new state.
    Whole(WholeEdit),
    /// A patch of the current state.
    Patch(PatchEdit),
}

/// The whole new state, with who and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WholeEdit {
    /// The state, as the agent's enum serializes it (`{"Review": {"amount": 50}}`).
    state: Value,
    /// The new state's name, for an enum whose JSON does not start with it (an internal or
    /// adjacent serde tag).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\u0000]*$")]
    state_name: Option<String>,
    /// Allow a state the graph does not lead to from the current one; the transition's
    /// note records it.
    #[serde(default)]
    override_graph: bool,
    /// Who edits (recorded with the transition); `http` when absent.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000]*$")]
    by: Option<String>,
    /// Why (recorded with the transition).
    #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*$")]
    reason: String,
}

/// A JSON Patch of the current state, with who and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchEdit {
    /// RFC 6902 operations, applied to the current state.
    #[schema(value_type = Vec<Object>)]
    patch: Value,
    /// The new state's name, for an enum whose JSON does not start with it (an internal or
    /// adjacent serde tag).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\u0000]*$")]
    state_name: Option<String>,
    /// Allow a state the graph does not lead to from the current one; the transition's
    /// note records it.
    #[serde(default)]
    override_graph: bool,
    /// Who edits (recorded with the transition); `http` when absent.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000]*$")]
    by: Option<String>,
    /// Why (recorded with the transition).
    #[schema(min_length = 1, max_length = 2000, pattern = "^[^\\u0000]*$")]
    reason: String,
}

/// What an edit says beside its state (both shapes of [`EditBody`] carry it).
#[derive(Debug)]
struct EditNote {
    state_name: Option<String>,
    override_graph: bool,
    by: Option<String>,
    reason: String,
}

impl EditBody {
    fn edit(self) -> Result<Edit, ApiError> {
        let (state, about) = match self {
            Self::Whole(w) => (
                StateEdit::Whole(w.state),
                EditNote {
                    state_name: w.state_name,
                    override_graph: w.override_graph,
                    by: w.by,
                    reason: w.reason,
                },
            ),
            Self::Patch(p) => (
                StateEdit::patch(p.patch).map_err(|e| {
                    ApiError::unprocessable(format!("`patch` is not a JSON Patch: {e}"))
                })?,
                EditNote {
                    state_name: p.state_name,
                    override_graph: p.override_graph,
                    by: p.by,
                    reason: p.reason,
                },
            ),
        };
        let by = about.by.unwrap_or_else(|| "http".to_owned());
        if by.chars().count() > 200 || about.reason.chars().count() > 2000 {
            return Err(ApiError::bad_request(
                "`by` has at most 200 characters, `reason` at most 2000",
            ));
        }
        if about.reason.is_empty() {
            return Err(ApiError::unprocessable(
                "`reason` says why the state is edited; it is recorded with the transition",
            ));
        }
        if (about.state_name.as_ref()).is_some_and(|n| n.is_empty() || n.chars().count() > 200) {
            return Err(ApiError::unprocessable(
                "`state_name` has 1 to 200 characters",
            ));
        }
        Ok(Edit {
            state,
            state_name: about.state_name,
            override_graph: about.override_graph,
            note: OperatorNote::new(by, about.reason),
        })
    }
}

/// Correct the state of a waiting, failed, quarantined or dead-lettered run and let it
/// continue: one `edited` transition with who and why, which `verify` checks like any
/// other. A different variant must be one the graph leads to from the current state,
/// unless `override_graph`. Where this service registers the run's agent, the state is
/// read as the agent's type first; otherwise the next worker reads it before any handler
/// runs, and a state that does not read quarantines the run.
#[utoipa::path(post, path = "/v1/runs/{id}/state", tag = "operate",
    params(("id" = String, Path, description = "The run")),
    request_body = EditBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Edited: the run, running at its new version", body = RunRecord),
        (status = 400, description = "A body that is not JSON, a `by` or `reason` too long", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape, a patch that does not apply, a state the agent or its graph does not allow", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "No such run", body = ErrorBody),
        (status = 409, description = "The run is running, ended, waits for its children, is leased, or moved meanwhile", body = ErrorBody),
    ))]
pub(crate) async fn edit_state(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<EditBody>,
) -> Result<Json<RunRecord>, ApiError> {
    let edit = body.edit()?;
    let run = app
        .store
        .load_run(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))?;
    let edited = if let Some(starter) = app.agents.0.get(&run.agent) {
        starter.edit_json(id, edit).await
    } else {
        let redactor = Redactor::default().with_fields(&DEFAULT_SENSITIVE_FIELDS);
        let check = EditCheck {
            read_state: None,
            redactor: &redactor,
            keys: &app.seal_keys,
        };
        let store: &dyn OperatorStore = app.store.as_ref();
        agent_core::store::edit::edit(store, &id, edit, check).await
    };
    edited.map(Json).map_err(refused)
}

fn refused(e: EditError) -> ApiError {
    match e {
        EditError::NotFound(run) => ApiError::not_found(format!("run `{run}` not found")),
        EditError::NotStopped { .. } | EditError::WaitsForChildren(_) | EditError::Leased(_) => {
            ApiError::conflict(e.to_string())
        }
        EditError::Invalid { .. } | EditError::NotAnEdge { .. } => {
            ApiError::unprocessable(e.to_string())
        }
        EditError::Store(StoreError::Conflict { run_id, .. }) => ApiError::conflict(format!(
            "run `{run_id}` changed while it was being edited; read it again"
        )),
        EditError::Store(e) => e.into(),
    }
}
