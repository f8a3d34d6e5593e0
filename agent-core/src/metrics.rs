//! Metrics: every name, label and unit the framework records, in one place, and the
//! functions the crates record them with.
//!
//! The crates record through the [`metrics`](https://docs.rs/metrics/0.24) facade, which does
//! nothing until a recorder is installed: a process that exports no metrics pays a call
//! and a small label vector per step, nothing more. `durable-agents-observe` installs the
//! Prometheus recorder and serves `/metrics`; any other `metrics` recorder works too (call
//! [`describe`] after installing it, for the help texts and units).
//!
//! Names follow the Prometheus conventions: the `durable_agents_` prefix, `_total` on
//! counters, base units in the name (`_seconds`). Labels are bounded: agent, state and tool
//! names come from the compiled graph and tool box, statuses, outcomes, codes and error
//! classes from closed enums, models from the provider's answer (one per configured
//! model). A run id, an idempotency key, a signal payload or any other free text is never
//! a label: [`METRICS`] lists the label keys each metric may carry, and the exporter's
//! test checks a rendered scrape against it.
//!
//! The table of metrics with their meaning is `docs/observability.md`.

use std::time::Duration;

use crate::store::{HistoryStore, RunFilter, RunStatus, StoreError};
use crate::tool::ErrorClass;

/// Steps executed, by agent, state and outcome (the run's status after the step, or
/// `lease_lost` / `error` when it committed nothing).
pub const STEPS: &str = "durable_agents_steps_total";
/// How long steps took, from claim-ready run to committed outcome, by agent, state and
/// outcome.
pub const STEP_DURATION: &str = "durable_agents_step_duration_seconds";
/// Runs this process claimed (each claim drives the run until it waits or ends), by agent.
pub const CLAIMS: &str = "durable_agents_claims_total";
/// Runs whose lease this process lost to another worker while driving them, by agent.
pub const LEASES_LOST: &str = "durable_agents_leases_lost_total";
/// Writes grouped into one statement (PostgreSQL) or one transaction (SQLite) by the
/// store's group-commit writer, by backend and kind of write.
pub const STORE_WRITES_PER_STATEMENT: &str = "durable_agents_store_writes_per_statement";
/// Runs in the store, by agent and status (read from the store on a timer).
pub const RUNS: &str = "durable_agents_runs";
/// Runs a worker could take up now or is driving (status `running` or `compensating`), by
/// agent (read from the store on a timer).
pub const QUEUE_DEPTH: &str = "durable_agents_queue_depth";
/// Questions asked of the model by routed states, by agent, model and outcome
/// (`accepted`, `rejected`: the answer was refused, `failed`: no usable answer came).
pub const MODEL_ASKS: &str = "durable_agents_model_asks_total";
/// Asks whose answer was refused or that failed, by agent, model and rejection code
/// (`decision.schema_violation`, `ask.timeout`, ...).
pub const MODEL_REJECTIONS: &str = "durable_agents_model_rejections_total";
/// How long asks took, answer validated, by agent and model.
pub const MODEL_ASK_DURATION: &str = "durable_agents_model_ask_duration_seconds";
/// Tokens billed by the model, by agent, model and direction (`input`, `output`): routed
/// asks and text generations.
pub const MODEL_TOKENS: &str = "durable_agents_model_tokens_total";
/// What the model's answers cost by the configured price table (routed asks priced by
/// their router's, text generations by the generation tool's), in millionths of the
/// currency, by agent, model and currency.
pub const MODEL_COST: &str = "durable_agents_model_cost_microunits_total";
/// Tool calls executed (replays from the journal and cached reads are not), by agent,
/// tool and status (`succeeded`, `failed`).
pub const TOOL_CALLS: &str = "durable_agents_tool_calls_total";
/// Tool calls that failed, by agent, tool and error class (`retryable`, `permanent`,
/// `timeout`, `rate_limited`, `auth`, `disabled`).
pub const TOOL_ERRORS: &str = "durable_agents_tool_errors_total";
/// How long executed tool calls took, every attempt and backoff included, by agent and
/// tool.
pub const TOOL_CALL_DURATION: &str = "durable_agents_tool_call_duration_seconds";
/// How long a step waited for its turn under a rate limit before an ask or a tool call
/// (zero when it had room), by agent and limit: in the worker, or with the run handed back
/// until its turn (the planned wait).
pub const CAPACITY_WAIT: &str = "durable_agents_capacity_wait_seconds";
/// Event streams open on the HTTP API, by transport (`sse`, `websocket`).
pub const EVENT_FOLLOWERS: &str = "durable_agents_event_followers";
/// Spans the trace exporter sent, by outcome (`exported`, `failed`: lost with an export
/// the collector refused or never answered).
pub const SPANS_EXPORTED: &str = "durable_agents_spans_exported_total";

