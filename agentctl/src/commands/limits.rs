//! `agentctl limits`: the rate limits the workers share, as they stand now.

use std::process::ExitCode;

use agent_core::store::now_ms;
use comfy_table::Cell;

use super::Ctx;
use crate::error::Result;
use crate::output::outln;

pub(super) async fn run(cx: &Ctx) -> Result<ExitCode> {
    let limits = cx.store.limits(now_ms()).await?;
    if cx.out.json {
        cx.out.print_json(&limits);
        return Ok(ExitCode::SUCCESS);
    }
    if limits.is_empty() {
        outln!(
            "no rate limits declared yet: a runner declares its `RunnerConfig::rate_limits` \
             when it first takes from them"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = cx.out.table(["LIMIT", "RATE", "BURST", "HOLDS", "WAIT"]);
    for l in &limits {
        table.add_row(vec![
            Cell::new(&l.name),
            Cell::new(format!("{:.3}/s", l.rate * 1000.0)),
            Cell::new(format!("{}", l.burst)),
            Cell::new(format!("{:.1}", l.level)),
            Cell::new(if l.wait_ms == 0 {
                "none".to_owned()
            } else {
                format!("{}.{} s", l.wait_ms / 1000, l.wait_ms % 1000 / 100)
            }),
        ]);
    }
    cx.out.print_table(&table);
    Ok(ExitCode::SUCCESS)
}
