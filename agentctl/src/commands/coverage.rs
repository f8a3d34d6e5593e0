//! `agentctl coverage AGENT [--limit N]`: which declared edges and legal tools the agent's
//! runs took, and which none did.

use std::process::ExitCode;

use agent_core::graph::Coverage;
use agent_core::store::RunFilter;

use super::Ctx;
use super::graph::load_graph;
use crate::cli::CoverageArgs;
use crate::error::Result;
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: &CoverageArgs) -> Result<ExitCode> {
    let graph = load_graph(cx, &args.agent, None).await?;
    let filter = RunFilter {
        agent: Some(args.agent.clone()),
        limit: Some(args.limit),
        ..RunFilter::default()
    };
    let mut coverage = Coverage::new(&graph);
    for run in cx.store.list_runs(&filter).await? {
        let history = cx.store.history(&run.id).await?;
        let journal = cx.store.journal(&run.id, None).await?;
        coverage.add_run(&history, &journal);
    }
    if cx.out.json {
        cx.out.print_json(&coverage);
        return Ok(ExitCode::SUCCESS);
    }
    print(&coverage, args.limit);
    Ok(ExitCode::SUCCESS)
}

fn print(coverage: &Coverage, limit: usize) {
    let newest = if u64::try_from(limit).is_ok_and(|l| coverage.runs >= l) {
        format!(" (the newest {limit}: --limit for more)")
    } else {
        String::new()
    };
    outln!(
        "coverage of agent `{}` by {} runs{newest}",
        coverage.agent,
        coverage.runs
    );
    let (taken, edges) = coverage.edges_taken();
    outln!("\nedges: {taken} of {edges} taken");
    let width = (coverage.edges.iter())
        .map(|e| e.from.len() + e.to.len() + if e.on_error { 11 } else { 0 })
        .max()
        .unwrap_or(0)
        + 4;
    for e in &coverage.edges {
        let name = format!(
            "{} -> {}{}",
            e.from,
            e.to,
            if e.on_error { " (on error)" } else { "" }
        );
        let never = if e.taken == 0 { "   never taken" } else { "" };
        outln!("  {name:<width$} {:>6}{never}", e.taken);
    }
    let (called, tools) = coverage.tools_called();
    outln!("\ntools: {called} of {tools} called where legal");
    let width = (coverage.tools.iter())
        .map(|t| t.state.len() + t.tool.len() + 2)
        .max()
        .unwrap_or(0);
    for t in &coverage.tools {
        let name = format!("{}: {}", t.state, t.tool);
        let never = if t.calls == 0 { "   never called" } else { "" };
        outln!("  {name:<width$} {:>6}{never}", t.calls);
    }
    if !coverage.undeclared.is_empty() {
        outln!("\ntaken, but not edges of this version of the graph (runs of another version):");
        for e in &coverage.undeclared {
            outln!("  {} -> {}   {}", e.from, e.to, e.taken);
        }
    }
}
