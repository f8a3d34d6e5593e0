//! A digest agent started by the clock.
//!
//! ```sh
//! cargo run --example digest                 # a schedule ticks every second for 4 s, on SQLite
//! cargo run --example digest -- --seconds 10 # longer
//! agentctl schedules show digest-every-second  # then: the schedule and its ticks' runs
//! nats-server -js &                          # and with a NATS server (JetStream on):
//! NATS_URL=nats://127.0.0.1:4222 cargo run --example digest  # messages start digests too
//! ```
//!
//! The example creates a schedule (an interval of one second; a cron expression in a time
//! zone works the same way) and runs one worker, which ticks the schedule before each
//! claim: each tick starts exactly one run, named `digest-every-second@<tick>` and
//! labelled with the schedule and the tick, however many workers tick and whoever crashes.
//! Each run gathers its items, then waits on a durable timer (stored with the run, holding
//! no worker) before it sends the digest once. At the end the schedule is paused, and the
//! runs its ticks started are listed. Run it again: the schedule is found as it was left,
//! resumed, and ticks on.
//!
//! With `NATS_URL`, a trigger also consumes the subject `digests.requested` (a JetStream
//! stream `DIGESTS` the example creates if missing): each message, `{"topic": "..."}`,
//! starts one digest run, acknowledged only once the run is committed, its message id the
//! run's dedup key. The example publishes one request itself, twice with the same
//! `Nats-Msg-Id`, and one run is started.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use durable_agents::ToolBox;
use durable_agents::backend::now_ms;
use durable_agents::runner::{Runner, Worker, WorkerConfig};
use durable_agents::schedule::{
    CatchUp, NewSchedule, OverlapPolicy, ScheduleSpec, create_schedule, pause_schedule,
    resume_schedule,
};
use durable_agents::store::{RunFilter, Store};
use examples::digest::{Digest, Handlers, TRIGGER, start_from_nats};
use examples::outln;
use examples::stores;

/// The schedule this example creates.
const SCHEDULE: &str = "digest-every-second";

/// A digest agent started by a schedule.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// SQLite file of runs (the embedded default store). Ignored when `DATABASE_URL` is set.
    #[arg(long, env = "AGENT_DB", default_value = stores::DEFAULT_DB)]
    db: PathBuf,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// How long the worker runs, ticking the schedule.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// A NATS server with JetStream: requests on `digests.requested` start digests too.
    #[arg(long, env = "NATS_URL")]
    nats: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let opened = stores::open(args.database_url.as_deref(), &args.db).await?;
    outln!("store: {}", opened.description);
    let store: Arc<dyn Store> = Arc::clone(&opened.store);
    let handlers = Handlers::default();
    let runner: Runner<Digest, Handlers> =
        Runner::new(Arc::clone(&store), handlers.clone(), ToolBox::new())?;
    let new = NewSchedule {
        id: SCHEDULE.to_owned(),
        agent: "Digest".to_owned(),
        spec: ScheduleSpec::Interval {
            every_ms: 1_000,
            anchor_ms: 0,
        },
        jitter_ms: 0,
        overlap: OverlapPolicy::AllowAll,
        catch_up: CatchUp::Skip,
        paused: false,
        initial_state: serde_json::to_value(Digest::Start {
            topic: "durable agents".to_owned(),
        })?,
        labels: [("example".to_owned(), "digest".to_owned())].into(),
    };
    // Creating it again with the same definition finds it as it was left: paused by an
    // earlier run of the example, it is resumed and ticks on from now.
    let schedule = create_schedule(store.as_ref(), new, Some(&runner), now_ms()).await?;
    if schedule.paused {
        resume_schedule(store.as_ref(), SCHEDULE, now_ms()).await?;
        outln!("schedule `{SCHEDULE}` found, resumed: every second");
    } else {
        outln!("schedule `{SCHEDULE}` created: every second");
    }
    if let Some(url) = &args.nats {
        start_from_nats(url, &runner, &store).await?;
    } else {
        outln!("(set NATS_URL to a NATS server with JetStream to start digests from messages too)");
    }
    let worker = Worker::new(
        runner,
        WorkerConfig {
            poll_interval: Duration::from_millis(200),
            ..WorkerConfig::default()
        },
    );
    outln!("a worker ticks it for {} s ...", args.seconds);
    worker
        .run_until(tokio::time::sleep(Duration::from_secs(args.seconds)))
        .await;
    pause_schedule(store.as_ref(), SCHEDULE, now_ms()).await?;

    let runs = store
        .list_runs(&RunFilter {
            labels: [("schedule".to_owned(), SCHEDULE.to_owned())].into(),
            ..RunFilter::default()
        })
        .await?;
    outln!("\nruns its ticks started ({}), newest first:", runs.len());
    for r in runs.iter().take(8) {
        let tick = r.labels.get("schedule.tick").map_or("?", String::as_str);
        outln!(
            "  {:<48} tick {tick}  {} in {}",
            r.id,
            r.status,
            r.state_name
        );
    }
    if args.nats.is_some() {
        let by_message = store
            .list_runs(&RunFilter {
                labels: [("trigger".to_owned(), TRIGGER.to_owned())].into(),
                ..RunFilter::default()
            })
            .await?;
        outln!("\nruns NATS messages started ({}):", by_message.len());
        for r in &by_message {
            let message = r.labels.get("trigger.message").map_or("?", String::as_str);
            outln!(
                "  {:<48} message {message}  {} in {}",
                r.id,
                r.status,
                r.state_name
            );
        }
    }
    let sent = handlers.outbox.lock().expect("the outbox").len();
    outln!(
        "digests sent by this process: {sent} (each run sends once; a run whose timer had not \
         come due when the worker stopped is sent by the next)"
    );
    outln!("schedule `{SCHEDULE}` paused; run again to resume it");
    opened.close().await;
    Ok(())
}
