//! `agentctl resume RUN` and `agentctl retry RUN`: hand a stopped run back to the workers.

use std::process::ExitCode;

use agent_core::store::{RunError, RunStatus};

use super::Ctx;
use crate::error::{CliError, Result};
use crate::output::outln;

/// Which command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Quarantined or dead-lettered runs.
    Resume,
    /// Those, and failed runs.
    Retry,
}

/// The error code of a saga whose compensations kept failing: it goes back to compensating.
const COMPENSATION_FAILED: &str = "compensation.failed";

pub(super) async fn run(cx: &Ctx, id: &str, mode: Mode) -> Result<ExitCode> {
    let run = cx.run(id).await?;
    match run.status {
        RunStatus::Running | RunStatus::Compensating => {
            let msg = format!(
                "run {} is already {}: the workers will pick it up",
                run.id, run.status
            );
            if cx.out.json {
                cx.out.print_json(&serde_json::json!({
                    "run": run.id, "status": run.status, "changed": false,
                }));
            } else {
                outln!("{msg}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        RunStatus::Waiting => {
            let signal = run.waiting_for.as_deref().unwrap_or("<name>");
            return Err(CliError::failed(format!(
                "run `{}` is waiting for signal `{signal}`, not stuck",
                run.id
            ))
            .hint(format!(
                "send it: agentctl signal {} {signal} '<json>'",
                run.id
            )));
        }
        RunStatus::Completed
        | RunStatus::Compensated
        | RunStatus::Cancelled
        | RunStatus::Terminated => {
            return Err(CliError::failed(format!(
                "run `{}` is {}: there is nothing to re-run",
                run.id, run.status
            ))
            .hint("start a new run, or fork this one from an earlier version"));
        }
        RunStatus::Failed if mode == Mode::Resume => {
            return Err(CliError::failed(format!(
                "run `{}` failed; `resume` only re-queues quarantined and dead-lettered runs",
                run.id
            ))
            .hint(format!(
                "re-run its failed step with `agentctl retry {}`",
                run.id
            )));
        }
        RunStatus::Failed | RunStatus::Quarantined | RunStatus::DeadLettered => {}
    }
    let compensating = run
        .error
        .as_ref()
        .is_some_and(|e| e.code == COMPENSATION_FAILED);
    let (status, error) = if compensating {
        // Keep the error: the saga still has to finish undoing the run.
        (RunStatus::Compensating, run.error.clone())
    } else {
        (RunStatus::Running, None::<RunError>)
    };
    let updated = cx.store.set_status(&run.id, status, error).await?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "run": updated.id,
            "status": updated.status,
            "previous_status": run.status,
            "previous_error": run.error,
            "changed": true,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let was = run.error.as_ref().map_or_else(
        || run.status.to_string(),
        |e| format!("{}: {} — {}", run.status, e.code, e.message),
    );
    outln!(
        "re-queued run {} as {} (was {was}); a worker will pick it up",
        updated.id,
        updated.status
    );
    if let Some(e) = &run.error
        && matches!(e.code.as_str(), "state.corrupt" | "graph.incompatible")
    {
        cx.out.warn(&format!(
            "it was stopped for `{}`: unless the cause is fixed (deploy a compatible build, \
             repair the state), a worker will quarantine it again",
            e.code
        ));
    }
    Ok(ExitCode::SUCCESS)
}
