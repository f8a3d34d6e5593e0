//! `agentctl resume RUN` and `agentctl retry RUN`: hand a stopped run back to the workers
//! (what it does is [`plan_requeue`]'s, as for the HTTP API's retry).

use std::process::ExitCode;

use agent_core::store::FailureCode;
use agent_core::store::operator::{Requeue, RequeueRefused, plan_requeue};

pub(super) use agent_core::store::operator::RequeueMode as Mode;

use super::Ctx;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, id: &str, mode: Mode) -> Result<ExitCode> {
    let run = cx.run(id).await?;
    let (status, error) = match plan_requeue(&run, mode) {
        Ok(Requeue::To(status, error)) => (status, error),
        Ok(Requeue::Already) => {
            if cx.out.json {
                cx.out.print_json(&serde_json::json!({
                    "run": run.id, "status": run.status, "changed": false,
                }));
            } else {
                outln!(
                    "run {} is already {}: the workers will pick it up",
                    run.id,
                    run.status
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(refused) => {
            let hint = match &refused {
                RequeueRefused::Waiting { waiting_for, .. }
                    if waiting_for.starts_with("children:") =>
                {
                    format!(
                        "it waits for its children: agentctl runs --parent {}",
                        run.id
                    )
                }
                RequeueRefused::Waiting { waiting_for, .. } => {
                    let signal = if waiting_for.is_empty() {
                        "<name>"
                    } else {
                        waiting_for
                    };
                    format!("send it: agentctl signal {} {signal} '<json>'", run.id)
                }
                RequeueRefused::Ended { .. } => {
                    "start a new run, or fork this one from an earlier version".to_owned()
                }
                RequeueRefused::Failed { .. } => {
                    format!("re-run its failed step with `agentctl retry {}`", run.id)
                }
            };
            return Err(CliError::failed(refused.to_string()).hint(hint));
        }
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
        && matches!(
            e.code,
            FailureCode::StateCorrupt | FailureCode::GraphIncompatible
        )
    {
        cx.out.warn(&format!(
            "it was stopped for `{}`: unless the cause is fixed (deploy a compatible build, \
             repair the state), a worker will quarantine it again",
            e.code
        ));
    }
    Ok(ExitCode::SUCCESS)
}