/// The label keys, each bounded as the module docs say.
pub mod label {
    /// The agent's name, from its graph.
    pub const AGENT: &str = "agent";
    /// A state's name, from the agent's graph.
    pub const STATE: &str = "state";
    /// How a step or an ask ended (a closed set per metric).
    pub const OUTCOME: &str = "outcome";
    /// A run's status, or a tool call's.
    pub const STATUS: &str = "status";
    /// A tool's name, from the tool box.
    pub const TOOL: &str = "tool";
    /// A tool error's class.
    pub const CLASS: &str = "class";
    /// A rejection code of the router contract.
    pub const CODE: &str = "code";
    /// The model that answered, as the provider named it (`unknown` when none did).
    pub const MODEL: &str = "model";
    /// `input` or `output` tokens.
    pub const DIRECTION: &str = "direction";
    /// A price table's currency.
    pub const CURRENCY: &str = "currency";
    /// The store's backend: `postgres`, `sqlite`.
    pub const BACKEND: &str = "backend";
    /// The kind of grouped write: `commit`, `entry`, `signal`, or `mixed` (SQLite's one
    /// transaction holds any kind).
    pub const WRITE: &str = "write";
    /// An event stream's transport: `sse`, `websocket`.
    pub const TRANSPORT: &str = "transport";
    /// A rate limit's stored name (`asks:openai/gpt-4o`, `tool:search`), from the runner's
    /// configuration.
    pub const LIMIT: &str = "limit";
}

/// What a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

/// One metric: its name, kind, unit, label keys and help text.
#[derive(Clone, Copy, Debug)]
pub struct MetricDoc {
    /// The full name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The unit (`seconds`), when it has one.
    pub unit: Option<::metrics::Unit>,
    /// Every label key it may carry.
    pub labels: &'static [&'static str],
    /// What it counts or measures.
    pub help: &'static str,
}

use label::{
    AGENT, BACKEND, CLASS, CODE, CURRENCY, DIRECTION, LIMIT, MODEL, OUTCOME, STATE, STATUS, TOOL,
    TRANSPORT, WRITE,
};

