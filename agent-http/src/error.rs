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
    /// Seconds to send as `Retry-After`.
    retry_after: Option<u32>,
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
    /// A stable code: `bad_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `too_large`, `unsupported_media_type`, `unprocessable`, `too_many_requests`,
    /// `unavailable`, `internal`, `store`, `corrupt`.
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
            retry_after: None,
        }
    }

    /// `503` with `Retry-After`: the server is at a limit that frees up.
    pub(crate) fn busy(message: impl Into<String>, retry_after_secs: u32) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }

    /// `429` with `Retry-After`: this client must wait.
    pub(crate) fn too_many(message: impl Into<String>, retry_after_secs: u32) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message)
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

    /// `413`: a body over the limit.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over the limit of {limit} bytes"),
        )
    }

    /// `422`: a body that parses but is not acceptable (not an initial state of the agent).
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }

    /// `500`: the server is at fault (a misconfigured runner).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// An extractor's rejection (a body, query or path that does not parse), with its
    /// status and a code for it.
    pub(crate) fn rejected(status: StatusCode, message: impl Into<String>) -> Self {
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
            s if s.is_server_error() => "internal",
            _ => "bad_request",
        };
        Self::new(status, code, message)
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

    /// What went wrong, as the body of an answer carries it (a WebSocket's error message
    /// carries the same).
    pub(crate) fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.code.to_owned(),
            message: self.message.clone(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound(_) | StoreError::NoPendingSignal { .. } => {
                Self::not_found(e.to_string())
            }
            StoreError::InvalidLabel(_) | StoreError::InvalidRateLimit(_) => {
                Self::bad_request(e.to_string())
            }
            StoreError::RunIsFinal { .. }
            | StoreError::Conflict { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::AlreadyExists(_)
            | StoreError::CancelRequested(_)
            | StoreError::RunIsHeld { .. } => Self::conflict(e.to_string()),
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
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}
