//! `agentctl cancel RUN` and `agentctl terminate RUN`: an operator stops a run;
//! `agentctl drop-signal RUN ID`: an operator drops a pending signal. Each is recorded with
//! who and why in the run's hash-chained history.

use std::process::ExitCode;

use agent_core::store::{OperatorNote, RunRecord, RunStatus, now_ms};

use super::Ctx;
use crate::cli::{CancelArgs, DropSignalArgs, TerminateArgs};
use crate::error::Result;
use crate::output::outln;

/// What changed, for `--json`.
fn print_json(cx: &Ctx, before: &RunRecord, after: &RunRecord) {
    cx.out.print_json(&serde_json::json!({
        "run": after.id,
        "status": after.status,
        "version": after.version,
        "previous_status": before.status,
        "changed": after.version != before.version
            || after.cancel_requested != before.cancel_requested,
        "cancel_requested": after.cancel_requested,
        "error": after.error,
    }));
}

pub(super) async fn cancel(cx: &Ctx, args: &CancelArgs) -> Result<ExitCode> {
    let before = cx.run(&args.run).await?;
    let note = OperatorNote::new(&args.by, &args.reason);
    let after = cx.store.cancel_run(&args.run, &note).await?;
    if cx.out.json {
        print_json(cx, &before, &after);
        return Ok(ExitCode::SUCCESS);
    }
    if after.version == before.version && after.cancel_requested == before.cancel_requested {
        outln!(
            "run {} is already {}{}: nothing changed",
            after.id,
            if after.cancel_requested.is_some() {
                "being cancelled"
            } else {
                after.status.as_str()
            },
            match after.status {
                RunStatus::Compensating => " (its compensations are running)",
                _ => "",
            }
        );
    } else if let Some(requested) = &after.cancel_requested {
        outln!(
            "asked to cancel run {}: worker {} holds it and cancels it at its next commit, \
             then compensates (requested by {})",
            after.id,
            after.lease_owner.as_deref().unwrap_or("?"),
            requested.by
        );
    } else {
        outln!(
            "cancelled run {} at version {} (by {}: {}); it is {}: a worker runs its \
             compensations, then it ends cancelled",
            after.id,
            after.version,
            note.by,
            note.reason,
            after.status
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn terminate(cx: &Ctx, args: &TerminateArgs) -> Result<ExitCode> {
    let before = cx.run(&args.run).await?;
    let note = OperatorNote::new(&args.by, &args.reason);
    let after = cx.store.terminate_run(&args.run, &note).await?;
    if cx.out.json {
        print_json(cx, &before, &after);
        return Ok(ExitCode::SUCCESS);
    }
    if after.version == before.version {
        outln!("run {} is already terminated: nothing changed", after.id);
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "terminated run {} at version {} (by {}: {}); nothing was compensated",
        after.id,
        after.version,
        note.by,
        note.reason
    );
    if let Some(owner) = &before.lease_owner
        && before.lease_expires_at.is_some_and(|t| t > now_ms())
    {
        cx.out.note(&format!(
            "worker {owner} held it: its next write is refused and it stops"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn drop_signal(cx: &Ctx, args: &DropSignalArgs) -> Result<ExitCode> {
    let before = cx.run(&args.run).await?;
    let note = OperatorNote::new(&args.by, &args.reason);
    let after = cx.store.drop_signal(&args.run, args.signal, &note).await?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "run": after.id,
            "signal": args.signal,
            "status": after.status,
            "version": after.version,
            "previous_version": before.version,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "dropped signal #{} of run {} at version {} (by {}: {}); it is still {}",
        args.signal,
        after.id,
        after.version,
        note.by,
        note.reason,
        after.status
    );
    if matches!(after.status, RunStatus::Failed) {
        cx.out.note(&format!(
            "`agentctl retry {}` runs its failed step again without it",
            after.id
        ));
    }
    Ok(ExitCode::SUCCESS)
}
