//! The `Host` allow-list, against DNS rebinding: a page on another site whose name an
//! attacker points at 127.0.0.1 makes the user's browser send same-origin requests to a
//! loopback server, with `Host: attacker.example`. Reads need no token on loopback, so
//! without this check such a page could read every run. A request naming a host the server
//! does not answer to is refused, unless it carries the server's token (a rebinding page
//! cannot know it).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Auth;
use crate::error::ApiError;

/// The names a server answers to without a token.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// Lowercase names or addresses, without ports; the loopback names always.
    allowed: Vec<String>,
    auth: Arc<Auth>,
}

/// The loopback names every server answers to.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl Hosts {
    pub(crate) fn new(configured: &[String], auth: Arc<Auth>) -> Self {
        let mut allowed: Vec<String> = LOOPBACK.iter().map(|h| (*h).to_owned()).collect();
        allowed.extend(configured.iter().map(|h| name_of(h).to_ascii_lowercase()));
        Self { allowed, auth }
    }

    fn allows(&self, host: &str) -> bool {
        let name = name_of(host);
        self.allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// The name of a `Host` value without its port: `example.com:8080` → `example.com`,
/// `[::1]:8080` → `::1`.
fn name_of(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        // One colon: a port. More than one without brackets: an IPv6 address as it is.
        Some((name, port)) if !name.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Refuse a request whose `Host` the server does not answer to, unless it carries the
/// token: `403`, in the API's error shape, before anything behind it runs. A request
/// without a `Host` (HTTP/1.0) passes: browsers always send one.
pub(crate) async fn check(
    State(hosts): State<Arc<Hosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let Some(host) = host else {
        return next.run(request).await;
    };
    if hosts.allows(host) {
        return next.run(request).await;
    }
    let presented = crate::auth::presented(&request);
    match presented.map(|p| (hosts.auth).attempt(p, crate::auth::client_of(&request))) {
        Some(crate::auth::Attempt::Accepted) => return next.run(request).await,
        Some(crate::auth::Attempt::Throttled(secs)) => {
            return crate::auth::throttled(secs).into_response();
        }
        _ => {}
    }
    let shown: String = host.chars().take(100).filter(|c| !c.is_control()).collect();
    ApiError::forbidden(format!(
        "this server does not answer to the host `{shown}` without its token (a guard \
         against DNS rebinding); allow the name with `--allow-host` \
         (`ApiConfig::with_allowed_hosts`), or send the token"
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::name_of;

    #[test]
    fn names_lose_their_ports() {
        for (host, name) in [
            ("example.com:8080", "example.com"),
            ("example.com", "example.com"),
            ("127.0.0.1:80", "127.0.0.1"),
            ("[::1]:8080", "::1"),
            ("[::1]", "::1"),
            ("::1", "::1"),
            ("localhost.:9", "localhost."),
        ] {
            assert_eq!(name_of(host), name, "{host}");
        }
    }
}
