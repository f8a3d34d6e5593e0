//! The run inspector: web pages under `/ui/` that show every run as its graph, its
//! timeline and its journal, live (`docs/inspector.md`).
//!
//! Pages are rendered on the server from askama templates (compiled and checked with the
//! crate, escaping HTML by default) and made live by one small script: server-sent events
//! from the API's streams, and the page's sections fetched again when the run moves.
//! Actions (signal, cancel, retry, editing a stopped run's state, tool switches, starting a
//! run, batch actions over the runs a filter matches) go through the JSON API with the
//! bearer token the page asks for once and keeps in `sessionStorage`. The stylesheet and the
//! script are embedded with `include_str!`: two files need no asset crate, and nothing is
//! loaded from anywhere else at run time.
//!
//! Reads follow the API's rules: open on loopback, and when reads need the token, the pages
//! take it from the `Authorization` header or from a cookie set by the sign-in form
//! (`/ui/login`), which authorizes reads of `/ui/` only; every write still needs the
//! bearer header.

mod graph;
mod pages;
mod timing;
mod view;

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::AppState;
use crate::auth::Attempt;
use crate::auth::Auth;

/// The cookie the sign-in form sets: the token, hex-encoded.
pub(crate) const COOKIE: &str = "durable_agents_ui";

/// The stylesheet, with the rules that place the timing page's bars (generated: a hundred
/// and one of each).
static CSS: LazyLock<String> = LazyLock::new(|| {
    include_str!("../../inspector/assets/inspector.css").to_owned() + &timing::bar_rules()
});
const JS: &str = include_str!("../../inspector/assets/inspector.js");

/// The trace viewer's URL with `{trace_id}` in it, when one is configured
/// ([`ApiConfig::with_trace_url`](crate::ApiConfig::with_trace_url)).
#[derive(Clone, Debug, Default)]
pub(crate) struct TraceUrl(pub(crate) Option<Arc<str>>);

/// The inspector's routes, with their own read check (the API's, plus the cookie).
pub(crate) fn routes(state: AppState, auth: Arc<Auth>, trace_url: TraceUrl) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("ui/") }))
        .route("/ui/", get(pages::runs))
        .route("/ui/runs/{id}", get(pages::run))
        .route("/ui/runs/{id}/entries/{version}/{seq}", get(pages::entry))
        .route("/ui/runs/{id}/edit", get(pages::edit))
        .route(
            "/ui/runs/{id}/timing",
            get(pages::timing).layer(axum::Extension(trace_url)),
        )
        // The API's export, behind the inspector's read check (the sign-in cookie too).
        .route("/ui/runs/{id}/export.json", get(crate::runs::export))
        .route("/ui/agents", get(pages::agents))
        .route("/ui/schedules", get(pages::schedules))
        .route("/ui/workers", get(pages::workers))
        .route("/ui/agents/{name}", get(pages::agent))
        .route(
            "/ui/login",
            get(pages::login).post({
                let auth = Arc::clone(&auth);
                move |uri: axum::http::Uri,
                      connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
                      form| {
                    let client = connect.map(|axum::Extension(ConnectInfo(addr))| addr.ip());
                    std::future::ready(pages::sign_in(&auth, &uri, client, form))
                }
            }),
        )
        .route("/ui/stream/events", get(crate::events::event_stream))
        .route("/ui/stream/runs/{id}", get(crate::events::run_event_stream))
        .route("/ui/assets/inspector.css", get(css))
        .route("/ui/assets/inspector.js", get(js))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(auth, check))
}

async fn css() -> Response {
    asset(&CSS, "text/css; charset=utf-8")
}

async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The relative way from a page at `path` (`/ui/runs/x`) back to the router's root (`../../`),
/// so that links work wherever the router is mounted (`Router::nest`).
pub(crate) fn root_of(path: &str) -> String {
    "../".repeat(path.matches('/').count().saturating_sub(1).max(1))
}

/// Let a read through when reads are open, or it carries the token (header or cookie);
/// send a page to the sign-in form, and anything else away with `401`. The sign-in form
/// and the assets are always served. Writes are left to the API's own check.
async fn check(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let open = !auth.reads_need_token() || path == "/ui/login" || path.starts_with("/ui/assets/");
    if open {
        return secure(next.run(request).await);
    }
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let cookie = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .find_map(|hexed| String::from_utf8(hex::decode(hexed).ok()?).ok());
    match bearer
        .or(cookie)
        .map(|t| auth.attempt(&t, crate::auth::client_of(&request)))
    {
        Some(Attempt::Accepted) => return secure(next.run(request).await),
        Some(Attempt::Throttled(secs)) => return crate::auth::throttled(secs).into_response(),
        _ => {}
    }
    if path.starts_with("/ui/stream/") {
        return (StatusCode::UNAUTHORIZED, "sign in at /ui/login").into_response();
    }
    let to = format!("{}ui/login", root_of(path));
    Redirect::to(&to).into_response()
}

/// Every page: no framing by other sites, no script or style from anywhere but here.
fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::root_of;

    #[test]
    fn the_root_is_found_from_any_page() {
        assert_eq!(root_of("/ui/"), "../");
        assert_eq!(root_of("/ui/agents"), "../");
        assert_eq!(root_of("/ui/runs/a"), "../../");
        assert_eq!(root_of("/ui/runs/a/entries/1/2"), "../../../../../");
    }
}
