//! Prometheus metrics: the recorder, the `/metrics` endpoint, and the gauges read from the
//! store.
//!
//! The crates record through the `metrics` facade ([`agent_core::metrics`] names every
//! metric); [`Metrics::install`] installs the Prometheus recorder for the whole process,
//! with histogram buckets from half a millisecond to a minute. Then either:
//!
//! - a worker process serves the scrape on an address of its own, [`serve_metrics`];
//! - a server mounts [`Metrics::route`] in its axum router, or hands
//!   [`Metrics::render`] to `agentctl serve`'s API (`ApiConfig::with_metrics`).
//!
//! Runs by status and queue depths need a read of the store: [`RunGauges::spawn`] counts
//! them on a timer (one grouped count per agent), in one process of a deployment.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_observe::metrics::serve_metrics;
//!
//! // In the worker's `main`, before the worker starts.
//! let server = serve_metrics("127.0.0.1:9464".parse()?).await?;
//! println!("metrics on http://{}/metrics", server.local_addr());
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agent_core::metrics::{
    BATCH_BUCKETS, CAPACITY_BUCKETS, CAPACITY_WAIT, LATENCY_BUCKETS, STORE_WRITES_PER_STATEMENT,
};
use agent_core::store::HistoryStore;
use axum::Router;
use axum::http::header;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinHandle;

/// The content type of the Prometheus text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often histograms are compacted when nobody scrapes (`run_upkeep`): their samples
/// wait in a buffer until then, so this bounds its memory.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why the metrics could not be installed or served.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Another `metrics` recorder is installed in this process.
    #[error("cannot install the Prometheus recorder: {0}")]
    Install(String),
    /// The address could not be bound.
    #[error("cannot serve metrics on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The process's Prometheus recorder, installed once: what renders a scrape. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    handle: PrometheusHandle,
}

static INSTALLED: OnceLock<Result<Metrics, String>> = OnceLock::new();

impl Metrics {
    /// Install the Prometheus recorder for this process (once: later calls return the
    /// same one), with the help texts of every metric ([`agent_core::metrics::describe`])
    /// and buckets: [`LATENCY_BUCKETS`] for the latency histograms, [`BATCH_BUCKETS`] for
    /// the writes per statement, [`CAPACITY_BUCKETS`] for the waits under rate limits.
    ///
    /// # Errors
    /// [`MetricsError::Install`] when another `metrics` recorder was installed first.
    pub fn install() -> Result<Self, MetricsError> {
        INSTALLED
            .get_or_init(|| {
                let handle = PrometheusBuilder::new()
                    .set_buckets(LATENCY_BUCKETS)
                    .and_then(|b| {
                        b.set_buckets_for_metric(
                            Matcher::Full(STORE_WRITES_PER_STATEMENT.to_owned()),
                            BATCH_BUCKETS,
                        )
                    })
                    .and_then(|b| {
                        b.set_buckets_for_metric(
                            Matcher::Full(CAPACITY_WAIT.to_owned()),
                            CAPACITY_BUCKETS,
                        )
                    })
                    .and_then(PrometheusBuilder::install_recorder)
                    .map_err(|e| e.to_string())?;
                agent_core::metrics::describe();
                let upkeep = handle.clone();
                // A thread, not a task: the recorder may be installed before any runtime.
                std::thread::Builder::new()
                    .name("metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        }
                    })
                    .map_err(|e| e.to_string())?;
                Ok(Self { handle })
            })
            .clone()
            .map_err(MetricsError::Install)
    }

    /// A scrape: every metric in the Prometheus text format.
    #[must_use]
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// `GET /metrics`, answering [`render`](Self::render), for any axum router.
    pub fn route<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let this = self.clone();
        Router::new().route(
            "/metrics",
            get(move || {
                let this = this.clone();
                async move { ([(header::CONTENT_TYPE, TEXT_FORMAT)], this.render()) }
            }),
        )
    }
}

/// The metrics endpoint served on an address of its own; serving stops when this is
/// dropped.
#[derive(Debug)]
#[must_use = "the endpoint stops when this is dropped"]
pub struct MetricsServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// The address it listens on (the port chosen when bound to port 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Install the recorder ([`Metrics::install`]) and serve `GET /metrics` on `addr`, for a
/// worker process. Nothing else is served there, and nothing there needs a token: the
/// metrics' labels carry no run id and nothing secret, and the address is the operator's
/// to choose (loopback, or the network Prometheus scrapes from).
///
/// # Errors
/// [`MetricsError::Install`] as [`Metrics::install`]; [`MetricsError::Io`] when `addr`
/// cannot be bound.
pub async fn serve_metrics(addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
    let metrics = Metrics::install()?;
    let io = |source| MetricsError::Io { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let app = metrics.route::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    Ok(MetricsServer { addr, task })
}

/// The gauges read from the store ([`agent_core::metrics::RUNS`],
/// [`agent_core::metrics::QUEUE_DEPTH`]), refreshed on a timer until this is dropped.
#[derive(Debug)]
#[must_use = "the gauges stop being refreshed when this is dropped"]
pub struct RunGauges {
    task: JoinHandle<()>,
}

impl RunGauges {
    /// Count the runs in `store` every `every` ([`agent_core::metrics::record_run_counts`]:
    /// one grouped count per agent). On a timer rather than on each scrape, so that the
    /// store's cost does not grow with the number of scrapers; start it in one process of a
    /// deployment (the server, or one worker), since every worker would count the same
    /// runs.
    pub fn spawn(store: Arc<dyn HistoryStore>, every: Duration) -> Self {
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = agent_core::metrics::record_run_counts(store.as_ref()).await {
                    tracing::warn!(error = %e, "could not count the runs for the metrics");
                }
            }
        });
        Self { task }
    }
}

impl Drop for RunGauges {
    fn drop(&mut self) {
        self.task.abort();
    }
}
