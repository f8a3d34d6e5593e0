//! `agentctl runs`: list runs, newest first; with `--watch`, then their events as they
//! come.

use std::process::ExitCode;

use agent_core::store::{EventCursor, EventScope, RunFilter, now_ms};
use comfy_table::Cell;

use super::Ctx;
use crate::cli::RunsArgs;
use crate::error::Result;
use crate::output::outln;
use crate::output::{ellipsize, fmt_age};

/// The longest error the table shows: the last column wraps to the table's width
/// (`--width`, the terminal's), so this only keeps a pathological message from filling
/// the screen.
const MAX_ERROR_CHARS: usize = 400;

pub(super) async fn run(cx: &Ctx, args: RunsArgs) -> Result<ExitCode> {
    let filter = RunFilter {
        agent: args.agent.clone(),
        statuses: args.status.clone(),
        limit: Some(args.limit),
        labels: args.labels.iter().cloned().collect(),
        spawned_by: args.parent.clone(),
        agent_version: args.version,
        ..RunFilter::default()
    };
    // Watching starts from what is committed before the listing, so nothing falls between.
    let head = if args.watch {
        Some(cx.store.event_head().await?)
    } else {
        None
    };
    let runs = cx.store.list_runs(&filter).await?;
    if cx.out.json {
        cx.out.print_json(&runs);
        return watch(cx, &args, head).await;
    }
    if runs.is_empty() {
        let unfiltered = args.status.is_empty() && args.labels.is_empty();
        let what = match (&args.agent, unfiltered) {
            _ if args.parent.is_some() && unfiltered && args.agent.is_none() => format!(
                "run `{}` started no child runs",
                args.parent.as_deref().unwrap_or_default()
            ),
            (Some(a), _) => format!("no runs of agent `{a}` match"),
            (None, false) => "no runs match".to_owned(),
            (None, true) => "no runs yet".to_owned(),
        };
        outln!("{what}");
        if args.agent.is_some() {
            cx.out
                .note("the registered agents are listed by `agentctl agents`");
        }
        return watch(cx, &args, head).await;
    }
    let now = now_ms();
    let mut table = cx.out.table([
        "RUN", "AGENT", "STATE", "STATUS", "VERSION", "UPDATED", "ERROR",
    ]);
    for r in &runs {
        let error = r.error.as_ref().map_or_else(
            || {
                r.waiting_for
                    .as_ref()
                    .map_or_else(String::new, |s| format!("waiting for `{s}`"))
            },
            |e| ellipsize(&e.to_string(), MAX_ERROR_CHARS),
        );
        table.add_row(vec![
            Cell::new(&r.id),
            Cell::new(&r.agent),
            Cell::new(&r.state_name),
            cx.out.status_cell(r.status),
            Cell::new(r.version),
            Cell::new(fmt_age(r.updated_at, now)),
            Cell::new(error),
        ]);
    }
    cx.out.print_table(&table);
    if runs.len() == args.limit {
        cx.out.note(&format!(
            "showing the newest {}; pass --limit to see more",
            args.limit
        ));
    }
    watch(cx, &args, head).await
}

async fn watch(cx: &Ctx, args: &RunsArgs, head: Option<EventCursor>) -> Result<ExitCode> {
    let Some(head) = head else {
        return Ok(ExitCode::SUCCESS);
    };
    let scope = args
        .agent
        .clone()
        .map_or(EventScope::All, EventScope::Agent);
    super::follow::events(cx, scope, head, false).await
}
