//! `agentctl graph AGENT --format dot|mermaid|json|yaml [--run RUN]`.

use std::collections::BTreeSet;
use std::process::ExitCode;

use agent_core::graph::{GraphDescription, PathOverlay};
use agent_core::store::{CallStatus, EntryKind, RunStatus, TransitionKind};
use serde::Serialize;

use super::Ctx;
use crate::cli::{GraphArgs, GraphFormat};
use crate::error::{CliError, Result};
use crate::output::outln;

#[derive(Serialize)]
struct OverlayJson {
    run: String,
    transitions: Vec<(String, String)>,
    current: Option<String>,
    failed: BTreeSet<String>,
}

#[derive(Serialize)]
struct GraphJson<'a> {
    agent: &'a str,
    fingerprint: String,
    graph: &'a GraphDescription,
    overlay: Option<OverlayJson>,
}

pub(super) async fn run(cx: &Ctx, args: GraphArgs) -> Result<ExitCode> {
    let run = match &args.run {
        Some(id) => Some(cx.run(id).await?),
        None => None,
    };
    let agent = match (&args.agent, &run) {
        (Some(a), Some(r)) if *a != r.agent => {
            return Err(CliError::usage(format!(
                "run `{}` belongs to agent `{}`, not `{a}`",
                r.id, r.agent
            ))
            .hint(format!("agentctl graph {} --run {}", r.agent, r.id)));
        }
        (Some(a), _) => a.clone(),
        (None, Some(r)) => r.agent.clone(),
        (None, None) => return Err(CliError::usage("name an agent, or a run with --run")),
    };
    let graph = load_graph(cx, &agent, run.as_ref().map(|r| r.fingerprint.as_str())).await?;
    let overlay = match &run {
        Some(r) => Some((r.id.clone(), overlay(cx, r).await?)),
        None => None,
    };
    if cx.out.json {
        cx.out.print_json(&GraphJson {
            agent: &graph.agent,
            fingerprint: graph.fingerprint(),
            graph: &graph,
            overlay: overlay.map(|(run, o)| OverlayJson {
                run,
                transitions: o.transitions,
                current: o.current,
                failed: o.failed,
            }),
        });
        return Ok(ExitCode::SUCCESS);
    }
    let o = overlay.map(|(_, o)| o).unwrap_or_default();
    let text = match args.format {
        GraphFormat::Dot => graph.to_dot_with(&o),
        GraphFormat::Mermaid => graph.to_mermaid_with(&o),
        GraphFormat::Json => graph.to_json(),
        GraphFormat::Yaml => graph.to_yaml(),
    };
    crate::output::stdout_text(&text);
    if !text.ends_with('\n') {
        outln!();
    }
    if args.run.is_some() && matches!(args.format, GraphFormat::Json | GraphFormat::Yaml) {
        cx.out
            .note("the overlay is drawn only in dot and mermaid; use --json for it as data");
    }
    Ok(ExitCode::SUCCESS)
}

/// The graph of `agent` (the one with `fingerprint` if given and registered).
pub(super) async fn load_graph(
    cx: &Ctx,
    agent: &str,
    fingerprint: Option<&str>,
) -> Result<GraphDescription> {
    if let Some(fp) = fingerprint {
        if let Some(g) = cx.store.agent_graph(agent, Some(fp)).await? {
            return Ok(g);
        }
        cx.out.warn(&format!(
            "the graph the run started with ({}) is not registered; drawing the latest",
            fp.get(..12).unwrap_or(fp)
        ));
    }
    if let Some(g) = cx.store.agent_graph(agent, None).await? {
        return Ok(g);
    }
    let known = cx.store.agents().await?;
    let hint = if known.is_empty() {
        "no agent is registered yet: a runner registers its agent's graph when it starts a run"
            .to_owned()
    } else {
        format!("registered agents: {}", known.join(", "))
    };
    Err(CliError::not_found(format!("no graph registered for agent `{agent}`")).hint(hint))
}

/// What the run did: transitions taken, where it is, and where steps failed.
async fn overlay(cx: &Ctx, run: &agent_core::store::RunRecord) -> Result<PathOverlay> {
    let history = cx.store.history(&run.id).await?;
    let journal = cx.store.journal(&run.id, None).await?;
    let mut failed = BTreeSet::new();
    let mut transitions = Vec::new();
    for t in &history {
        match t.kind {
            TransitionKind::Step => transitions.push((t.from_state.clone(), t.to_state.clone())),
            TransitionKind::Error => {
                transitions.push((t.from_state.clone(), t.to_state.clone()));
                failed.insert(t.from_state.clone());
            }
            // A repair jumps back, a migration maps an old version's state to a new one's:
            // neither is an edge of the graph.
            TransitionKind::Start
            | TransitionKind::Status
            | TransitionKind::Cancel
            | TransitionKind::Terminate
            | TransitionKind::Repair
            | TransitionKind::Edited
            | TransitionKind::Migrated
            | TransitionKind::SignalDropped => {}
        }
    }
    for e in &journal {
        if e.status == CallStatus::Failed && e.kind != EntryKind::Decision {
            failed.insert(e.state.clone());
        }
    }
    if run.error.is_some()
        && matches!(
            run.status,
            RunStatus::Failed | RunStatus::Quarantined | RunStatus::DeadLettered
        )
    {
        failed.insert(run.state_name.clone());
    }
    Ok(PathOverlay {
        transitions,
        current: Some(run.state_name.clone()),
        failed,
    })
}
