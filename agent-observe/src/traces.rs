//! Traces: the framework's `tracing` spans as OpenTelemetry spans, exported over OTLP.
//!
//! The runner and the routers name and attribute their spans by the OpenTelemetry GenAI
//! semantic conventions, version [`GENAI_CONVENTIONS`] (still "development" upstream,
//! hence the pin): `chat {model}` for a model ask (client spans with the provider, the
//! requested and answering model, token usage, finish reason), `execute_tool {tool}` for a
//! tool call and a compensation, and `invoke_agent {agent}` for the run as a whole. Between
//! them sit the framework's own spans: `run {agent}` for one worker's claim of a run,
//! `step {state}` and `route {state}`, carrying `run_id`, `state`, `version` and `seq`.
//!
//! **One trace per run**, across workers, restarts and migrations: the run's span and
//! trace ids are derived from the run ([`agent_core::trace::RunTrace`]), every worker
//! makes its spans children of the run's span, and the worker that ends the run exports
//! the run's span itself, from its creation to its end. A child run is in its parent's
//! trace; a run started inside a span (an API request, the caller's own) is that span's
//! child.
//!
//! **Export never holds up a step**: spans go to a bounded queue ([`Traces::queue`],
//! 2,048 by default) drained by the SDK's batch processor on its own thread; a collector
//! that is down costs that queue (spans past it are dropped) and the counters of
//! [`TraceStats`]. Nothing sealed or secret is an attribute: spans carry names, ids, counts
//! and classes, never a state, an input, a prompt or an answer.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use agent_core::store::RunRecord;
use agent_core::trace::{RunTrace, TraceExporter, TraceParent};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfig, BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracer,
    SdkTracerProvider, SpanData, SpanExporter,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::ObserveError;

/// The version of the OpenTelemetry semantic conventions (GenAI among them) the spans
/// follow, announced as the instrumentation scope's schema URL.
pub const GENAI_CONVENTIONS: &str = "1.42.0";

/// The instrumentation scope of every span the framework makes.
const SCOPE: &str = "durable-agents";

/// Where and how traces are exported.
pub struct Traces {
    endpoint: Option<String>,
    exporter: Option<Processor>,
    service_name: String,
    queue: usize,
    delay: Duration,
    timeout: Duration,
    activate_context: bool,
}

/// A batch processor around an exporter, built once the batch settings are known.
type Processor = Box<dyn FnOnce(Arc<Counters>, BatchConfig) -> BatchSpanProcessor + Send>;

impl fmt::Debug for Traces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Traces")
            .field("endpoint", &self.endpoint)
            .field("exporter", &self.exporter.as_ref().map(|_| "custom"))
            .field("service_name", &self.service_name)
            .field("queue", &self.queue)
            .field("delay", &self.delay)
            .field("timeout", &self.timeout)
            .field("activate_context", &self.activate_context)
            .finish()
    }
}

impl Default for Traces {
    fn default() -> Self {
        Self {
            endpoint: None,
            exporter: None,
            service_name: "durable-agents".to_owned(),
            queue: 2048,
            delay: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            activate_context: false,
        }
    }
}

