//! Errors as JSON bodies: `{"error": {"code": "...", "message": "..."}}`, with the status
//! that says who should act (the client for `4xx`, the operator for `5xx`).

use agent_core::store::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer of the API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {code}: {message}")]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

/// The body of an error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    pub(crate) error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    /// A stable code: `not_found`, `conflict`, `unauthorized`, `bad_request`, ...
    pub(crate) code: String,
    /// For a person.
    pub(crate) message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// `400`.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// `401`: no credentials.
    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// `403`: credentials that do not allow this.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// `404`.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// `409`: the run is not in a state that allows it.
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound(_) => Self::not_found(e.to_string()),
            StoreError::InvalidLabel(_) => Self::bad_request(e.to_string()),
            StoreError::RunIsFinal { .. }
            | StoreError::Conflict { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::AlreadyExists(_)
            | StoreError::CancelRequested(_) => Self::conflict(e.to_string()),
            StoreError::Unavailable(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            ),
            StoreError::Corrupt { .. } => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", e.to_string())
            }
            StoreError::Backend(_) => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
