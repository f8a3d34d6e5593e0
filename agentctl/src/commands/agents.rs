//! `agentctl agents`: the agents whose graphs the workers registered.

use std::process::ExitCode;

use comfy_table::Cell;
use serde::Serialize;

use super::Ctx;
use crate::error::Result;
use crate::output::outln;

#[derive(Serialize)]
struct AgentRow {
    agent: String,
    fingerprint: String,
    states: usize,
    tools: usize,
    initial: Option<String>,
}

pub(super) async fn run(cx: &Ctx) -> Result<ExitCode> {
    let mut rows = Vec::new();
    for agent in cx.store.agents().await? {
        if let Some(g) = cx.store.agent_graph(&agent, None).await? {
            rows.push(AgentRow {
                fingerprint: g.fingerprint(),
                states: g.states.len(),
                tools: g.tools.len(),
                initial: g.initial().map(|s| s.name.clone()),
                agent,
            });
        }
    }
    if cx.out.json {
        cx.out.print_json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("no agents registered yet: a runner registers its agent when it starts a run");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = cx
        .out
        .table(["AGENT", "INITIAL", "STATES", "TOOLS", "FINGERPRINT"]);
    for r in &rows {
        table.add_row(vec![
            Cell::new(&r.agent),
            Cell::new(r.initial.as_deref().unwrap_or("")),
            Cell::new(r.states),
            Cell::new(r.tools),
            cx.out
                .dim_cell(r.fingerprint.get(..12).unwrap_or(&r.fingerprint)),
        ]);
    }
    cx.out.print_table(&table);
    Ok(ExitCode::SUCCESS)
}
