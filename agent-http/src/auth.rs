//! Bearer tokens: every write needs one, always; every request needs one when reads do
//! (off loopback). Compared in constant time, so that response times do not reveal how
//! much of a guess was right.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The configured token and where it is needed.
#[derive(Debug)]
pub(crate) struct Auth {
    token: Option<String>,
    reads_need_token: bool,
}

impl Auth {
    pub(crate) fn new(token: Option<String>, reads_need_token: bool) -> Self {
        Self {
            token,
            reads_need_token,
        }
    }

    /// Whether reads need the token too (the inspector's pages follow the same rule).
    pub(crate) fn reads_need_token(&self) -> bool {
        self.reads_need_token
    }

    /// Whether `presented` is the token (in constant time); never without one configured.
    pub(crate) fn accepts(&self, presented: Option<&str>) -> bool {
        match (&self.token, presented) {
            (Some(token), Some(presented)) => {
                bool::from(token.as_bytes().ct_eq(presented.as_bytes()))
            }
            _ => false,
        }
    }
}

/// The bearer token a request presents, if any.
pub(crate) fn presented(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Refuse a request that needs the token and does not carry it: `401` without one, `403`
/// when no token is configured at all (writes are then impossible) or the one given is
/// wrong. Nothing behind the check runs.
pub(crate) async fn check(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !write && !auth.reads_need_token {
        return next.run(request).await;
    }
    let presented = presented(&request);
    if auth.accepts(presented) {
        return next.run(request).await;
    }
    let refusal = match (&auth.token, presented) {
        (None, _) => {
            ApiError::forbidden("writes are refused: the server has no token (start it with one)")
        }
        (Some(_), None) => {
            ApiError::unauthorized("this request needs `Authorization: Bearer TOKEN`")
        }
        (Some(_), Some(_)) => ApiError::forbidden("the token is not the server's"),
    };
    refusal.into_response()
}
