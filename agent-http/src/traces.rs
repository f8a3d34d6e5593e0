//! A span per request, in the OpenTelemetry HTTP server conventions (`{method} {route}`,
//! the route as declared, never a run id), a child of the caller's span when the request
//! carries a W3C `traceparent`: a run the request starts is then in the caller's trace, and
//! a signal it sends links the request to the run it wakes (`runs::signal_run`). Costs
//! nothing beyond the span itself without an installed exporter (`agent_core::trace`).

use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use tower_http::classify::ServerErrorsAsFailures;
use tower_http::classify::SharedClassifier;
use tower_http::trace::TraceLayer;
use tracing::Span;

/// tower-http's trace layer with this module's span and status recording.
pub(crate) type RequestSpans = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    fn(&Request) -> Span,
    (),
    fn(&Response, Duration, &Span),
>;

/// The layer: [`request_span`] for each request, its status recorded with the response.
pub(crate) fn layer() -> RequestSpans {
    TraceLayer::new_for_http()
        .make_span_with(request_span as fn(&Request) -> Span)
        .on_request(())
        .on_response(record_status as fn(&Response, Duration, &Span))
}

/// The request's span: named by its method and declared route.
fn request_span(request: &Request) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", MatchedPath::as_str);
    let method = request.method().as_str();
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(parent) = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(agent_core::trace::TraceParent::parse)
    {
        agent_core::trace::continue_trace(&span, parent);
    }
    span
}

fn record_status(response: &Response, _latency: Duration, span: &Span) {
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}
