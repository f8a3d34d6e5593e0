//! `agentctl stats [--since 24h] [--agent A] [--by-day]`: per-tool latency and errors, and
//! what the runs created in the window spent, per agent (or per agent and day).

use std::process::ExitCode;

use agent_core::store::{
    DaySpend, EntryKind, RunFilter, Spend, compute_tool_stats, format_cost, now_ms,
};
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
    /// What the runs created since `since` spent, per agent and UTC day.
    spend: Vec<DaySpend>,
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
    let spend = cx
        .store
        .spend_by_day(&RunFilter {
            agent: args.agent.clone(),
            created_after: Some(since),
            ..RunFilter::default()
        })
        .await?;
    if cx.out.json {
        cx.out.print_json(&StatsJson {
            since,
            agent: args.agent,
            tools: stats,
            spend,
        });
        return Ok(ExitCode::SUCCESS);
    }
    if stats.is_empty() {
        outln!("no calls since {}", fmt_time(since));
    } else {
        print_tools(cx, &stats, &kinds);
        cx.out.note(&format!(
            "calls started since {}{}",
            fmt_time(since),
            args.agent
                .as_ref()
                .map_or_else(String::new, |a| format!(" by runs of `{a}`"))
        ));
    }
    print_spend(cx, &spend, args.by_day);
    Ok(ExitCode::SUCCESS)
}

/// One row per tool: calls, failures, latency and errors by code.
fn print_tools(
    cx: &Ctx,
    stats: &[agent_core::store::ToolStats],
    kinds: &std::collections::BTreeMap<String, &str>,
) {
    let mut table = cx.out.table([
        "TOOL", "KIND", "CALLS", "FAILED", "AVG", "P50", "P99", "ERRORS",
    ]);
    for s in stats {
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
}

/// One row per agent (or agent and day): runs created, asks, tokens, cost, tool calls.
fn print_spend(cx: &Ctx, days: &[DaySpend], by_day: bool) {
    let mut rows: Vec<(String, Option<i64>, u64, Spend)> = Vec::new();
    for d in days {
        let day = by_day.then_some(d.day);
        match rows.last_mut() {
            Some((agent, last, runs, spend)) if *agent == d.agent && *last == day => {
                *runs += d.runs;
                *spend = spend.plus(d.spend);
            }
            _ => rows.push((d.agent.clone(), day, d.runs, d.spend)),
        }
    }
    if rows.is_empty() {
        outln!("no runs created in the window");
        return;
    }
    let mut header = vec!["AGENT"];
    if by_day {
        header.push("DAY (UTC)");
    }
    header.extend([
        "RUNS",
        "ASKS",
        "TOKENS IN",
        "TOKENS OUT",
        "COST",
        "TOOL CALLS",
    ]);
    let mut table = cx.out.table(header.iter().copied());
    for (agent, day, runs, spend) in &rows {
        let mut row = vec![Cell::new(agent)];
        if let Some(day) = day {
            row.push(Cell::new(fmt_day(*day)));
        }
        row.extend([
            Cell::new(runs),
            Cell::new(spend.asks),
            Cell::new(spend.input_tokens),
            Cell::new(spend.output_tokens),
            Cell::new(format_cost(spend.cost_micros)),
            Cell::new(spend.tool_calls),
        ]);
        table.add_row(row);
    }
    let first = if by_day { 2 } else { 1 };
    for i in first..first + 6 {
        if let Some(column) = table.column_mut(i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    cx.out.print_table(&table);
    cx.out
        .note("spend of the runs created in the window, each run's total so far");
}

/// A UTC day's first millisecond as `2026-12-07`.
fn fmt_day(day: i64) -> String {
    fmt_time(day).chars().take(10).collect()
}
