//! Bearer tokens: every write needs one, always; every request needs one when reads do
//! (off loopback). Compared in constant time, so that response times do not reveal how
//! much of a guess was right.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::throttle::Throttle;

/// The configured token and where it is needed.
#[derive(Debug)]
pub(crate) struct Auth {
    token: Option<String>,
    reads_need_token: bool,
    /// Wrong tokens, counted per client: the API's, the Host guard's and the sign-in
    /// form's checks share it, so that guessing through one does not reset another.
    throttle: Throttle,
}

/// What a presented token gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// It is the token.
    Accepted,
    /// It is not (or no token is configured).
    Refused,
    /// The client failed too often: not checked; try again after this many seconds.
    Throttled(u32),
}

impl Auth {
    pub(crate) fn new(token: Option<String>, reads_need_token: bool, throttle: Throttle) -> Self {
        Self {
            token,
            reads_need_token,
            throttle,
        }
    }

    /// Whether `presented` by `client` is the token, counting a wrong one; not checked at
    /// all while the client is throttled ([`crate::throttle`]).
    pub(crate) fn attempt(&self, presented: &str, client: Option<IpAddr>) -> Attempt {
        if self.token.is_none() {
            return Attempt::Refused;
        }
        if let Some(secs) = self.throttle.refused(client) {
            return Attempt::Throttled(secs);
        }
        if self.accepts(Some(presented)) {
            Attempt::Accepted
        } else {
            self.throttle.failed(client);
            Attempt::Refused
        }
    }

    /// Whether a token is configured (without one, every write is refused).
    pub(crate) fn has_token(&self) -> bool {
        self.token.is_some()
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

/// The address of the client that sent `request`, when the server recorded it (`serve`
/// does; a router mounted elsewhere may not).
pub(crate) fn client_of(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

/// The answer to a throttled client.
pub(crate) fn throttled(secs: u32) -> ApiError {
    ApiError::too_many(
        "too many wrong tokens from this client: try again later",
        secs,
    )
}

/// The bearer token a request presents, if any.
pub(crate) fn presented(request: &Request) -> Option<&str> {
    bearer(request.headers())
}

/// The token of an `Authorization: Bearer` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
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
    let attempt = presented.map(|p| auth.attempt(p, client_of(&request)));
    if attempt == Some(Attempt::Accepted) {
        return next.run(request).await;
    }
    let refusal = match (&auth.token, attempt) {
        (None, _) => {
            ApiError::forbidden("writes are refused: the server has no token (start it with one)")
        }
        (Some(_), None) => {
            ApiError::unauthorized("this request needs `Authorization: Bearer TOKEN`")
        }
        (Some(_), Some(Attempt::Throttled(secs))) => throttled(secs),
        (Some(_), Some(_)) => ApiError::forbidden("the token is not the server's"),
    };
    refusal.into_response()
}