/// Every metric the framework records.
pub const METRICS: &[MetricDoc] = &[
    MetricDoc {
        name: STEPS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, STATE, OUTCOME],
        help: "Steps executed, by agent, state and outcome (the run's status after the step, or lease_lost / error).",
    },
    MetricDoc {
        name: STEP_DURATION,
        kind: Kind::Histogram,
        unit: Some(::metrics::Unit::Seconds),
        labels: &[AGENT, STATE, OUTCOME],
        help: "How long steps took, handler, tool calls, asks and commit included.",
    },
    MetricDoc {
        name: CLAIMS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT],
        help: "Runs this process claimed.",
    },
    MetricDoc {
        name: LEASES_LOST,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT],
        help: "Runs whose lease this process lost to another worker.",
    },
    MetricDoc {
        name: STORE_WRITES_PER_STATEMENT,
        kind: Kind::Histogram,
        unit: None,
        labels: &[BACKEND, WRITE],
        help: "Writes grouped into one statement (PostgreSQL) or transaction (SQLite).",
    },
    MetricDoc {
        name: RUNS,
        kind: Kind::Gauge,
        unit: None,
        labels: &[AGENT, STATUS],
        help: "Runs in the store, by agent and status.",
    },
    MetricDoc {
        name: QUEUE_DEPTH,
        kind: Kind::Gauge,
        unit: None,
        labels: &[AGENT],
        help: "Runs a worker could take up now or is driving (running or compensating).",
    },
    MetricDoc {
        name: MODEL_ASKS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, MODEL, OUTCOME],
        help: "Questions asked of the model by routed states (accepted, rejected, failed).",
    },
    MetricDoc {
        name: MODEL_REJECTIONS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, MODEL, CODE],
        help: "Asks whose answer was refused or that failed, by rejection code.",
    },
    MetricDoc {
        name: MODEL_ASK_DURATION,
        kind: Kind::Histogram,
        unit: Some(::metrics::Unit::Seconds),
        labels: &[AGENT, MODEL],
        help: "How long asks of the model took, answer validated.",
    },
    MetricDoc {
        name: MODEL_TOKENS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, MODEL, DIRECTION],
        help: "Tokens billed by the model (routed asks and text generations).",
    },
    MetricDoc {
        name: MODEL_COST,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, MODEL, CURRENCY],
        help: "What the model's answers (routed asks and text generations) cost by the configured price table, in millionths of the currency.",
    },
    MetricDoc {
        name: TOOL_CALLS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, TOOL, STATUS],
        help: "Tool calls executed (not replayed), by status.",
    },
    MetricDoc {
        name: TOOL_ERRORS,
        kind: Kind::Counter,
        unit: None,
        labels: &[AGENT, TOOL, CLASS],
        help: "Tool calls that failed, by error class.",
    },
    MetricDoc {
        name: TOOL_CALL_DURATION,
        kind: Kind::Histogram,
        unit: Some(::metrics::Unit::Seconds),
        labels: &[AGENT, TOOL],
        help: "How long executed tool calls took, attempts and backoff included.",
    },
    MetricDoc {
        name: CAPACITY_WAIT,
        kind: Kind::Histogram,
        unit: Some(::metrics::Unit::Seconds),
        labels: &[AGENT, LIMIT],
        help: "How long steps waited for their turn under a rate limit (zero with room), in the worker or handed back.",
    },
    MetricDoc {
        name: EVENT_FOLLOWERS,
        kind: Kind::Gauge,
        unit: None,
        labels: &[TRANSPORT],
        help: "Event streams open on the HTTP API.",
    },
    MetricDoc {
        name: SPANS_EXPORTED,
        kind: Kind::Counter,
        unit: None,
        labels: &[OUTCOME],
        help: "Spans the trace exporter sent, by outcome (exported, failed).",
    },
];

/// Bucket bounds, in seconds, of the latency histograms (steps, asks, tool calls): from
/// half a millisecond (a step of an in-memory agent) to a minute (a slow model).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Bucket bounds, in seconds, of [`CAPACITY_WAIT`]: from no wait to half an hour (a backlog
/// of runs behind a limit of a few asks a minute).
pub const CAPACITY_BUCKETS: &[f64] = &[
    0.0, 0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0,
];

/// Bucket bounds of [`STORE_WRITES_PER_STATEMENT`]: powers of two up to the largest batch a
/// store is configured with.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Register every metric's help text and unit with the installed recorder (a no-op
/// without one). Call it once, after installing the recorder.
pub fn describe() {
    for m in METRICS {
        match (m.kind, m.unit) {
            (Kind::Counter, Some(unit)) => ::metrics::describe_counter!(m.name, unit, m.help),
            (Kind::Counter, None) => ::metrics::describe_counter!(m.name, m.help),
            (Kind::Gauge, Some(unit)) => ::metrics::describe_gauge!(m.name, unit, m.help),
            (Kind::Gauge, None) => ::metrics::describe_gauge!(m.name, m.help),
            (Kind::Histogram, Some(unit)) => ::metrics::describe_histogram!(m.name, unit, m.help),
            (Kind::Histogram, None) => ::metrics::describe_histogram!(m.name, m.help),
        }
    }
}

