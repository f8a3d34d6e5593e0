//! `agentctl repair RUN --to VERSION`: reset a quarantined run to a verified earlier version
//! (see `agent_core::store::repair`).

use std::process::ExitCode;

use agent_core::store::{OperatorNote, RepairError, StoreError, plan_repair};

use super::Ctx;
use crate::cli::RepairArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: &RepairArgs) -> Result<ExitCode> {
    let before = cx.inspect(&args.run).await?.record;
    let note = OperatorNote::new(&args.by, &args.reason);
    let plan = plan_repair(cx.store.as_ref(), &args.run, args.to, note)
        .await
        .map_err(|e| refused(&args.run, e))?;
    let repaired = cx
        .store
        .repair_run(&plan)
        .await
        .map_err(|e| refused(&args.run, RepairError::Store(e)))?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "run": repaired.id,
            "restored_version": plan.restored_version,
            "version": repaired.version,
            "state": repaired.state_name,
            "status": repaired.status,
            "previous_error": before.error,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "repaired run {}: version {} restores the state `{}` of version {}; it is {} again \
         and a worker will pick it up",
        repaired.id,
        repaired.version,
        repaired.state_name,
        plan.restored_version,
        repaired.status
    );
    if let Some(e) = &before.error {
        outln!("  it was quarantined for {}: {}", e.code, e.message);
    }
    outln!(
        "  {}",
        cx.out.dim(&format!(
            "the repair is transition {} of the history; `agentctl verify {}` checks it",
            repaired.version, repaired.id
        ))
    );
    Ok(ExitCode::SUCCESS)
}

/// The refusal as a message with what to do next.
fn refused(run: &str, e: RepairError) -> CliError {
    let e = match e {
        RepairError::Store(other) if !matches!(other, StoreError::Conflict { .. }) => {
            return CliError::from(other);
        }
        e => e,
    };
    let hint = match &e {
        RepairError::NotFound(_) => return CliError::no_run(run),
        RepairError::NotQuarantined { .. } => {
            "only quarantined runs are repaired; `agentctl retry` re-runs a failed step".to_owned()
        }
        RepairError::Leased(_) => {
            "a worker is executing it; wait for the lease to end, then try again".to_owned()
        }
        RepairError::NoSuchVersion { .. } | RepairError::Unverified { .. } => {
            format!("`agentctl verify {run}` says which versions verify")
        }
        RepairError::Store(StoreError::Conflict { .. }) => {
            "the run changed while it was being repaired; look at it again (`agentctl show`)"
                .to_owned()
        }
        RepairError::Store(_) => String::new(),
    };
    CliError::failed(e.to_string()).hint(hint)
}
