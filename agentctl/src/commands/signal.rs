//! `agentctl signal RUN NAME JSON`.

use std::process::ExitCode;

use agent_core::secrets::{SealKeys, seal_signal_payload};
use agent_core::store::RunStatus;
use serde_json::json;

use super::Ctx;
use crate::cli::SignalArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: SignalArgs) -> Result<ExitCode> {
    let run = cx.run(&args.run).await?;
    if run.status.is_final() {
        return Err(CliError::failed(format!(
            "run `{}` is {}: no state will consume the signal",
            run.id, run.status
        ))
        .hint(match run.status {
            RunStatus::Quarantined | RunStatus::DeadLettered | RunStatus::Failed => format!(
                "re-queue it first with `agentctl retry {}`, then signal it",
                run.id
            ),
            _ => "a finished run takes no more signals".to_owned(),
        }));
    }
    // A signal no state waits for would be kept forever and consumed by nothing.
    let graph = cx
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    match &graph {
        Some(graph) if !graph.signals_waited_for().contains(&args.name.as_str()) => {
            let waits = graph.signals_waited_for();
            return Err(CliError::failed(format!(
                "no state of agent `{}` waits for a signal named `{}`",
                run.agent, args.name
            ))
            .hint(if waits.is_empty() {
                format!("no state of `{}` waits for any signal", run.agent)
            } else {
                format!(
                    "the signals it waits for: {}",
                    waits
                        .iter()
                        .map(|w| format!("`{w}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }));
        }
        Some(_) => {}
        None => cx.out.warn(&format!(
            "the graph of `{}` is not stored: cannot check that a state waits for `{}`",
            run.agent, args.name
        )),
    }
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
        (Some(w), RunStatus::Waiting) if *w == args.name => {
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
