//! `agentctl serve`: the store over HTTP (`durable-agents-http`), until Ctrl-C.

use std::process::ExitCode;

use std::sync::Arc;
use std::time::Duration;

use agent_core::store::HistoryStore;
use agent_http::{ApiConfig, ServeError};
use agent_observe::metrics::RunGauges;

use super::Ctx;
use crate::cli::ServeArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

/// How often `--metrics` counts the runs in the store (one grouped count per agent).
const RUN_COUNTS_EVERY: Duration = Duration::from_secs(15);

pub(super) async fn run(cx: Ctx, args: ServeArgs) -> Result<ExitCode> {
    // Traces to the collector `OTEL_EXPORTER_OTLP_ENDPOINT` names, logs on stderr as
    // `AGENT_LOG_FORMAT` says, warnings and errors unless `RUST_LOG` says otherwise
    // (docs/observability.md). Flushed when the server stops. A control binary of one's
    // own (`agentctl::Ctl`) that installed its telemetry already keeps it.
    let telemetry = match agent_observe::Telemetry::from_env().and_then(|t| {
        t.log_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned()))
            .install()
    }) {
        Ok(telemetry) => Some(telemetry),
        Err(agent_observe::ObserveError::AlreadyInstalled(_)) => None,
        Err(e) => return Err(CliError::usage(e.to_string())),
    };
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| {
                    CliError::failed(format!(
                        "cannot read the token file {}: {e}",
                        path.display()
                    ))
                })?
                .trim()
                .to_owned(),
        ),
        None => std::env::var(&args.token_env).ok(),
    }
    .filter(|t| !t.is_empty());
    // Signals sent through the API are stored sealed as a worker stores them.
    let keys =
        agent_core::secrets::SealKeys::from_env().map_err(|e| CliError::usage(e.to_string()))?;
    let mut config = ApiConfig::default()
        .with_seal_keys(keys)
        .with_allowed_hosts(args.allowed_hosts.iter().cloned());
    let has_token = token.is_some();
    let token_len = token.as_deref().map(|t| t.chars().count());
    if let Some(token) = token {
        config = config.with_token(token);
    }
    for origin in &args.cors_origins {
        config = config
            .with_cors_origin(origin)
            .map_err(|e| CliError::usage(e.to_string()))?;
    }
    if let Some(template) = &args.trace_url {
        config = config
            .with_trace_url(template)
            .map_err(|e| CliError::usage(e.to_string()))?;
    }
    // The recorder is the process's; the run counts are read while the server runs.
    let _run_gauges = if args.metrics {
        let metrics = agent_observe::metrics::Metrics::install()
            .map_err(|e| CliError::failed(e.to_string()))?;
        config = config.with_metrics(move || metrics.render());
        let store: Arc<dyn HistoryStore> = Arc::clone(&cx.store) as _;
        Some(RunGauges::spawn(store, RUN_COUNTS_EVERY))
    } else {
        None
    };
    // What `serve` would refuse is said before anything claims to be serving.
    if !args.listen.ip().is_loopback() && !has_token {
        return Err(
            CliError::usage(ServeError::NoToken(args.listen).to_string()).hint(
                "give a token (--token-file, or $DURABLE_AGENTS_TOKEN), or --listen 127.0.0.1:PORT",
            ),
        );
    }
    if let Some(n) = token_len.filter(|n| *n < agent_http::MIN_TOKEN_LEN) {
        return Err(CliError::usage(ServeError::WeakToken(n).to_string()));
    }
    outln!(
        "serving on http://{} (inspector: /ui/, API document: /v1/openapi.json{}); Ctrl-C \
         to stop",
        args.listen,
        if args.metrics {
            ", metrics: /metrics"
        } else {
            ""
        }
    );
    if !has_token {
        cx.out.note(&format!(
            "no token (${} or --token-file): reads only, every write is refused",
            args.token_env
        ));
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let served = agent_http::serve(cx.store, config, args.listen, shutdown).await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match served {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ ServeError::NoToken(_)) => Err(CliError::usage(e.to_string()).hint(
            "give a token (--token-file, or $DURABLE_AGENTS_TOKEN), or --listen 127.0.0.1:PORT",
        )),
        Err(e @ ServeError::WeakToken(_)) => Err(CliError::usage(e.to_string())),
        Err(e) => Err(CliError::failed(e.to_string())),
    }
}
