//! `agentctl fork RUN NEW_RUN [--at VERSION]`: a new run from a run's state at a version.

use std::process::ExitCode;

use agent_core::store::StoreError;
use serde_json::json;

use super::Ctx;
use crate::cli::ForkArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: &ForkArgs) -> Result<ExitCode> {
    let run = cx.run(&args.run).await?;
    let version = super::version_of(&run, args.at)?;
    let forked = match cx.store.fork(&run.id, version, &args.new_run).await {
        Ok(forked) => forked,
        Err(StoreError::AlreadyExists(id)) => {
            return Err(CliError::failed(format!(
                "a run `{id}` already exists with other content"
            ))
            .hint("choose another id for the new run"));
        }
        Err(StoreError::NotFound(_)) => {
            return Err(CliError::not_found(format!(
                "version {version} of run `{}` is no longer stored",
                run.id
            ))
            .hint("retention pruned it; `agentctl show` lists the stored versions"));
        }
        Err(e) => return Err(e.into()),
    };
    if cx.out.json {
        cx.out.print_json(&json!({
            "run": forked.id,
            "agent": forked.agent,
            "state": forked.state_name,
            "status": forked.status,
            "forked_from": { "run": run.id, "version": version },
        }));
    } else {
        outln!(
            "forked run {} at version {version} into run {} (in `{}`, {}): a worker will pick it up",
            run.id,
            forked.id,
            forked.state_name,
            forked.status
        );
    }
    Ok(ExitCode::SUCCESS)
}
