//! The tool registry's kill switch: list the switches, switch a tool off and on again for
//! every run ([`OperatorStore::set_tool_enabled`](agent_core::store::OperatorStore::set_tool_enabled)). A
//! disabled tool fails fast with a clear error code at its next call.

use agent_core::store::tools::{UnknownTool, known_tools};
use agent_core::store::{Millis, ToolSwitch};
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, Path};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tools", get(list_tools))
        .route("/v1/tools/{name}/enable", post(enable))
        .route("/v1/tools/{name}/disable", post(disable))
}

/// A tool's switch (tools never switched are enabled, and not listed).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ToolSwitchBody {
    /// The tool's name.
    tool: String,
    /// Whether calls are allowed.
    enabled: bool,
    /// Why it was switched.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// When (milliseconds since the epoch).
    updated_at: Millis,
}

impl From<ToolSwitch> for ToolSwitchBody {
    fn from(s: ToolSwitch) -> Self {
        Self {
            tool: s.tool,
            enabled: s.enabled,
            reason: s.reason,
            updated_at: s.updated_at,
        }
    }
}

/// Why a tool is switched.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SwitchBody {
    /// Why (kept with the switch).
    #[serde(default)]
    #[schema(max_length = 2000, pattern = "^[^\\u0000]*$")]
    reason: Option<String>,
}

/// The tool registry: every tool ever switched, by name.
#[utoipa::path(get, path = "/v1/tools", tag = "runs",
    responses((status = 200, description = "The switches", body = Vec<ToolSwitchBody>)))]
pub(crate) async fn list_tools(
    State(app): State<AppState>,
) -> Result<Json<Vec<ToolSwitchBody>>, ApiError> {
    let mut switches = app.store.tool_switches().await?;
    switches.sort_by(|a, b| a.tool.cmp(&b.tool));
    Ok(Json(switches.into_iter().map(Into::into).collect()))
}

async fn switch(
    app: &AppState,
    name: &str,
    enabled: bool,
    body: Option<SwitchBody>,
) -> Result<Json<ToolSwitchBody>, ApiError> {
    let chars = name.chars().count();
    if chars == 0 || chars > 200 {
        return Err(ApiError::bad_request(format!(
            "a tool's name has 1 to 200 characters, not {chars}"
        )));
    }
    let reason = body.unwrap_or_default().reason;
    if reason.as_ref().is_some_and(|r| r.chars().count() > 2000) {
        return Err(ApiError::bad_request(
            "`reason` has at most 2000 characters",
        ));
    }
    // A switch of a name nothing declares would answer 200 and switch nothing (a
    // misspelt `chargepayment` while `ChargePayment` keeps running): refused, in the
    // CLI's words.
    let known = known_tools(app.store.as_ref()).await?;
    if let Some(unknown) = UnknownTool::check(name, &known) {
        return Err(ApiError::not_found(unknown.to_string()));
    }
    app.store
        .set_tool_enabled(name, enabled, reason.as_deref())
        .await?;
    let switched = app
        .store
        .tool_switches()
        .await?
        .into_iter()
        .find(|s| s.tool == name)
        .ok_or_else(|| ApiError::internal(format!("tool `{name}` was switched but not kept")))?;
    Ok(Json(switched.into()))
}

/// Switch a tool on again, for every run.
#[utoipa::path(post, path = "/v1/tools/{name}/enable", tag = "operate",
    params(("name" = String, Path, description = "The tool's name")),
    request_body(content = Option<SwitchBody>, description = "Why (optional)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Switched on", body = ToolSwitchBody),
        (status = 400, description = "A body that is not JSON, a name or reason too long", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "A tool no registered agent declares and none switched before", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
    ))]
pub(crate) async fn enable(
    State(app): State<AppState>,
    Path(name): Path<String>,
    body: Option<Json<Option<SwitchBody>>>,
) -> Result<Json<ToolSwitchBody>, ApiError> {
    switch(&app, &name, true, body.and_then(|Json(b)| b)).await
}

/// Switch a tool off, for every run: its next calls fail fast with a clear error code.
#[utoipa::path(post, path = "/v1/tools/{name}/disable", tag = "operate",
    params(("name" = String, Path, description = "The tool's name")),
    request_body(content = Option<SwitchBody>, description = "Why (optional)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Switched off", body = ToolSwitchBody),
        (status = 400, description = "A body that is not JSON, a name or reason too long", body = ErrorBody),
        (status = 401, description = "No token", body = ErrorBody),
        (status = 403, description = "A wrong token, or none configured", body = ErrorBody),
        (status = 404, description = "A tool no registered agent declares and none switched before", body = ErrorBody),
        (status = 413, description = "A body over the limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape", body = ErrorBody),
    ))]
pub(crate) async fn disable(
    State(app): State<AppState>,
    Path(name): Path<String>,
    body: Option<Json<Option<SwitchBody>>>,
) -> Result<Json<ToolSwitchBody>, ApiError> {
    switch(&app, &name, false, body.and_then(|Json(b)| b)).await
}
