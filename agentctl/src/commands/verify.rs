//! `agentctl verify RUN`: recompute the hash chain (see `agent_core::store::verify`).

use std::process::ExitCode;

use agent_core::store::{RunFilter, RunRecord};
use comfy_table::{Cell, Color};
use indicatif::{ProgressBar, ProgressStyle};

use super::Ctx;
use crate::error::Result;
use crate::output::outln;
use agent_core::store::verify::{VerifyReport, verify_run};

/// Verify one run from the store.
async fn check(cx: &Ctx, run: &RunRecord) -> Result<VerifyReport> {
    Ok(verify_run(cx.store.as_ref(), run).await?)
}

/// `verify --all`: every run, with a progress bar on a terminal.
pub(super) async fn all(cx: &Ctx) -> Result<ExitCode> {
    let runs = cx.store.list_runs(&RunFilter::default()).await?;
    let bar = (cx.out.tty_err && !cx.out.json && runs.len() > 1).then(|| {
        let pb = ProgressBar::new(runs.len() as u64);
        pb.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} runs verified ({eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    });
    let mut reports = Vec::with_capacity(runs.len());
    for run in &runs {
        reports.push(check(cx, run).await?);
        if let Some(pb) = &bar {
            pb.inc(1);
        }
    }
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let failed = reports.iter().filter(|r| !r.ok).count();
    if cx.out.json {
        cx.out.print_json(&reports);
    } else if reports.is_empty() {
        outln!("no runs to verify");
    } else {
        let mut table = cx.out.table(["RUN", "CHAIN", "VERSIONS", "PROBLEM"]);
        for r in &reports {
            let versions = format!(
                "{}..={}",
                r.first_version.unwrap_or(0),
                r.last_version.unwrap_or(0)
            );
            let (chain, problem) = match &r.problem {
                None => (cx.out.cell("intact", Color::Green), String::new()),
                Some(p) => (
                    cx.out.cell("BROKEN", Color::Red),
                    format!("version {} {}: {}", p.version, p.kind.as_str(), p.message),
                ),
            };
            table.add_row(vec![
                Cell::new(&r.run),
                chain,
                Cell::new(versions),
                Cell::new(problem),
            ]);
        }
        cx.out.print_table(&table);
        outln!(
            "{} of {} runs verified intact",
            reports.len() - failed,
            reports.len()
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(super) async fn run(cx: &Ctx, id: &str) -> Result<ExitCode> {
    // A run whose row does not read is verified from what does: its stored history.
    let inspected = cx.inspect(id).await?;
    let run = inspected.record;
    let report = check(cx, &run).await?;
    if let Some(why) = &inspected.unreadable
        && !cx.out.json
    {
        cx.out.warn(&format!("the run's row does not read: {why}"));
    }
    if cx.out.json {
        cx.out.print_json(&report);
    } else if let Some(p) = &report.problem {
        outln!(
            "{} run {}: version {} {}: {}",
            cx.out.red("✗"),
            run.id,
            p.version,
            p.kind.as_str(),
            p.message
        );
        if report.verified > 0 {
            outln!(
                "  versions {}..={} verified before it",
                report.first_version.unwrap_or(0),
                p.version.saturating_sub(1)
            );
        }
        outln!(
            "  {}",
            cx.out.dim("the stored history was changed outside the store; do not resume the run before you know why")
        );
        // An unreadable run row differs from the last version's state however sound that
        // version is; the repair checks the chain up to the version it restores.
        let to = if inspected.unreadable.is_some() && Some(p.version) == report.last_version {
            Some(p.version)
        } else {
            (report.verified > 0 && p.version > 0).then(|| p.version - 1)
        };
        if let Some(to) = to {
            outln!(
                "  {}",
                cx.out.dim(&format!(
                    "once it is quarantined, `agentctl repair {} --to {to}` puts it back at a version whose chain verifies",
                    run.id,
                ))
            );
        }
    } else {
        let first = report.first_version.unwrap_or(0);
        outln!(
            "{} run {}: hash chain intact, versions {first}..={} ({} verified)",
            cx.out.green("✓"),
            run.id,
            report.last_version.unwrap_or(0),
            report.verified
        );
        if let Some(head) = &report.head_hash {
            outln!("  head hash {head}");
        }
        if report.legacy > 0 {
            cx.out.note(&format!(
                "{} versions carry the legacy hash of builds that did not chain kind, status \
                 and epoch: a change to those fields of these versions would not show",
                report.legacy
            ));
        }
        if let Some(a) = report.anchored_at {
            cx.out.note(&format!(
                "versions before {a} are not stored (pruned by retention); the chain is \
                 anchored at version {a}'s stored hash"
            ));
        }
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
