//! `agentctl verify RUN`: recompute the hash chain (see [`crate::verify`]).

use std::collections::BTreeMap;
use std::process::ExitCode;

use super::Ctx;
use crate::error::Result;
use crate::verify::verify_chain;

pub async fn run(cx: &Ctx, id: &str) -> Result<ExitCode> {
    let run = cx.run(id).await?;
    let history = cx.store.history(id).await?;
    let mut states = BTreeMap::new();
    for t in &history {
        if states.contains_key(&t.version) {
            continue;
        }
        if let Some(s) = cx.store.state_at(id, t.version).await? {
            states.insert(t.version, s);
        }
    }
    let report = verify_chain(&run, &history, &states);
    if cx.out.json {
        cx.out.print_json(&report);
    } else if let Some(p) = &report.problem {
        println!(
            "{} run {}: version {} {}: {}",
            cx.out.red("✗"),
            run.id,
            p.version,
            p.kind.as_str(),
            p.message
        );
        if report.verified > 0 {
            println!(
                "  versions {}..{} verified before it",
                report.first_version.unwrap_or(0),
                p.version.saturating_sub(1)
            );
        }
        println!(
            "  {}",
            cx.out.dim("the stored history was changed outside the store; do not resume the run before you know why")
        );
    } else {
        let first = report.first_version.unwrap_or(0);
        println!(
            "{} run {}: hash chain intact, versions {first}..={} ({} verified)",
            cx.out.green("✓"),
            run.id,
            report.last_version.unwrap_or(0),
            report.verified
        );
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
