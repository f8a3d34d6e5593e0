//! `agentctl prune --keep-last N [--only-final]`.

use std::process::ExitCode;
use std::time::Duration;

use agent_core::store::RetentionPolicy;
use indicatif::{ProgressBar, ProgressStyle};

use super::Ctx;
use crate::cli::PruneArgs;
use crate::error::Result;
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: &PruneArgs) -> Result<ExitCode> {
    let policy = RetentionPolicy {
        keep_last_versions: args.keep_last,
        only_final_runs: args.only_final,
        ..RetentionPolicy::default()
    };
    // One store call does the work: a spinner on a terminal shows it is alive.
    let spinner = (cx.out.tty_err && !cx.out.json).then(|| {
        let pb = ProgressBar::new_spinner();
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        pb.set_message(format!(
            "pruning versions older than the last {} of {} runs",
            args.keep_last,
            if args.only_final { "final" } else { "all" }
        ));
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    });
    let result = cx.store.prune(&policy).await;
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    let report = result?;
    if cx.out.json {
        cx.out.print_json(&report);
    } else {
        outln!(
            "pruned {} versions and {} journal entries (kept the last {} of each {}run)",
            report.versions_removed,
            report.entries_removed,
            args.keep_last,
            if args.only_final { "final " } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
