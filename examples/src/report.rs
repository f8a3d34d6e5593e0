//! Plain-text timelines of runs, read back from the store.

use std::fmt::Write as _;

use durable_agents::router::DecisionRecord;
use durable_agents::store::{CallStatus, EntryKind, JournalEntry, Store, StoreError};

/// A run's timeline: every version with its state, and under it the calls its step made.
///
/// # Errors
/// Store errors.
pub async fn timeline(store: &dyn Store, run_id: &str) -> Result<String, StoreError> {
    // As far as the row reads: a quarantined, unreadable run is reported too.
    let run = store
        .inspect_run(run_id)
        .await?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?
        .record;
    let history = store.history(run_id).await?;
    let journal = store.journal(run_id, None).await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} · agent {} · {} at v{} in `{}`",
        run.id, run.agent, run.status, run.version, run.state_name
    );
    for t in &history {
        let _ = writeln!(
            out,
            "  v{:<3} {:<10} {}",
            t.version,
            t.to_state,
            match t.kind.as_str() {
                "start" => "(start)".to_owned(),
                "status" => format!("(status → {})", t.status),
                kind => format!("({kind} from {})", t.from_state),
            }
        );
        for e in journal.iter().filter(|e| e.version == t.version) {
            let _ = writeln!(out, "         {}", entry_line(e));
        }
    }
    if let Some(err) = &run.error {
        let _ = writeln!(out, "  error: {err}");
    }
    Ok(out)
}

fn entry_line(e: &JournalEntry) -> String {
    let status = match e.status {
        CallStatus::Succeeded => "ok",
        CallStatus::Failed => "FAILED",
        CallStatus::Started => "started (no result yet)",
    };
    match e.kind {
        EntryKind::Decision => {
            let record: Option<DecisionRecord> = e
                .output
                .clone()
                .and_then(|o| serde_json::from_value(o).ok());
            match record {
                Some(r) => {
                    let choice = r
                        .decision
                        .map(|d| match d {
                            durable_agents::router::Decision::Transition { to, .. } => {
                                format!("move to `{to}`")
                            }
                            durable_agents::router::Decision::Tool { tool, .. } => {
                                format!("call `{tool}`")
                            }
                            durable_agents::router::Decision::Tools { calls } => {
                                let names: Vec<_> = calls.iter().map(|c| c.tool.as_str()).collect();
                                format!("call {} at once", names.join(", "))
                            }
                        })
                        .or_else(|| r.rejection.map(|x| format!("REJECTED {}", x.code)))
                        .unwrap_or_default();
                    format!(
                        "decision  {choice}  · offered [{}] · model {} · {} ms",
                        r.options.join(", "),
                        r.model,
                        r.latency_ms
                    )
                }
                None => format!("decision   {status}"),
            }
        }
        EntryKind::Tool | EntryKind::Compensation => {
            let label = if e.kind == EntryKind::Compensation {
                "compensate"
            } else {
                "tool"
            };
            let kind = e.tool_kind.map_or("?", durable_agents::ToolKind::as_str);
            let mut line = format!(
                "{label:<11}{} ({kind}) {status} · {} attempt(s) · {} ms",
                e.name, e.attempts, e.duration_ms
            );
            if e.attempts == 0 && e.status == CallStatus::Succeeded {
                line.push_str(" · served from the journal");
            }
            if let Some(key) = &e.idempotency_key {
                let _ = write!(line, " · key {key}");
            }
            if let Some(code) = &e.error_code {
                let _ = write!(
                    line,
                    " · {code}: {}",
                    e.error_message.as_deref().unwrap_or("")
                );
            }
            line
        }
        EntryKind::Child => {
            let started = e
                .output
                .as_ref()
                .and_then(|o| o.as_array())
                .map_or(0, Vec::len);
            format!("children   {started} run(s) of {} {status}", e.name)
        }
    }
}

/// An error for a person: `error: MESSAGE`, then each cause whose text the message above it
/// does not already hold (many errors print their source in their own message).
#[must_use]
pub fn error_report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("error: {e}");
    let mut shown = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !shown.contains(&line) {
            text.push_str("\n  caused by: ");
            text.push_str(&line);
        }
        shown = line;
        source = cause.source();
    }
    text
}

/// Print one proof line of an example, ✔ or ✘, and return whether it held.
#[must_use = "a proof that did not hold must fail the example"]
pub fn check(ok: bool, line: &str) -> bool {
    crate::outln!("   {} {line}", if ok { "✔" } else { "✘" });
    ok
}

#[cfg(test)]
mod tests {
    use super::error_report;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("middle failed: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn reports_are_sentences_with_their_new_causes() {
        let e = Outer(Middle(std::io::Error::other("disk full")));
        assert_eq!(
            error_report(&e),
            "error: outer failed\n  caused by: middle failed: disk full"
        );
    }
}
