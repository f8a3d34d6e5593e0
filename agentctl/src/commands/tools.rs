//! `agentctl tools list|enable|disable`: the tool registry (kill switch).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use agent_core::store::tools::{UnknownTool, known_tools};
use agent_core::store::{Millis, now_ms};
use comfy_table::{Cell, Color};
use serde::Serialize;

use super::Ctx;
use crate::cli::{ToolSwitchArgs, ToolsAction};
use crate::error::Result;
use crate::output::fmt_age;
use crate::output::outln;

#[derive(Default, Serialize)]
struct ToolRow {
    tool: String,
    kind: Option<String>,
    agents: BTreeSet<String>,
    enabled: bool,
    reason: Option<String>,
    updated_at: Option<Millis>,
}

pub(super) async fn run(cx: &Ctx, action: ToolsAction) -> Result<ExitCode> {
    match action {
        ToolsAction::List => list(cx).await,
        ToolsAction::Enable(args) => switch(cx, args, true).await,
        ToolsAction::Disable(args) => switch(cx, args, false).await,
    }
}

async fn rows(cx: &Ctx) -> Result<BTreeMap<String, ToolRow>> {
    let mut rows: BTreeMap<String, ToolRow> = BTreeMap::new();
    for agent in cx.store.agents().await? {
        let Some(graph) = cx.store.agent_graph(&agent, None).await? else {
            continue;
        };
        for t in &graph.tools {
            let row = rows.entry(t.name.clone()).or_insert_with(|| ToolRow {
                tool: t.name.clone(),
                enabled: true,
                ..ToolRow::default()
            });
            row.kind = Some(t.kind.as_str().to_owned());
            row.agents.insert(agent.clone());
        }
    }
    for s in cx.store.tool_switches().await? {
        let row = rows.entry(s.tool.clone()).or_insert_with(|| ToolRow {
            tool: s.tool.clone(),
            ..ToolRow::default()
        });
        row.enabled = s.enabled;
        row.reason = s.reason;
        row.updated_at = Some(s.updated_at);
    }
    Ok(rows)
}

async fn list(cx: &Ctx) -> Result<ExitCode> {
    let rows = rows(cx).await?;
    if cx.out.json {
        cx.out.print_json(&rows.values().collect::<Vec<_>>());
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("no tools known: no agent registered and no tool switched");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let mut table = cx
        .out
        .table(["TOOL", "KIND", "AGENTS", "ENABLED", "REASON", "SWITCHED"]);
    for r in rows.values() {
        table.add_row(vec![
            Cell::new(&r.tool),
            Cell::new(r.kind.as_deref().unwrap_or("?")),
            Cell::new(r.agents.iter().cloned().collect::<Vec<_>>().join(", ")),
            if r.enabled {
                cx.out.cell("yes", Color::Green)
            } else {
                cx.out.cell("no", Color::Red)
            },
            Cell::new(r.reason.as_deref().unwrap_or("")),
            Cell::new(r.updated_at.map_or_else(String::new, |t| fmt_age(t, now))),
        ]);
    }
    cx.out.print_table(&table);
    Ok(ExitCode::SUCCESS)
}

async fn switch(cx: &Ctx, args: ToolSwitchArgs, enabled: bool) -> Result<ExitCode> {
    // Switched anyway, with a warning: an operator may switch a tool off before the
    // agent declaring it is deployed. The HTTP API refuses it (its clients are programs).
    if let Some(unknown) = UnknownTool::check(&args.tool, &known_tools(cx.store.as_ref()).await?) {
        cx.out.warn(&format!("{unknown}; switching it anyway"));
    }
    cx.store
        .set_tool_enabled(&args.tool, enabled, args.reason.as_deref())
        .await?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "tool": args.tool,
            "enabled": enabled,
            "reason": args.reason,
        }));
    } else if enabled {
        outln!("enabled tool `{}`: calls are allowed again", args.tool);
    } else {
        outln!(
            "disabled tool `{}`: calls now fail fast with `tool.disabled`{}",
            args.tool,
            args.reason
                .as_ref()
                .map_or_else(String::new, |r| format!(" (reason: {r})"))
        );
    }
    Ok(ExitCode::SUCCESS)
}
