//! Logs: the human format or one JSON object per line, each line carrying the fields of
//! the spans it was logged in (`run_id`, `state`, `version`, `seq`, ...) and the trace and
//! span ids that join it to the exported trace.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// tracing-subscriber's human format (colours on a terminal only).
    #[default]
    Human,
    /// One JSON object per line ([`JsonLines`]).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "human" | "text" | "" => Ok(Self::Human),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "unknown log format `{other}`: write `human` or `json`"
            )),
        }
    }
}

/// One JSON object per line:
///
/// ```json
/// {"timestamp":"2026-12-07T06:01:02.123Z","level":"INFO","target":"agent_core::runner",
///  "message":"...","run_id":"order-7","state":"Charging","version":3,"span":"step",
///  "trace_id":"4bf9...","span_id":"00f0..."}
/// ```
///
/// The event's own fields and those of every span it is in (innermost last, so an inner
/// span's `state` wins over an outer one's) are keys of the object, beside `timestamp`
/// (RFC 3339, UTC, milliseconds), `level`, `target`, `message` and `span` (the innermost
/// span's name). `trace_id` and `span_id` are there when traces are on
/// ([`crate::Telemetry::traces`]), as the collector shows them. The event's fields win over
/// a span's of the same name, and the fixed keys over both.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        let mut leaf = None;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<JsonFields>>()
                    && let Ok(Value::Object(fields)) = serde_json::from_str(fields)
                {
                    line.extend(fields);
                }
                leaf = Some(span.name());
            }
        }
        let mut visitor = Fields(Map::new());
        event.record(&mut visitor);
        line.extend(visitor.0);
        let meta = event.metadata();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                .into(),
        );
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        if let Some(name) = leaf {
            line.insert("span".into(), name.into());
            let cx = tracing::Span::current().context();
            let span = opentelemetry::trace::TraceContextExt::span(&cx);
            let ids = span.span_context();
            if ids.is_valid() {
                line.insert("trace_id".into(), ids.trace_id().to_string().into());
                line.insert("span_id".into(), ids.span_id().to_string().into());
            }
        }
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}
