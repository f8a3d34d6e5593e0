//! `agentctl replay [--from-file PATH]... [--agent A [--limit N]]`: recorded runs replayed
//! against the handlers this binary was built with ([`agent_core::replay`]), the model and
//! the tools stubbed by the journal. Exit 0 when every run replays as recorded, 1 when any
//! diverges (or cannot be replayed), 2 for a usage error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_core::replay::{ReplayReport, RunReplay};
use agent_core::store::RunFilter;
use agent_core::store::export::{RunExport, export_run_with_states};
use agent_sqlite::Access;

use crate::cli::{Global, ReplayArgs};
use crate::error::{CliError, Result};
use crate::output::{Output, outln};
use crate::registry::Replayers;
use crate::store;

pub(super) async fn run(
    global: &Global,
    out: Output,
    args: &ReplayArgs,
    replays: &Replayers,
) -> Result<ExitCode> {
    if replays.0.is_empty() {
        return Err(
            CliError::usage("this binary has no handlers to replay runs against").hint(
                "build a control binary of your own with your agent registered: \
                 `agentctl::Ctl::new().replay(Replay::new(Handlers, tools)?).run()` \
                 (docs/verification.md)",
            ),
        );
    }
    if args.from_file.is_empty() && args.agent.is_none() {
        return Err(CliError::usage("nothing to replay")
            .hint("give `--from-file EXPORT.json` (or a directory), or `--agent NAME`"));
    }
    let mut exports = Vec::new();
    for path in &args.from_file {
        for file in files(path)? {
            exports.push(read_export(&file)?);
        }
    }
    if let Some(agent) = &args.agent {
        if replays.of(agent).is_none() {
            return Err(no_replay(agent));
        }
        let store = store::open_store(global, Access::ReadOnly).await?;
        let filter = RunFilter {
            agent: Some(agent.clone()),
            limit: Some(args.limit),
            ..RunFilter::default()
        };
        for run in store.list_runs(&filter).await? {
            if let Some(export) = export_run_with_states(store.as_ref(), &run.id).await? {
                exports.push(export);
            }
        }
    }
    let mut report = ReplayReport::default();
    for export in &exports {
        let replay = replays
            .of(&export.run.agent)
            .ok_or_else(|| no_replay(&export.run.agent))?;
        report.runs.push(replay.replay(export).await);
    }
    if out.json {
        out.print_json(&report);
    } else {
        print(&report);
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn no_replay(agent: &str) -> CliError {
    CliError::usage(format!(
        "no replay of agent `{agent}` is registered in this binary"
    ))
    .hint("register it: `Ctl::new().replay(Replay::new(Handlers, tools)?)`")
}

/// `path` itself, or the `*.json` files of directory `path`, sorted.
fn files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let read = std::fs::read_dir(path)
        .map_err(|e| CliError::not_found(format!("cannot read {}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

fn read_export(path: &Path) -> Result<RunExport> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::not_found(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!("{} is not a run export: {e}", path.display()))
            .hint("export runs with `agentctl export RUN --states --out FILE`")
    })
}

fn print(report: &ReplayReport) {
    for run in &report.runs {
        print_run(run);
    }
    let diverged = report.diverged().count();
    outln!("{} runs replayed, {diverged} diverged", report.runs.len());
}

fn print_run(run: &RunReplay) {
    let skipped = if run.skipped.is_empty() {
        String::new()
    } else {
        format!(", {} skipped", run.skipped.len())
    };
    match &run.divergence {
        None => outln!(
            "ok       {} ({}): {} steps replayed{skipped}",
            run.run_id,
            run.agent,
            run.replayed.len()
        ),
        Some(d) => outln!("DIVERGED {} ({}): {d}", run.run_id, run.agent),
    }
}
