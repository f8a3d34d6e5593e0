//! OpenTelemetry's active context follows the entered span only when asked for
//! (`Traces::activate_context`): off by default (a context switch at every poll), on for
//! instrumentation that reads `opentelemetry::Context::current()`. One test per process:
//! telemetry is installed once.

use agent_observe::{Telemetry, Traces};
use opentelemetry::trace::TraceContextExt as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

#[test]
fn the_active_context_is_the_entered_span_when_asked_for() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = runtime.enter();
    let telemetry = Telemetry::new()
        .traces(Traces::ids_only().activate_context(true))
        .log_filter("off")
        .install()
        .expect("telemetry installs");
    let span = tracing::info_span!("outer");
    let ids = span.context().span().span_context().clone();
    assert!(ids.is_valid(), "the span has ids");
    span.in_scope(|| {
        let active = opentelemetry::Context::current();
        assert_eq!(
            active.span().span_context().span_id(),
            ids.span_id(),
            "the entered span is the active context"
        );
    });
    assert!(
        !opentelemetry::Context::current()
            .span()
            .span_context()
            .is_valid(),
        "outside the span, no span is active"
    );
    telemetry.shutdown();
}
