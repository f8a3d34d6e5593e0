//! Bodies over the limit are refused by their `Content-Length` before anything reads them
//! (or runs), whether the handler reads a body or not; a body without a length is cut at
//! the limit by the extractors ([`axum::extract::DefaultBodyLimit`]).

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

pub(crate) async fn check_length(max: usize, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX)) {
        return ApiError::too_large(max).into_response();
    }
    next.run(request).await
}