impl Traces {
    /// Export to the OTLP/HTTP collector at `endpoint`: a base URL
    /// (`http://127.0.0.1:4318`), to which `/v1/traces` is appended unless the URL ends
    /// with it already.
    #[must_use]
    pub fn otlp(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
            ..Self::default()
        }
    }

    /// Export through `exporter` (another protocol, or a test's in-memory exporter), with
    /// the same bounded queue and counters as OTLP.
    #[must_use]
    pub fn exporter<E: SpanExporter + 'static>(exporter: E) -> Self {
        Self {
            exporter: Some(Box::new(move |counters, config| {
                BatchSpanProcessor::builder(Counted {
                    inner: exporter,
                    counters,
                })
                .with_batch_config(config)
                .build()
            })),
            ..Self::default()
        }
    }

    /// Spans with ids but exported nowhere: for logs that carry trace and span ids.
    #[must_use]
    pub fn ids_only() -> Self {
        Self::default()
    }

    /// The resource's `service.name` (default `durable-agents`).
    #[must_use]
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Make a span's OpenTelemetry context the active one (`opentelemetry::Context::current`)
    /// while the span is entered (default off). Needed only by instrumentation that reads
    /// OpenTelemetry's active context rather than `tracing`'s current span (which
    /// `tracing_opentelemetry::OpenTelemetrySpanExt::context` reads, and so does everything
    /// here): it costs a context switch at every poll of every instrumented future, a
    /// measurable part of the spans' cost (`BENCHMARKS.md`, telemetry overhead).
    #[must_use]
    pub fn activate_context(mut self, on: bool) -> Self {
        self.activate_context = on;
        self
    }

    /// How many finished spans wait for export at most; past that, spans are dropped
    /// rather than a step held up (default 2,048).
    #[must_use]
    pub fn queue(mut self, spans: usize) -> Self {
        self.queue = spans.max(1);
        self
    }

    /// How long finished spans wait to be sent in one batch (default 1 s).
    #[must_use]
    pub fn batch_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// How long one export may take before it counts as failed (default 5 s).
    #[must_use]
    pub fn export_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The endpoint spans are posted to, if they are exported.
    fn traces_url(&self) -> Option<String> {
        self.endpoint.as_ref().map(|base| {
            let base = base.trim_end_matches('/');
            if base.ends_with("/v1/traces") {
                base.to_owned()
            } else {
                format!("{base}/v1/traces")
            }
        })
    }

    /// Build the tracer provider, and install the runner's [`TraceExporter`] hook.
    pub(crate) fn build(self) -> Result<TracePipeline, ObserveError> {
        let stats = Arc::new(Counters::default());
        let mut provider = SdkTracerProvider::builder()
            .with_id_generator(RunIds)
            .with_resource(
                Resource::builder()
                    .with_service_name(self.service_name.clone())
                    .build(),
            );
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(self.queue)
            .with_scheduled_delay(self.delay)
            .build();
        let url = self.traces_url();
        let processor = match (self.exporter, url) {
            (Some(custom), _) => Some(custom(stats.clone(), batches)),
            (None, Some(url)) => {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(SpawnedClient::new()?)
                    .with_endpoint(url)
                    .with_timeout(self.timeout)
                    .build()
                    .map_err(|e| ObserveError::Traces(e.to_string()))?;
                let counted = Counted {
                    inner: exporter,
                    counters: stats.clone(),
                };
                Some(
                    BatchSpanProcessor::builder(counted)
                        .with_batch_config(batches)
                        .build(),
                )
            }
            (None, None) => None,
        };
        if let Some(processor) = processor {
            provider = provider.with_span_processor(processor);
        }
        let provider = provider.build();
        let tracer = provider.tracer_with_scope(
            opentelemetry::InstrumentationScope::builder(SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .with_schema_url(format!(
                    "https://opentelemetry.io/schemas/{GENAI_CONVENTIONS}"
                ))
                .build(),
        );
        let hook = RunSpans {
            tracer: tracer.clone(),
        };
        if agent_core::trace::install(Box::new(hook)).is_err() {
            return Err(ObserveError::AlreadyInstalled("a trace exporter"));
        }
        Ok(TracePipeline {
            provider,
            tracer,
            stats: TraceStats { counters: stats },
            activate_context: self.activate_context,
        })
    }
}

/// What [`Traces::build`] made: the provider (flushed at shutdown), the tracer the
/// `tracing` layer exports through, and the export counters.
pub(crate) struct TracePipeline {
    pub(crate) provider: SdkTracerProvider,
    pub(crate) tracer: SdkTracer,
    pub(crate) stats: TraceStats,
    pub(crate) activate_context: bool,
}

/// Counters of the span export: how many spans reached the collector, and how many were
/// lost to failed exports (a collector down or refusing); the metric
/// `durable_agents_spans_exported_total` counts the same. Spans dropped because the
/// queue was full are counted by neither; the SDK reports them when it shuts down.
#[derive(Clone, Debug)]
pub struct TraceStats {
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    exported: AtomicU64,
    failed: AtomicU64,
}

