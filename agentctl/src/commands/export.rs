//! `agentctl export RUN [--out FILE] [--states]`: the run as one JSON document
//! ([`agent_core::store::export::RunExport`]), the same the API's `GET /v1/runs/{id}/export`
//! and the inspector's download give; with `--states`, the state of every version too (what
//! `agentctl replay` needs). Always JSON, with or without `--json`.

use std::io::Write as _;
use std::process::ExitCode;

use agent_core::store::export::{export_run, export_run_with_states};

use super::Ctx;
use crate::cli::ExportArgs;
use crate::error::{CliError, Result};
use crate::output::{outln, stdout_text};

pub(super) async fn run(cx: &Ctx, args: &ExportArgs) -> Result<ExitCode> {
    let export = if args.states {
        export_run_with_states(cx.store.as_ref(), &args.run).await?
    } else {
        export_run(cx.store.as_ref(), &args.run).await?
    };
    let export = export.ok_or_else(|| CliError::no_run(&args.run))?;
    let text = serde_json::to_string_pretty(&export)
        .map_err(|e| CliError::failed(format!("cannot write the run as JSON: {e}")))?;
    let Some(path) = &args.out else {
        stdout_text(&format!("{text}\n"));
        return Ok(ExitCode::SUCCESS);
    };
    // A file that exists is someone's: never overwritten.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            CliError::failed(format!("cannot create {}: {e}", path.display()))
                .hint("give another path, or remove the file first")
        })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    outln!(
        "run {} exported to {}: {} transitions, {} journal entries, {} pending signals",
        args.run,
        path.display(),
        export.history.len(),
        export.journal.len(),
        export.pending_signals.len()
    );
    Ok(ExitCode::SUCCESS)
}
