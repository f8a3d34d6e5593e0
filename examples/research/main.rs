//! The research agent: a tree of runs.
//!
//! ```sh
//! cargo run --example research                           # one report, three child agents, on SQLite
//! cargo run --example research -- --crash-after-steps 3  # kill the process mid-tree...
//! cargo run --example research                           # ...and the whole tree resumes
//! ```
//!
//! A `Report` outlines a question into three topics and starts a `Research` child for each;
//! each child searches three sources at once. While they run, the parent is stored as
//! waiting and holds no worker; once the last child is final it is woken, the scripted
//! reviewer reads the findings, and the report is published once. Offline: the search, the
//! publisher and the reviewer are stand-ins, named so.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use durable_agents::Agent;
use durable_agents::runner::{FaultHook, NoFaults, Runner, RunnerConfig, Worker, WorkerConfig};
use durable_agents::store::{RunFilter, RunRecord, RunStatus, Store, new_run_id};
use examples::crash::CrashAfter;
use examples::outln;
use examples::research::{self, Handlers, Report, Research};
use examples::{report, stores};

/// A report researched by three child agents.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// SQLite file of runs (the embedded default store). Ignored when `DATABASE_URL` is set.
    #[arg(long, env = "AGENT_DB", default_value = stores::DEFAULT_DB)]
    db: PathBuf,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The question to research.
    #[arg(
        long,
        default_value = "How do durable workflows keep side effects exactly once?"
    )]
    question: String,
    /// Simulate a crash: abort the process after this many committed steps (of any run).
    #[arg(long)]
    crash_after_steps: Option<u32>,
    /// Start a new report even if an unfinished one exists (instead of resuming it).
    #[arg(long)]
    fresh: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let _telemetry = examples::out::init_logging("error");
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("the report did not complete: see above");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}", report::error_report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let opened = stores::open(args.database_url.as_deref(), &args.db).await?;
    let result = run_on(&opened, &args).await;
    opened.close().await;
    result
}

async fn run_on(opened: &stores::Opened, args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    outln!("research example · store: {}", opened.description);
    outln!("search, publisher and reviewer: scripted stand-ins (offline), not a model");
    let store = Arc::clone(&opened.store);
    let faults: Arc<dyn FaultHook> = match args.crash_after_steps {
        Some(n) => Arc::new(CrashAfter::new(n, "research")),
        None => Arc::new(NoFaults),
    };
    let config = |worker: &str| RunnerConfig {
        // Stable names: a restarted example reclaims its own leases at once.
        worker_id: worker.to_owned(),
        ..RunnerConfig::default()
    };
    let reports_dir = opened.shop_path.with_extension("reports");
    let parents = Runner::<Report, Handlers>::builder(
        Arc::clone(&store),
        Handlers,
        research::report_tools(reports_dir),
    )
    .router(Arc::new(research::scripted_reviewer()))
    .config(config("research-example-reports"))
    .faults(Arc::clone(&faults))
    .build()?;
    let children = Runner::<Research, Handlers>::builder(
        Arc::clone(&store),
        Handlers,
        research::research_tools(),
    )
    .config(config("research-example-research"))
    .faults(faults)
    .build()?;

    let unfinished = store
        .list_runs(&RunFilter {
            agent: Some(Report::NAME.to_owned()),
            statuses: vec![
                RunStatus::Running,
                RunStatus::Waiting,
                RunStatus::Compensating,
            ],
            ..RunFilter::default()
        })
        .await?;
    let id = match unfinished.first() {
        Some(r) if !args.fresh => {
            outln!("\nfound unfinished report {}: resuming its tree", r.id);
            r.id.clone()
        }
        _ => {
            let id = new_run_id("report");
            parents
                .start(
                    &id,
                    Report::Planning {
                        question: args.question.clone(),
                    },
                )
                .await?;
            outln!("\nstarted {id}: {}", args.question);
            id
        }
    };

    let workers = WorkerConfig {
        expire_own_leases_at_start: true,
        poll_interval: Duration::from_millis(50),
        ..WorkerConfig::default()
    };
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|done| *done).await;
    };
    let parent_worker = Worker::new(parents, workers.clone());
    let child_worker = Worker::new(children, workers);
    let watch = async {
        let record = wait_final(store.as_ref(), &id).await;
        let _ = done_tx.send(true);
        record
    };
    let (_, _, record) = tokio::join!(
        parent_worker.run_until(stop(done_rx.clone())),
        child_worker.run_until(stop(done_rx)),
        watch,
    );
    let record = record?;
    outln!("\n{}", tree(store.as_ref(), &record, "").await?);
    if let Ok(Report::Published { path }) = serde_json::from_value(record.state.clone()) {
        outln!("report published once, at {path}");
    }
    outln!("\n{}", report::timeline(store.as_ref(), &id).await?);
    outln!("where to look next:");
    outln!(
        "  cargo run --bin agentctl -- show {id}            # the parent, its wait and its children"
    );
    outln!("  cargo run --bin agentctl -- runs --parent {id}   # the children");
    outln!(
        "  cargo run --bin agentctl -- graph Report --format mermaid       # the states that start children are marked"
    );
    outln!(
        "  cargo run --example research -- --fresh --crash-after-steps 3   # crash mid-tree, then run again to resume"
    );
    Ok(record.status == RunStatus::Completed)
}

/// Poll the parent until it is final (the workers do the work; this only watches).
async fn wait_final(store: &dyn Store, id: &str) -> Result<RunRecord, Box<dyn std::error::Error>> {
    loop {
        let record = store.load_run(id).await?.ok_or("the report run vanished")?;
        if record.status.is_final() {
            return Ok(record);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run and its children, one line each, as a tree.
async fn tree(
    store: &dyn Store,
    run: &RunRecord,
    indent: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = format!(
        "{} {} · {} in `{}` · v{}",
        run.id, run.agent, run.status, run.state_name, run.version
    );
    let mut kids = store
        .list_runs(&RunFilter {
            spawned_by: Some(run.id.clone()),
            ..RunFilter::default()
        })
        .await?;
    kids.sort_by(|a, b| a.id.cmp(&b.id));
    for (i, kid) in kids.iter().enumerate() {
        let last = i + 1 == kids.len();
        let (branch, next) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        let detail = match serde_json::from_value::<Research>(kid.state.clone()) {
            Ok(Research::Found(f)) => format!(" · {} sources on \"{}\"", f.notes.len(), f.topic),
            _ => String::new(),
        };
        let sub = Box::pin(tree(store, kid, &format!("{indent}{next}"))).await?;
        let _ = write!(out, "\n{indent}{branch}{sub}{detail}");
    }
    Ok(out)
}
