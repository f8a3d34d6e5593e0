//! A worker process of the reliability battery: drives runs of the shop agent (or, with
//! `"agents": "tree"`, of the tree's parent and child agents, one worker each; with
//! `"agents": "triggers"`, of the triggers soak's agent, ticking its schedule and consuming
//! NATS and MQTT messages) from a
//! PostgreSQL schema until SIGTERM (or until every run is final), then prints one JSON line,
//! its [`e2e::procs::WorkerReport`]. Options come as JSON in `E2E_WORKER_OPTS`;
//! `--agent-version N` on the command line overrides its `agent_version` (1: the shop,
//! 2: its version 2, which migrates version 1 runs).

use e2e::procs::{WorkerOpts, run_worker};

#[tokio::main]
async fn main() {
    // Logs on stderr (errors only unless RUST_LOG says otherwise); traces to the collector
    // OTEL_EXPORTER_OTLP_ENDPOINT names, if set (the traces test).
    let telemetry = agent_observe::Telemetry::from_env()
        .and_then(|t| {
            t.log_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "error".to_owned()))
                .install()
        })
        .unwrap_or_else(|e| {
            eprintln!("e2e-worker: telemetry: {e}");
            std::process::exit(2);
        });
    let Ok(json) = std::env::var("E2E_WORKER_OPTS") else {
        eprintln!("e2e-worker: set E2E_WORKER_OPTS to the worker's options as JSON");
        std::process::exit(2);
    };
    let mut opts: WorkerOpts = match serde_json::from_str(&json) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("e2e-worker: bad E2E_WORKER_OPTS: {e}");
            std::process::exit(2);
        }
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if let ("--agent-version", Some(Ok(v @ 1..=2))) =
            (arg.as_str(), args.next().map(|v| v.parse::<u32>()))
        {
            opts.agent_version = v;
        } else {
            eprintln!("e2e-worker: usage: e2e-worker [--agent-version 1|2]");
            std::process::exit(2);
        }
    }
    // Registered before connecting, so an early SIGTERM is a clean shutdown too.
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("e2e-worker: cannot handle SIGTERM: {e}");
            std::process::exit(2);
        }
    };
    let term = async move {
        sigterm.recv().await;
    };
    let report = run_worker(&opts, term).await;
    telemetry.shutdown();
    println!(
        "{}",
        serde_json::to_string(&report).expect("report serializes")
    );
}
