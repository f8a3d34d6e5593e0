//! `agentctl edit RUN (--state JSON | --patch JSON) --reason WHY`: correct a stopped run's
//! state and let it continue (see `agent_core::store::edit`).
//!
//! `agentctl` links no agent's code: it checks the state against the run's stored graph,
//! and the next worker reads it as the agent's enum before any handler runs (a state that
//! does not read quarantines the run, which can be edited again). A service with the agent
//! registered checks it before writing (`POST /v1/runs/{id}/state`).

use std::process::ExitCode;

use agent_core::secrets::{DEFAULT_SENSITIVE_FIELDS, Redactor, SealKeys};
use agent_core::store::edit::{Edit, EditCheck, EditError, StateEdit, plan_edit};
use agent_core::store::{OperatorNote, StoreError};
use serde_json::json;

use super::Ctx;
use crate::cli::EditArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: EditArgs) -> Result<ExitCode> {
    let before = cx.run(&args.run).await?;
    let state = match (args.state, args.patch) {
        (Some(state), _) => StateEdit::Whole(state),
        (None, Some(patch)) => StateEdit::patch(patch).map_err(|e| {
            CliError::failed(format!("--patch is not a JSON Patch: {e}"))
                .hint("a JSON array of operations: '[{\"op\": \"replace\", \"path\": \"/State/field\", \"value\": 1}]'")
        })?,
        (None, None) => unreachable!("clap requires --state or --patch"),
    };
    let edit = Edit {
        state,
        state_name: args.state_name,
        override_graph: args.override_graph,
        note: OperatorNote::new(&args.by, &args.reason),
    };
    // Stored as a runner stores states: its secret parts sealed with the keys of
    // `DURABLE_AGENTS_SEAL_KEYS`, which also open the sealed values a patch keeps.
    let keys = SealKeys::from_env().map_err(|e| CliError::failed(e.to_string()))?;
    let redactor = Redactor::default().with_fields(&DEFAULT_SENSITIVE_FIELDS);
    let check = EditCheck {
        read_state: None,
        redactor: &redactor,
        keys: &keys,
    };
    let plan = plan_edit(cx.store.as_ref(), &args.run, edit, check)
        .await
        .map_err(|e| refused(&args.run, e))?;
    let edited = cx
        .store
        .repair_run(&plan)
        .await
        .map_err(|e| refused(&args.run, EditError::Store(e)))?;
    if cx.out.json {
        cx.out.print_json(&json!({
            "run": edited.id,
            "version": edited.version,
            "state": edited.state_name,
            "previous_state": before.state_name,
            "previous_status": before.status,
            "status": edited.status,
            "previous_error": before.error,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "edited run {}: version {} sets its state `{}` (it was {} in `{}`); it is {} again and \
         a worker will pick it up",
        edited.id,
        edited.version,
        edited.state_name,
        before.status,
        before.state_name,
        edited.status
    );
    outln!(
        "  {}",
        cx.out.dim(&format!(
            "the edit is transition {} of the history, with who and why; the worker reads the \
             state as the agent's type before any handler runs",
            edited.version
        ))
    );
    Ok(ExitCode::SUCCESS)
}

/// The refusal as a message with what to do next.
fn refused(run: &str, e: EditError) -> CliError {
    let hint = match &e {
        EditError::NotFound(_) => return CliError::no_run(run),
        EditError::Store(StoreError::Conflict { .. }) => {
            "the run changed while it was being edited; look at it again (`agentctl show`)"
                .to_owned()
        }
        EditError::Store(_) => {
            let EditError::Store(e) = e else {
                unreachable!("matched above")
            };
            return CliError::from(e);
        }
        EditError::NotStopped { .. } | EditError::WaitsForChildren(_) => {
            format!("`agentctl show {run}` says what it is doing")
        }
        EditError::Leased(_) => "a worker holds it; try again once its lease has ended".to_owned(),
        EditError::Invalid { .. } => format!("`agentctl state {run}` prints its current state"),
        EditError::NotAnEdge { .. } => {
            "`--override-graph` edits anyway, and the history records it".to_owned()
        }
    };
    CliError::failed(e.to_string()).hint(hint)
}
