//! One module per command; [`run`] opens the store and dispatches.

use std::process::ExitCode;
use std::sync::Arc;

use agent_core::store::{InspectedRun, RunRecord, Store};
use agent_sqlite::Access;

use crate::cli::{Cli, Command};
use crate::error::{CliError, Result};
use crate::output::Output;
use crate::registry::{Registered, Replayers};
use crate::store;

mod agents;
mod backup;
mod budget;
mod coverage;
mod edit;
mod export;
mod follow;
mod fork;
mod graph;
mod limits;
mod migrate;
mod operate;
mod prune;
mod repair;
mod replay;
mod requeue;
mod runs;
mod schedules;
mod serve;
mod show;
mod signal;
mod state;
mod stats;
mod tools;
mod triggers;
mod verify;

/// What every command gets.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub store: Arc<dyn Store>,
    pub out: Output,
}

impl Ctx {
    /// The run, or a not-found error that says how to list runs.
    pub(crate) async fn run(&self, id: &str) -> Result<RunRecord> {
        self.store
            .load_run(id)
            .await?
            .ok_or_else(|| CliError::no_run(id))
    }

    /// The run as far as its row reads (for the commands that diagnose it: `show`,
    /// `verify`, `repair`), or a not-found error.
    pub(crate) async fn inspect(&self, id: &str) -> Result<InspectedRun> {
        self.store
            .inspect_run(id)
            .await?
            .ok_or_else(|| CliError::no_run(id))
    }
}

/// The version `at` asks for (default: the run's current one), if the run has it.
fn version_of(run: &RunRecord, at: Option<u64>) -> Result<u64> {
    let version = at.unwrap_or(run.version);
    if version > run.version {
        return Err(CliError::not_found(format!(
            "run `{}` has no version {version}: it is at version {}",
            run.id, run.version
        ))
        .hint(format!(
            "versions 0..={} exist (unless pruned); `agentctl show {}` lists them",
            run.version, run.id
        )));
    }
    Ok(version)
}

/// Run the command line.
pub(crate) async fn run(
    cli: Cli,
    out: Output,
    agents: &[Registered],
    replays: &Replayers,
) -> Result<ExitCode> {
    let access = if cli.command.writes() {
        Access::ReadWrite
    } else {
        Access::ReadOnly
    };
    // These open the store their own way: `migrate` may create it, `backup` needs the
    // SQLite store itself and never opens PostgreSQL, `replay` of files opens none.
    match cli.command {
        Command::Migrate(args) => return migrate::run(&cli.global, out, &args, agents).await,
        Command::Backup(args) => return backup::run(&cli.global, out, &args).await,
        Command::Replay(args) => return replay::run(&cli.global, out, &args, replays).await,
        _ => {}
    }
    let store = store::open_store(&cli.global, access).await?;
    let cx = Ctx { store, out };
    match cli.command {
        Command::Runs(args) => runs::run(&cx, args).await,
        Command::Show(args) => {
            let code = show::run(&cx, &args.run).await?;
            if args.follow {
                follow::run(&cx, &args.run).await
            } else {
                Ok(code)
            }
        }
        Command::State(args) => state::run(&cx, &args).await,
        Command::Fork(args) => fork::run(&cx, &args).await,
        Command::Export(args) => export::run(&cx, &args).await,
        Command::Graph(args) => graph::run(&cx, args).await,
        Command::Coverage(args) => coverage::run(&cx, &args).await,
        Command::Stats(args) => stats::run(&cx, args).await,
        Command::Signal(args) => signal::run(&cx, args).await,
        Command::Tools(args) => tools::run(&cx, args.action).await,
        Command::Prune(args) => prune::run(&cx, &args).await,
        Command::Resume(args) => requeue::run(&cx, &args.run, requeue::Mode::Resume).await,
        Command::Retry(args) => requeue::run(&cx, &args.run, requeue::Mode::Retry).await,
        Command::Repair(args) => repair::run(&cx, &args).await,
        Command::Edit(args) => edit::run(&cx, args).await,
        Command::Budget(args) => budget::run(&cx, &args).await,
        Command::Verify(args) => match args.run {
            Some(run) => verify::run(&cx, &run).await,
            None => verify::all(&cx).await,
        },
        Command::Agents => agents::run(&cx).await,
        Command::Limits => limits::run(&cx).await,
        Command::Cancel(args) => operate::cancel(&cx, &args).await,
        Command::Terminate(args) => operate::terminate(&cx, &args).await,
        Command::DropSignal(args) => operate::drop_signal(&cx, &args).await,
        Command::Serve(args) => serve::run(cx, args).await,
        Command::Schedules(args) => schedules::run(&cx, args.action).await,
        Command::Triggers(args) => triggers::run(&cx, args.action).await,
        Command::Migrate(_) | Command::Backup(_) | Command::Replay(_) => {
            unreachable!("dispatched above")
        }
    }
}