impl TraceStats {
    /// Spans the collector accepted.
    #[must_use]
    pub fn exported(&self) -> u64 {
        self.counters.exported.load(Ordering::Relaxed)
    }

    /// Spans lost to exports that failed.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }
}

/// The OTLP exporter, counting what it sends.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counter = if result.is_ok() {
            &self.counters.exported
        } else {
            &self.counters.failed
        };
        counter.fetch_add(spans, Ordering::Relaxed);
        agent_core::metrics::spans_exported(result.is_ok(), spans);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The workspace's reqwest client (rustls on *ring*), its requests run on the tokio
/// runtime that built it: the SDK's batch processor exports from a thread of its own,
/// where reqwest's async client has no reactor.
#[derive(Debug)]
struct SpawnedClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl SpawnedClient {
    fn new() -> Result<Self, ObserveError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ObserveError::Traces("install telemetry inside a tokio runtime".to_owned())
        })?;
        let tls =
            agent_llm::tls_client_config().map_err(|e| ObserveError::Traces(e.to_string()))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .user_agent(concat!(
                "durable-agents-observe/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| ObserveError::Traces(e.to_string()))?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for SpawnedClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

thread_local! {
    /// The ids the next span made on this thread takes (the run's span, exported by
    /// [`RunSpans::finish`]): the SDK draws every span's ids from the provider's
    /// [`IdGenerator`], and a run's are derived, not drawn.
    static NEXT_IDS: std::cell::Cell<Option<(TraceId, SpanId)>> = const { std::cell::Cell::new(None) };
}

/// Random ids, except for the run's span being exported on this thread.
#[derive(Debug)]
struct RunIds;

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(std::cell::Cell::get)
            .map_or_else(|| RandomIdGenerator::default().new_trace_id(), |(t, _)| t)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(std::cell::Cell::get)
            .map_or_else(|| RandomIdGenerator::default().new_span_id(), |(_, s)| s)
    }
}

/// The runner's hook ([`TraceExporter`]) on the OpenTelemetry SDK.
struct RunSpans {
    tracer: SdkTracer,
}

impl fmt::Debug for RunSpans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSpans").finish_non_exhaustive()
    }
}

fn remote(parent: TraceParent) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

fn at(millis: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

impl TraceExporter for RunSpans {
    fn current(&self) -> Option<TraceParent> {
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        (sc.is_valid() && sc.is_sampled()).then(|| TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
        })
    }

    fn adopt(&self, span: &tracing::Span, parent: TraceParent) {
        // Refused only for a span that is disabled or already entered: then it keeps the
        // parent it has.
        let _ = span.set_parent(remote(parent));
    }

    fn link(&self, span: &tracing::Span, to: TraceParent) {
        span.add_link(remote(to).span().span_context().clone());
    }

    fn finish(&self, run: &RunTrace, record: &RunRecord) {
        let parent = run.parent.map_or_else(Context::new, remote);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", record.agent.clone()),
            KeyValue::new("gen_ai.conversation.id", record.id.clone()),
            KeyValue::new("run_id", record.id.clone()),
            KeyValue::new("run.status", record.status.as_str()),
            KeyValue::new("version", i64::try_from(record.version).unwrap_or(i64::MAX)),
        ];
        if let Some(error) = &record.error {
            attributes.push(KeyValue::new("error.type", error.code.as_str().to_owned()));
        }
        let builder = self
            .tracer
            .span_builder(format!("invoke_agent {}", record.agent))
            .with_kind(SpanKind::Internal)
            .with_start_time(at(record.created_at))
            .with_attributes(attributes);
        NEXT_IDS.with(|ids| {
            ids.set(Some((
                TraceId::from_bytes(run.trace_id),
                SpanId::from_bytes(run.span_id),
            )));
        });
        let mut span = builder.start_with_context(&self.tracer, &parent);
        NEXT_IDS.with(std::cell::Cell::take);
        if let Some(error) = &record.error {
            span.set_status(Status::error(error.code.as_str().to_owned()));
        }
        span.end_with_timestamp(at(record.updated_at.max(record.created_at)));
    }
}
