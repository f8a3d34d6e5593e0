//! A run's place in a distributed trace, and the hook an exporter installs.
//!
//! A run outlives the worker that starts it: it waits for days, its lease passes to
//! another worker after a crash, a new version of the code migrates it. To be **one trace
//! across all of that** without storing anything per step, a run's trace is a function of
//! the run: its span id is derived from its id, and its trace id from its id too, unless
//! the run was started inside a span (a request of the HTTP API, the caller's own span, a
//! parent run), whose context the run then keeps in the label [`TRACE_PARENT_LABEL`]. A
//! child run keeps its parent run's span there, so a tree of runs is one trace. Any worker
//! that claims the run computes the same [`RunTrace`] from the record it claimed.
//!
//! The spans themselves are `tracing` spans named and attributed by the OpenTelemetry
//! GenAI semantic conventions (the crate `durable-agents-observe` pins their version and
//! exports them); this module only carries the context. Without an installed
//! [`TraceExporter`] nothing here runs beyond one atomic load per step, and no run gets the
//! label.

use std::fmt;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::store::{Labels, RunRecord};

/// The label holding the W3C `traceparent` of the span a run was started in: the parent
/// run's span for a child, the request's or caller's span otherwise. It is not part of
/// what makes two starts of one id the same start (a retried start under another span
/// finds the first one's run, and keeps its context).
pub const TRACE_PARENT_LABEL: &str = "trace.parent";

/// A span in a trace, as the W3C `traceparent` header carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace's id (16 bytes, not all zero).
    pub trace_id: [u8; 16],
    /// The span's id (8 bytes, not all zero).
    pub span_id: [u8; 8],
}

impl TraceParent {
    /// Read a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`, version `00`), or `None`
    /// when it is not one or names the invalid all-zero trace or span.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('-');
        let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        let mut flag = [0; 1];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        hex::decode_to_slice(flags, &mut flag).ok()?;
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self { trace_id, span_id })
    }
}

/// The `traceparent` form, sampled: `00-<trace id>-<span id>-01`.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-01",
            hex::encode(self.trace_id),
            hex::encode(self.span_id)
        )
    }
}

/// Where a run's spans go: its trace, the span that stands for the whole run, and the span
/// it was started in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTrace {
    /// The trace every span of the run belongs to.
    pub trace_id: [u8; 16],
    /// The run's own span (`invoke_agent`), exported once when the run ends and the parent
    /// of every span a worker makes for it.
    pub span_id: [u8; 8],
    /// The span the run was started in, if any (the parent of the run's span).
    pub parent: Option<TraceParent>,
}

impl RunTrace {
    /// The trace of run `run_id` with `labels`: the same on every worker.
    #[must_use]
    pub fn of(run_id: &str, labels: &Labels) -> Self {
        let parent = labels
            .get(TRACE_PARENT_LABEL)
            .and_then(|v| TraceParent::parse(v));
        let trace_id = parent.map_or_else(|| derived(b"trace", run_id), |p| p.trace_id);
        Self {
            trace_id,
            span_id: derived(b"span", run_id),
            parent,
        }
    }

    /// The trace of `record`.
    #[must_use]
    pub fn of_record(record: &RunRecord) -> Self {
        Self::of(&record.id, &record.labels)
    }

    /// The run's span as a parent: what a child run's [`TRACE_PARENT_LABEL`] holds.
    #[must_use]
    pub fn as_parent(&self) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span_id,
        }
    }
}

/// The first `N` bytes of SHA-256 over a domain and the run's id, never all zero (which
/// W3C reserves for "invalid").
fn derived<const N: usize>(domain: &[u8], run_id: &str) -> [u8; N] {
    let digest = Sha256::new()
        .chain_update(b"durable-agents/")
        .chain_update(domain)
        .chain_update([0])
        .chain_update(run_id.as_bytes())
        .finalize();
    let mut id = [0; N];
    id.copy_from_slice(&digest[..N]);
    if id == [0; N] {
        id[N - 1] = 1;
    }
    id
}

/// What exports a run's spans. One is installed per process ([`install`]), by the crate
/// `durable-agents-observe` or a user's own; the runner calls it at three points.
pub trait TraceExporter: Send + Sync + 'static {
    /// The span the calling code is in, if it is in one that is exported: a run started
    /// there records it in [`TRACE_PARENT_LABEL`].
    fn current(&self) -> Option<TraceParent>;

    /// Make `span`, just created and not yet entered, a child of `parent`: a run's span
    /// for the spans a worker makes for the run (rather than of whatever the worker was
    /// doing), a caller's span for a request that came with a `traceparent`.
    fn adopt(&self, span: &tracing::Span, parent: TraceParent);

    /// Link `span` to `to` (a span of another trace it concerns: the run a signal is for).
    fn link(&self, span: &tracing::Span, to: TraceParent);

    /// `record`'s run has ended on this worker: export the run's span, from its creation
    /// to its last change, with its outcome.
    fn finish(&self, run: &RunTrace, record: &RunRecord);
}