/// A step of `agent` in `state` ended with `outcome` (the run's status after it,
/// `lease_lost` or `error`: a bounded label the runner names) after `elapsed`.
pub(crate) fn step(
    agent: &'static str,
    state: &'static str,
    outcome: &'static str,
    elapsed: Duration,
) {
    let labels = [(AGENT, agent), (STATE, state), (OUTCOME, outcome)];
    ::metrics::counter!(STEPS, &labels).increment(1);
    ::metrics::histogram!(STEP_DURATION, &labels).record(elapsed);
}

/// This process claimed a run of `agent`.
pub(crate) fn claimed(agent: &'static str) {
    ::metrics::counter!(CLAIMS, AGENT => agent).increment(1);
}

/// This process lost the lease of a run of `agent`.
pub(crate) fn lease_lost(agent: &'static str) {
    ::metrics::counter!(LEASES_LOST, AGENT => agent).increment(1);
}

/// A store's group-commit writer sent `writes` writes of kind `write` (`commit`, `entry`,
/// `signal`, `mixed`) in one statement or transaction of `backend` (`postgres`, `sqlite`).
/// For store backends.
pub fn store_writes(backend: &'static str, write: &'static str, writes: usize) {
    #[allow(clippy::cast_precision_loss)] // a batch is far below 2^52 writes
    let writes = writes as f64;
    ::metrics::histogram!(STORE_WRITES_PER_STATEMENT, BACKEND => backend, WRITE => write)
        .record(writes);
}

/// The trace exporter sent `spans` spans, `exported` or not (the collector refused or
/// never answered). For exporters.
pub fn spans_exported(exported: bool, spans: u64) {
    let outcome = if exported { "exported" } else { "failed" };
    ::metrics::counter!(SPANS_EXPORTED, OUTCOME => outcome).increment(spans);
}

/// The label of a model's name: `unknown` when the provider named none.
fn model_label(model: &str) -> String {
    if model.is_empty() {
        "unknown".to_owned()
    } else {
        model.to_owned()
    }
}

