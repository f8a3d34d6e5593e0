//! Per-tool call statistics.

use serde::{Deserialize, Serialize};

use super::{CallStatus, EntryKind, JournalEntry, Millis};

/// Call statistics of one tool (see [`HistoryStore::tool_stats`](super::HistoryStore::tool_stats)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    /// The tool (or `router` for decisions).
    pub tool: String,
    /// Tool call, decision or compensation.
    pub kind: Option<EntryKind>,
    /// Finished calls.
    pub calls: u64,
    /// Failed calls.
    pub failures: u64,
    /// Mean duration.
    pub avg_ms: f64,
    /// Median duration.
    pub p50_ms: u64,
    /// 99th percentile duration.
    pub p99_ms: u64,
    /// Failures by error code.
    pub errors_by_code: std::collections::BTreeMap<String, u64>,
}

/// [`ToolStats`] from journal entries (finished ones started at or after `since`), sorted
/// by tool name. Percentiles are nearest-rank.
#[must_use]
pub fn compute_tool_stats(entries: &[JournalEntry], since: Millis) -> Vec<ToolStats> {
    let mut by_tool: std::collections::BTreeMap<(String, &'static str), (Vec<u64>, ToolStats)> =
        std::collections::BTreeMap::new();
    for e in entries {
        if e.started_at < since || e.status == CallStatus::Started {
            continue;
        }
        let (durations, stats) = by_tool
            .entry((e.name.clone(), e.kind.as_str()))
            .or_insert_with(|| {
                (
                    Vec::new(),
                    ToolStats {
                        tool: e.name.clone(),
                        kind: Some(e.kind),
                        ..ToolStats::default()
                    },
                )
            });
        durations.push(e.duration_ms);
        stats.calls += 1;
        if e.status == CallStatus::Failed {
            stats.failures += 1;
            let code = e.error_code.clone().unwrap_or_else(|| "unknown".to_owned());
            *stats.errors_by_code.entry(code).or_default() += 1;
        }
    }
    by_tool
        .into_values()
        .map(|(mut d, mut stats)| {
            d.sort_unstable();
            let rank = |p: f64| {
                let n = d.len();
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
                d[i]
            };
            #[allow(clippy::cast_precision_loss)]
            {
                stats.avg_ms = d.iter().sum::<u64>() as f64 / d.len() as f64;
            }
            stats.p50_ms = rank(0.50);
            stats.p99_ms = rank(0.99);
            stats
        })
        .collect()
}