static EXPORTER: OnceLock<Box<dyn TraceExporter>> = OnceLock::new();

/// Install the process's [`TraceExporter`].
///
/// # Errors
/// Gives `exporter` back when one is installed already.
pub fn install(exporter: Box<dyn TraceExporter>) -> Result<(), Box<dyn TraceExporter>> {
    EXPORTER.set(exporter)
}

/// The installed exporter, if any.
#[must_use]
pub fn exporter() -> Option<&'static dyn TraceExporter> {
    EXPORTER.get().map(AsRef::as_ref)
}

/// `labels` with [`TRACE_PARENT_LABEL`] set to the span the caller is in, when an exporter
/// is installed, the caller is in an exported span, the labels do not name a parent yet,
/// and there is room for one more label.
pub(crate) fn with_current_parent(mut labels: Labels) -> Labels {
    if labels.len() < crate::store::labels::MAX_LABELS
        && !labels.contains_key(TRACE_PARENT_LABEL)
        && let Some(parent) = exporter().and_then(TraceExporter::current)
    {
        labels.insert(TRACE_PARENT_LABEL.to_owned(), parent.to_string());
    }
    labels
}

/// The labels of a child of run `parent_id` with `parent_labels`: its parent's span, when
/// an exporter is installed.
pub(crate) fn child_labels(parent_id: &str, parent_labels: &Labels) -> Labels {
    let mut labels = Labels::new();
    if exporter().is_some() {
        let parent = RunTrace::of(parent_id, parent_labels).as_parent();
        labels.insert(TRACE_PARENT_LABEL.to_owned(), parent.to_string());
    }
    labels
}

/// A new span of `run` adopted by the exporter, if one is installed.
pub(crate) fn adopt(span: &tracing::Span, run_id: &str, labels: &Labels) {
    if let Some(exporter) = exporter() {
        exporter.adopt(span, RunTrace::of(run_id, labels).as_parent());
    }
}

/// Make `span` (just created, not entered) a child of `parent`, the span a caller sent in
/// a W3C `traceparent` header, when an exporter is installed: the HTTP API continues its
/// callers' traces, and a run started there is in the caller's trace.
pub fn continue_trace(span: &tracing::Span, parent: TraceParent) {
    if let Some(exporter) = exporter() {
        exporter.adopt(span, parent);
    }
}

/// Link `span` to the span of `record`'s run, when an exporter is installed: a signal sent
/// through the HTTP API links the request to the run it wakes.
pub fn link_to_run(span: &tracing::Span, record: &RunRecord) {
    if let Some(exporter) = exporter() {
        exporter.link(span, RunTrace::of_record(record).as_parent());
    }
}

/// `record`'s run ended here: its span exported, if an exporter is installed.
pub(crate) fn finish(record: &RunRecord) {
    if let Some(exporter) = exporter()
        && record.status.is_final()
    {
        exporter.finish(&RunTrace::of_record(record), record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_rejects_what_w3c_rejects() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(text).unwrap();
        assert_eq!(parent.to_string(), text);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_run_is_its_own_trace_unless_started_in_a_span() {
        let alone = RunTrace::of("order-1", &Labels::new());
        assert_eq!(alone, RunTrace::of("order-1", &Labels::new()));
        assert_eq!(alone.parent, None);
        let other = RunTrace::of("order-2", &Labels::new());
        assert_ne!(alone.trace_id, other.trace_id);
        assert_ne!(alone.span_id, other.span_id);

        let mut labels = Labels::new();
        labels.insert(TRACE_PARENT_LABEL.to_owned(), alone.as_parent().to_string());
        let child = RunTrace::of("order-1/v3/0", &labels);
        assert_eq!(
            child.trace_id, alone.trace_id,
            "a child is in its parent's trace"
        );
        assert_eq!(child.parent, Some(alone.as_parent()));
        assert_ne!(child.span_id, alone.span_id);

        labels.insert(
            TRACE_PARENT_LABEL.to_owned(),
            "not a traceparent".to_owned(),
        );
        assert_eq!(
            RunTrace::of("order-1/v3/0", &labels),
            RunTrace::of("order-1/v3/0", &Labels::new()),
            "an unreadable label is ignored"
        );
    }
}