/// An ask of `agent`'s router answered by `model` ended after `elapsed`: accepted, or
/// refused with `rejection` (a code of the router contract; `failed` says no usable
/// answer came).
pub(crate) fn model_ask(
    agent: &'static str,
    model: &str,
    rejection: Option<(&'static str, bool)>,
    elapsed: Duration,
) {
    let model = model_label(model);
    let outcome = match rejection {
        None => "accepted",
        Some((_, false)) => "rejected",
        Some((_, true)) => "failed",
    };
    ::metrics::counter!(MODEL_ASKS, AGENT => agent, MODEL => model.clone(), OUTCOME => outcome)
        .increment(1);
    if let Some((code, _)) = rejection {
        ::metrics::counter!(MODEL_REJECTIONS, AGENT => agent, MODEL => model.clone(), CODE => code)
            .increment(1);
    }
    ::metrics::histogram!(MODEL_ASK_DURATION, AGENT => agent, MODEL => model).record(elapsed);
}

/// `model` billed `input` and `output` tokens for a question of `agent`'s. For providers.
pub fn model_tokens(agent: &'static str, model: &str, input: Option<u64>, output: Option<u64>) {
    let model = model_label(model);
    for (direction, tokens) in [("input", input), ("output", output)] {
        if let Some(tokens) = tokens {
            ::metrics::counter!(MODEL_TOKENS, AGENT => agent, MODEL => model.clone(), DIRECTION => direction)
                .increment(tokens);
        }
    }
}

/// An answer to `agent` by `model` (a routed ask or a generation) cost `amount` in
/// `currency`. For providers, and the runner for routed asks.
///
/// Counted in millionths of the currency, rounded: Prometheus counters of the `metrics`
/// facade count integers.
pub fn model_cost(agent: &'static str, model: &str, currency: &str, amount: f64) {
    if !(amount.is_finite() && amount > 0.0) {
        return;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // finite, positive
    let micro = (amount * 1_000_000.0).round() as u64;
    ::metrics::counter!(MODEL_COST, AGENT => agent, MODEL => model_label(model), CURRENCY => currency.to_owned())
        .increment(micro);
}

/// A call of `tool` by `agent` ended, failed with `class` or not, after `elapsed`.
pub(crate) fn tool_call(
    agent: &'static str,
    tool: &'static str,
    class: Option<ErrorClass>,
    elapsed: Duration,
) {
    let status = if class.is_some() {
        "failed"
    } else {
        "succeeded"
    };
    ::metrics::counter!(TOOL_CALLS, AGENT => agent, TOOL => tool, STATUS => status).increment(1);
    if let Some(class) = class {
        // The class's name, as the journal's error code (`tool.timeout`) has it after `tool.`.
        let code = class.code();
        let class = code.strip_prefix("tool.").unwrap_or(code);
        ::metrics::counter!(TOOL_ERRORS, AGENT => agent, TOOL => tool, CLASS => class).increment(1);
    }
    ::metrics::histogram!(TOOL_CALL_DURATION, AGENT => agent, TOOL => tool).record(elapsed);
}

/// A step of `agent` waited `wait` for its turn under the limit `limit`.
pub(crate) fn capacity_wait(agent: &'static str, limit: &str, wait: Duration) {
    ::metrics::histogram!(CAPACITY_WAIT, AGENT => agent, LIMIT => limit.to_owned()).record(wait);
}

/// One open event stream, counted in [`EVENT_FOLLOWERS`] until dropped. For HTTP servers.
#[derive(Debug)]
#[must_use = "the stream is counted while this is held"]
pub struct Follower {
    transport: &'static str,
}

impl Follower {
    /// Count one more stream open over `transport` (`sse`, `websocket`).
    pub fn open(transport: &'static str) -> Self {
        ::metrics::gauge!(EVENT_FOLLOWERS, TRANSPORT => transport).increment(1.0);
        Self { transport }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        ::metrics::gauge!(EVENT_FOLLOWERS, TRANSPORT => self.transport).decrement(1.0);
    }
}

/// Read the runs per agent and status from `store` and set [`RUNS`] and [`QUEUE_DEPTH`]:
/// one grouped count per agent ([`HistoryStore::count_runs`]), so the cost is bounded by
/// the number of agents, not of runs read. Statuses with no run are set to zero, so a
/// gauge falls when its runs move on. Call it on a timer (`durable-agents-observe` does),
/// not on every scrape: scrapes from several Prometheus servers would each cost the
/// store the counts.
///
/// # Errors
/// The store's, from listing the agents or counting their runs.
pub async fn record_run_counts(store: &dyn HistoryStore) -> Result<(), StoreError> {
    for agent in store.agents().await? {
        let counts = store
            .count_runs(&RunFilter {
                agent: Some(agent.clone()),
                ..RunFilter::default()
            })
            .await?;
        let mut queued = 0;
        for status in RunStatus::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            if matches!(status, RunStatus::Running | RunStatus::Compensating) {
                queued += n;
            }
            #[allow(clippy::cast_precision_loss)] // counts far below 2^52
            ::metrics::gauge!(RUNS, AGENT => agent.clone(), STATUS => status.as_str())
                .set(n as f64);
        }
        #[allow(clippy::cast_precision_loss)]
        ::metrics::gauge!(QUEUE_DEPTH, AGENT => agent).set(queued as f64);
    }
    Ok(())
}
