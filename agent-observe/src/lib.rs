//! # Observability: traces, metrics and logs where teams already look
//!
//! The framework's crates emit `tracing` spans named and attributed by the OpenTelemetry
//! GenAI semantic conventions ([`traces`]); nothing leaves the process until a
//! [`Telemetry`] is installed, once, at the start of a worker or service:
//!
//! ```no_run
//! # async fn example() -> Result<(), agent_observe::ObserveError> {
//! use agent_observe::{LogFormat, Telemetry, Traces};
//!
//! // OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, AGENT_LOG_FORMAT and RUST_LOG ...
//! let telemetry = Telemetry::from_env()?
//!     // ... or in code:
//!     .traces(Traces::otlp("http://127.0.0.1:4318").service_name("refunds"))
//!     .log_format(LogFormat::Json)
//!     .install()?;
//! // ... run the worker ...
//! telemetry.shutdown(); // flushes the spans still queued
//! # Ok(()) }
//! ```
//!
//! The guide is `docs/observability.md` in the repository.

use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

pub mod logs;
pub mod metrics;
pub mod traces;

pub use agent_core::trace::{RunTrace, TRACE_PARENT_LABEL, TraceParent};
pub use logs::{JsonLines, LogFormat};
pub use traces::{TraceStats, Traces};
/// Where [`Telemetry::log_writer`] sends lines: any `tracing-subscriber` writer, boxed.
pub use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Why telemetry could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// This process has one installed already (a `tracing` subscriber or a trace exporter).
    #[error("{0} is installed already in this process")]
    AlreadyInstalled(&'static str),
    /// The trace exporter could not be built.
    #[error("traces: {0}")]
    Traces(String),
    /// The log filter (`RUST_LOG` or [`Telemetry::log_filter`]) does not parse.
    #[error("log filter: {0}")]
    Filter(String),
    /// A setting from the environment is not one this crate reads.
    #[error("{0}")]
    Env(String),
}

/// What to install: traces, the log format and filter, where logs go.
#[derive(Debug)]
pub struct Telemetry {
    traces: Option<Traces>,
    log_format: LogFormat,
    filter: Option<String>,
    writer: Option<BoxMakeWriter>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl Telemetry {
    /// Human logs on stderr filtered by `RUST_LOG` (default `info`), no traces.
    #[must_use]
    pub fn new() -> Self {
        Self {
            traces: None,
            log_format: LogFormat::Human,
            filter: None,
            writer: None,
        }
    }

    /// What the environment asks for: traces to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` when set (as service `OTEL_SERVICE_NAME`), logs as
    /// `AGENT_LOG_FORMAT` says (`human` or `json`), filtered by `RUST_LOG`.
    ///
    /// # Errors
    /// [`ObserveError::Env`] for an `AGENT_LOG_FORMAT` that is neither.
    pub fn from_env() -> Result<Self, ObserveError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut telemetry = Self::new();
        if let Some(endpoint) =
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        {
            let mut traces = Traces::otlp(endpoint);
            if let Some(name) = var("OTEL_SERVICE_NAME") {
                traces = traces.service_name(name);
            }
            if let Some(delay) = var("OTEL_BSP_SCHEDULE_DELAY").and_then(|v| v.parse().ok()) {
                traces = traces.batch_delay(Duration::from_millis(delay));
            }
            telemetry = telemetry.traces(traces);
        }
        if let Some(format) = var("AGENT_LOG_FORMAT") {
            telemetry.log_format = format
                .parse()
                .map_err(|e| ObserveError::Env(format!("AGENT_LOG_FORMAT: {e}")))?;
        }
        Ok(telemetry)
    }

    /// Export traces ([`Traces::otlp`]).
    #[must_use]
    pub fn traces(mut self, traces: Traces) -> Self {
        self.traces = Some(traces);
        self
    }

    /// The log format. JSON logs carry trace and span ids: without [`Telemetry::traces`],
    /// spans get ids that are exported nowhere ([`Traces::ids_only`]).
    #[must_use]
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// Which events and spans are kept, as `RUST_LOG` directives (default: `RUST_LOG`,
    /// or `info`).
    #[must_use]
    pub fn log_filter(mut self, directives: impl Into<String>) -> Self {
        self.filter = Some(directives.into());
        self
    }

    /// Where log lines go (default stderr).
    #[must_use]
    pub fn log_writer(mut self, writer: BoxMakeWriter) -> Self {
        self.writer = Some(writer);
        self
    }

    /// Install the `tracing` subscriber (and, with traces, the exporter and the runner's
    /// hook) for the whole process. Inside a tokio runtime when traces are exported.
    ///
    /// # Errors
    /// [`ObserveError::AlreadyInstalled`] when a subscriber or a trace exporter is
    /// installed already; [`ObserveError::Filter`], [`ObserveError::Traces`].
    pub fn install(self) -> Result<TelemetryGuard, ObserveError> {
        // Checked first, so that nothing (the runner's trace hook) is half installed.
        if tracing::dispatcher::has_been_set() {
            return Err(ObserveError::AlreadyInstalled("a tracing subscriber"));
        }
        let filter = match &self.filter {
            Some(directives) => EnvFilter::try_new(directives),
            None => EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new("info")),
        }
        .map_err(|e| ObserveError::Filter(e.to_string()))?;
        let traces = match (self.traces, self.log_format) {
            (Some(traces), _) => Some(traces),
            (None, LogFormat::Json) => Some(Traces::ids_only()),
            (None, LogFormat::Human) => None,
        };
        let pipeline = traces.map(Traces::build).transpose()?;
        let writer = self
            .writer
            .unwrap_or_else(|| BoxMakeWriter::new(std::io::stderr));
        let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = Vec::new();
        layers.push(match self.log_format {
            LogFormat::Human => tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter)
                .boxed(),
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                .event_format(JsonLines)
                .with_writer(writer)
                .with_filter(filter)
                .boxed(),
        });
        if let Some(pipeline) = &pipeline {
            // Spans at INFO and above, whatever the log filter keeps: the trace is complete
            // when logs are quiet.
            // Without the layer's per-span extras: busy and idle time (two clock reads at
            // every poll of an instrumented future), the source location and the thread
            // (five attributes per span that no question here needs), and, unless asked
            // for, OpenTelemetry's active context (a context switch at every poll).
            layers.push(
                tracing_opentelemetry::layer()
                    .with_tracer(pipeline.tracer.clone())
                    .with_tracked_inactivity(false)
                    .with_location(false)
                    .with_threads(false)
                    .with_context_activation(pipeline.activate_context)
                    .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
                    .boxed(),
            );
        }
        tracing_subscriber::registry()
            .with(layers)
            .try_init()
            .map_err(|_| ObserveError::AlreadyInstalled("a tracing subscriber"))?;
        Ok(TelemetryGuard {
            provider: pipeline.as_ref().map(|p| p.provider.clone()),
            stats: pipeline.map(|p| p.stats),
        })
    }
}

/// Keeps the exporters running; dropping it (or [`TelemetryGuard::shutdown`]) flushes the
/// spans still queued.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    stats: Option<TraceStats>,
}

impl TelemetryGuard {
    /// The span export's counters, when traces are exported.
    #[must_use]
    pub fn trace_stats(&self) -> Option<&TraceStats> {
        self.stats.as_ref()
    }

    /// Send every finished span that is still queued, waiting for the collector.
    pub fn flush(&self) {
        if let Some(provider) = &self.provider {
            let _ = provider.force_flush();
        }
    }

    /// Flush and stop the exporters.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.stop();
    }
}
