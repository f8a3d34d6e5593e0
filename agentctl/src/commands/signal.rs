//! `agentctl signal RUN NAME JSON`.

use std::process::ExitCode;

use agent_core::secrets::{SealKeys, seal_signal_payload};
use agent_core::signals::{SignalRefusal, check_signal};
use agent_core::store::{RunRecord, RunStatus};
use serde_json::json;

use super::Ctx;
use crate::cli::SignalArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: SignalArgs) -> Result<ExitCode> {
    let run = cx.run(&args.run).await?;
    let graph = cx
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    if graph.is_none() {
        cx.out.warn(&format!(
            "the graph of `{}` is not stored: cannot check that a state waits for `{}`",
            run.agent, args.name
        ));
    }
    // The check every sender shares: kept until a state consumes it, a signal nothing
    // will consume, or whose payload the consuming state could not read, is refused.
    check_signal(&run, graph.as_ref(), &args.name, &args.payload)
        .map_err(|refused| refusal(&run, &refused))?;
    // Stored as a runner would store it: its secret parts sealed, with the keys of
    // `DURABLE_AGENTS_SEAL_KEYS`.
    let mut payload = args.payload.clone();
    SealKeys::from_env()
        .and_then(|keys| seal_signal_payload(&mut payload, graph.as_ref(), &args.name, &keys))
        .map_err(|e| CliError::failed(e.to_string()))?;
    let id = cx
        .store
        .send_signal(&args.run, &args.name, &payload)
        .await?;
    let effect = match (&run.waiting_for, run.status) {
        (Some(w), RunStatus::Waiting) if w.signal_name() == Some(args.name.as_str()) => {
            "the run is waiting for it: a worker will resume it".to_owned()
        }
        (Some(w), RunStatus::Waiting) => format!(
            "the run waits for `{w}`, not `{}`: it is kept until a state waits for it",
            args.name
        ),
        _ => "kept until a state of the run waits for it".to_owned(),
    };
    if cx.out.json {
        cx.out.print_json(&json!({
            "run": run.id,
            "signal": args.name,
            "id": id,
            "waiting_for": run.waiting_for,
        }));
    } else {
        outln!(
            "sent signal `{}` (#{id}) to run {}: {effect}",
            args.name,
            run.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The refusal, with what the operator can do about it.
fn refusal(run: &RunRecord, refused: &SignalRefusal) -> CliError {
    let hint = match refused {
        SignalRefusal::BadName { .. } => {
            "give the name a state waits for (`wait = \"...\"`)".to_owned()
        }
        SignalRefusal::RunEnded { status, .. } => match status {
            RunStatus::Quarantined | RunStatus::DeadLettered | RunStatus::Failed => format!(
                "re-queue it first with `agentctl retry {}`, then signal it",
                run.id
            ),
            _ => "a finished run takes no more signals".to_owned(),
        },
        SignalRefusal::NotWaitedFor { waits, .. } if waits.is_empty() => {
            format!("no state of `{}` waits for any signal", run.agent)
        }
        SignalRefusal::NotWaitedFor { waits, .. } => format!(
            "the signals it waits for: {}",
            waits
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        SignalRefusal::BadPayload { state, .. } => format!(
            "send a payload of the type state `{state}` declares; `agentctl graph {}` shows it",
            run.agent
        ),
    };
    CliError::failed(refused.to_string()).hint(hint)
}
