//! `agentctl stats [--since 24h] [--agent A]`: per-tool latency and errors.

use std::process::ExitCode;

use agent_core::store::{EntryKind, RunFilter, compute_tool_stats, now_ms};
use comfy_table::{Cell, CellAlignment};
use serde::Serialize;

use super::Ctx;
use crate::cli::StatsArgs;
use crate::error::Result;
use crate::output::fmt_time;
use crate::output::outln;

#[derive(Serialize)]
struct StatsJson {
    since: i64,
    agent: Option<String>,
    tools: Vec<agent_core::store::ToolStats>,
}

pub(super) async fn run(cx: &Ctx, args: StatsArgs) -> Result<ExitCode> {
    let window = i64::try_from(args.since.as_millis()).unwrap_or(i64::MAX);
    let since = now_ms().saturating_sub(window);
    let stats = match &args.agent {
        // The store's statistics span every agent: compute an agent's from its runs' journals.
        Some(agent) => {
            let runs = cx
                .store
                .list_runs(&RunFilter {
                    agent: Some(agent.clone()),
                    ..RunFilter::default()
                })
                .await?;
            let mut entries = Vec::new();
            for r in &runs {
                entries.extend(cx.store.journal(&r.id, None).await?);
            }
            compute_tool_stats(&entries, since)
        }
        None => cx.store.tool_stats(since).await?,
    };
    // Tool kinds (read, write, hybrid) from the registered graphs.
    let mut kinds = std::collections::BTreeMap::new();
    for agent in cx.store.agents().await? {
        if let Some(g) = cx.store.agent_graph(&agent, None).await? {
            for t in g.tools {
                kinds.insert(t.name, t.kind.as_str());
            }
        }
    }
    if cx.out.json {
        cx.out.print_json(&StatsJson {
            since,
            agent: args.agent,
            tools: stats,
        });
        return Ok(ExitCode::SUCCESS);
    }
    if stats.is_empty() {
        outln!("no calls since {}", fmt_time(since));
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = cx.out.table([
        "TOOL", "KIND", "CALLS", "FAILED", "AVG", "P50", "P99", "ERRORS",
    ]);
    for s in &stats {
        let errors: Vec<String> = s
            .errors_by_code
            .iter()
            .map(|(code, n)| format!("{code} ×{n}"))
            .collect();
        let failed = if s.failures > 0 {
            cx.out.cell(s.failures.to_string(), comfy_table::Color::Red)
        } else {
            Cell::new(0)
        };
        let row = vec![
            Cell::new(&s.tool),
            Cell::new(match s.kind {
                Some(EntryKind::Tool) => kinds.get(&s.tool).copied().unwrap_or("tool"),
                Some(EntryKind::Compensation) => "compensation",
                Some(EntryKind::Decision) => "decision",
                Some(EntryKind::Child) => "children",
                None => "",
            }),
            Cell::new(s.calls),
            failed,
            Cell::new(format!("{:.1} ms", s.avg_ms)),
            Cell::new(format!("{} ms", s.p50_ms)),
            Cell::new(format!("{} ms", s.p99_ms)),
            Cell::new(errors.join(", ")),
        ];
        table.add_row(row);
    }
    for i in 2..=6 {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    cx.out.print_table(&table);
    cx.out.note(&format!(
        "calls started since {}{}",
        fmt_time(since),
        args.agent
            .as_ref()
            .map_or_else(String::new, |a| format!(" by runs of `{a}`"))
    ));
    Ok(ExitCode::SUCCESS)
}
