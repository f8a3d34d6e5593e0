//! `agentctl state RUN [--version V]`: the state at a version (time travel).

use std::process::ExitCode;

use super::Ctx;
use crate::cli::StateArgs;
use crate::error::{CliError, Result};

pub(super) async fn run(cx: &Ctx, args: &StateArgs) -> Result<ExitCode> {
    let run = cx.run(&args.run).await?;
    let version = super::version_of(&run, args.at)?;
    let Some(state) = cx.store.state_at(&run.id, version).await? else {
        let first = cx
            .store
            .history(&run.id)
            .await?
            .first()
            .map_or(run.version, |t| t.version);
        return Err(CliError::not_found(format!(
            "version {version} of run `{}` is no longer stored",
            run.id
        ))
        .hint(format!(
            "retention pruned it; the oldest stored version is {first}"
        )));
    };
    if cx.out.json {
        cx.out.print_json(&state);
    } else {
        // The state itself is the answer: pretty JSON, with its name and version on stderr.
        cx.out.note(&format!(
            "run {} at version {} in `{}`",
            run.id, state.version, state.state_name
        ));
        cx.out.print_json(&state.state);
    }
    Ok(ExitCode::SUCCESS)
}
