//! `agentctl show RUN`: the run's timeline.
//!
//! Each committed version is one row; under it, the calls of the step that started from it
//! (journal entries with that version): tool calls, router decisions and compensations.

use agent_core::secrets::shown;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use agent_core::router::{Decision, DecisionRecord};
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, RunFilter, RunRecord, RunStatus, SignalRecord,
    StateAtVersion, TransitionKind, TransitionRecord, WAIT_ALL_CHILDREN, WAIT_FIRST_CHILD,
};
use comfy_table::{Cell, Color};
use serde::Serialize;

use super::Ctx;
use crate::error::Result;
use crate::output::outln;
use crate::output::{ellipsize, fmt_duration_ms, fmt_time};

#[derive(Serialize)]
struct ShowJson<'a> {
    run: &'a RunRecord,
    /// Why the run's row does not read (`null` when it does).
    unreadable: Option<&'a str>,
    history: &'a [TransitionRecord],
    states: Vec<&'a StateAtVersion>,
    journal: &'a [JournalEntry],
    pending_signals: &'a [SignalRecord],
    /// The child runs it started, by id.
    children: &'a [RunRecord],
}

pub(super) async fn run(cx: &Ctx, id: &str) -> Result<ExitCode> {
    // `show` is where a damaged run is diagnosed: what of its row reads is shown, with why
    // the rest does not.
    let inspected = cx.inspect(id).await?;
    let run = inspected.record;
    let history = cx.store.history(id).await?;
    let journal = cx.store.journal(id, None).await?;
    let signals = cx.store.pending_signals(id).await?;
    let mut children = cx
        .store
        .list_runs(&RunFilter {
            spawned_by: Some(id.to_owned()),
            ..RunFilter::default()
        })
        .await?;
    children.sort_by(|a, b| a.id.cmp(&b.id));
    let mut states = BTreeMap::new();
    for t in &history {
        // A version whose state no longer replays is shown without it (`verify` explains).
        if let Ok(Some(s)) = cx.store.state_at(id, t.version).await {
            states.insert(t.version, s);
        }
    }
    if cx.out.json {
        cx.out.print_json(&ShowJson {
            run: &run,
            unreadable: inspected.unreadable.as_deref(),
            history: &history,
            states: states.values().collect(),
            journal: &journal,
            pending_signals: &signals,
            children: &children,
        });
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::stdout_text(&fit_header(&header(cx, &run), cx.out.width));
    if let Some(why) = &inspected.unreadable {
        outln!(
            "  {:<12} {}",
            "unreadable",
            cx.out.red(&format!("the run's row does not read: {why}"))
        );
    }
    outln!();
    outln!("{}", cx.out.heading("Timeline"));
    print_timeline(cx, &run, &history, &states, &journal);
    if !children.is_empty() {
        outln!();
        outln!("{}", cx.out.heading("Children"));
        let mut table = cx
            .out
            .table(["RUN", "AGENT", "STATE", "STATUS", "VERSION", "ERROR"]);
        for c in &children {
            let error = c
                .error
                .as_ref()
                .map_or_else(String::new, |e| ellipsize(&e.to_string(), 200));
            table.add_row(vec![
                Cell::new(&c.id),
                Cell::new(&c.agent),
                Cell::new(&c.state_name),
                cx.out.status_cell(c.status),
                Cell::new(c.version),
                Cell::new(error),
            ]);
        }
        cx.out.print_table(&table);
    }
    if !signals.is_empty() {
        outln!();
        outln!("{}", cx.out.heading("Pending signals"));
        let mut table = cx.out.table(["ID", "NAME", "SENT", "PAYLOAD"]);
        for s in &signals {
            table.add_row(vec![
                Cell::new(s.id),
                Cell::new(&s.name),
                Cell::new(fmt_time(s.created_at)),
                Cell::new(ellipsize(&shown(&s.payload).to_string(), 80)),
            ]);
        }
        cx.out.print_table(&table);
    }
    let next = next_step(&run, inspected.unreadable.is_some(), &history);
    if !next.is_empty() {
        outln!();
        outln!("{}", cx.out.dim(&next));
    }
    Ok(ExitCode::SUCCESS)
}

fn header(cx: &Ctx, run: &RunRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", cx.out.heading("Run"), run.id);
    let mut field = |k: &str, v: String| {
        let _ = writeln!(out, "  {k:<12} {v}");
    };
    field(
        "agent",
        format!(
            "{} (graph {})",
            run.agent,
            run.fingerprint.get(..12).unwrap_or(&run.fingerprint)
        ),
    );
    let status = match run.status {
        RunStatus::Completed => cx.out.green(run.status.as_str()),
        RunStatus::Failed
        | RunStatus::Quarantined
        | RunStatus::DeadLettered
        | RunStatus::Terminated => cx.out.red(run.status.as_str()),
        RunStatus::Waiting | RunStatus::Compensating => cx.out.yellow(run.status.as_str()),
        _ => run.status.as_str().to_owned(),
    };
    field("status", status);
    field("state", state_line(run));
    field("version", run.version.to_string());
    field("created", fmt_time(run.created_at));
    field("updated", fmt_time(run.updated_at));
    if let Some(w) = &run.waiting_for {
        let until = run
            .wake_at
            .map_or_else(String::new, |t| format!(" (times out {})", fmt_time(t)));
        let what = match w.as_str() {
            WAIT_ALL_CHILDREN => "all its children to end".to_owned(),
            WAIT_FIRST_CHILD => "its first child to complete".to_owned(),
            _ if w.limit().is_some() => format!(
                "room under the rate limit `{}`, its turn {}",
                w.limit().unwrap_or_default(),
                run.wake_at.map_or_else(String::new, fmt_time)
            ),
            _ => format!("signal `{w}`{until}"),
        };
        field("waiting for", what);
    }
    if let (Some(owner), Some(exp)) = (&run.lease_owner, run.lease_expires_at) {
        field(
            "lease",
            format!("{owner} (epoch {}) until {}", run.epoch, fmt_time(exp)),
        );
    }
    if let Some((parent, v)) = &run.parent {
        field("forked from", format!("{parent} at version {v}"));
    }
    if let Some(p) = &run.spawned_by {
        field(
            "parent",
            format!(
                "{} (started by its step at version {})",
                p.run_id, p.version
            ),
        );
    }
    if let Some(started_by) = agent_core::started_by::StartedBy::of(&run.labels) {
        field("started by", started_by.to_string());
    }
    if !run.labels.is_empty() {
        let labels: Vec<String> = run.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        field("labels", labels.join(" "));
    }
    if let Some(note) = &run.cancel_requested {
        field(
            "cancelling",
            cx.out.yellow(&format!(
                "requested by {}: {}; the worker holding it cancels at its next commit",
                note.by, note.reason
            )),
        );
    }
    if !run.spend.is_zero() {
        field("spent", run.spend.to_string());
    }
    if let Some(budget) = &run.budget {
        field("budget", budget.to_string());
    }
    if let Some(e) = &run.error {
        field("error", cx.out.red(&e.to_string()));
    }
    out
}

/// The state's name and its data.
fn state_line(run: &RunRecord) -> String {
    match state_data(&run.state_name, &run.state) {
        Some(d) => format!("{}  {}", run.state_name, ellipsize(&d, 100)),
        None => run.state_name.clone(),
    }
}

/// A state's data as JSON text, without the variant's name (states are serialized enums:
/// `{"Name": data}`, or `"Name"` for a variant without data).
fn state_data(name: &str, state: &serde_json::Value) -> Option<String> {
    match state {
        serde_json::Value::String(s) if s == name => None,
        serde_json::Value::Object(map) if map.len() == 1 && map.contains_key(name) => {
            Some(shown(&map[name]).to_string())
        }
        other => Some(shown(other).to_string()),
    }
}

/// What an operator can do next, as a hint line.
fn next_step(run: &RunRecord, unreadable: bool, history: &[TransitionRecord]) -> String {
    let last = history.last().map_or(0, |t| t.version);
    if unreadable && run.status != RunStatus::Quarantined {
        return format!(
            "its row does not read, so no worker can run it; the first worker to claim it \
             quarantines it, and then `agentctl repair {} --to {last}` (or an earlier version \
             `agentctl verify {}` accepts) puts it back",
            run.id, run.id
        );
    }
    match run.status {
        RunStatus::Waiting => run.waiting_for.as_ref().map_or_else(String::new, |s| {
            format!(
                "waiting for `{s}`: send it with `agentctl signal {} {s} '<json>'`",
                run.id
            )
        }),
        RunStatus::Quarantined => format!(
            "fix the cause, then re-queue it with `agentctl resume {id}`; or put it back at a \
             version that verifies with `agentctl repair {id} --to {last}` (`agentctl verify \
             {id}` checks the chain)",
            id = run.id
        ),
        RunStatus::DeadLettered => format!(
            "fix the cause, then re-queue it with `agentctl resume {}`",
            run.id
        ),
        RunStatus::Failed => format!(
            "re-run the failed step with `agentctl retry {id}` (after `agentctl drop-signal \
             {id} SIGNAL_ID --reason WHY` when a pending signal is what it fails on); or close \
             it out with `agentctl terminate {id} --reason WHY`",
            id = run.id
        ),
        _ => String::new(),
    }
}

fn print_timeline(
    cx: &Ctx,
    run: &RunRecord,
    history: &[TransitionRecord],
    states: &BTreeMap<u64, StateAtVersion>,
    journal: &[JournalEntry],
) {
    let mut by_version: BTreeMap<u64, Vec<&JournalEntry>> = BTreeMap::new();
    for e in journal {
        by_version.entry(e.version).or_default().push(e);
    }
    let mut rows = Vec::new();
    let first_kept = history.first().map_or(0, |t| t.version);
    for (v, entries) in by_version.range(..first_kept) {
        // Journal entries kept by retention for a pruned version (an open saga).
        for e in entries {
            rows.push(entry_row(cx, e, Some(*v)));
        }
    }
    for t in history {
        rows.push(transition_row(cx, t, states.get(&t.version)));
        if let Some(entries) = by_version.get(&t.version) {
            for e in entries {
                rows.push(entry_row(cx, e, None));
            }
        }
    }
    for (v, entries) in by_version.range(run.version + 1..) {
        for e in entries {
            rows.push(entry_row(cx, e, Some(*v)));
        }
    }
    if history.is_empty() && journal.is_empty() {
        outln!("(no history stored)");
        return;
    }
    let columns = [
        "V", "TIME", "EVENT", "NAME", "KIND", "STATUS", "DURATION", "ATTEMPTS", "DETAIL",
    ];
    match cx.out.width.filter(|w| *w < WIDE_ENOUGH) {
        None => {
            let mut table = cx.out.table(columns);
            for row in rows {
                table.add_row(row);
            }
            cx.out.print_table(&table);
        }
        Some(width) => print_narrow(cx, &columns[..columns.len() - 1], rows, width),
    }
    if first_kept > 0 {
        cx.out.note(&format!(
            "versions before {first_kept} were pruned by retention"
        ));
    }
}

/// The header's `  name         value` lines, each value wrapped to `width` under itself.
fn fit_header(text: &str, width: Option<u16>) -> String {
    const VALUE_AT: usize = 15;
    let Some(width) = width.map(usize::from) else {
        return text.to_owned();
    };
    let mut out = String::new();
    for line in text.lines() {
        if line.chars().count() <= width || !line.starts_with("  ") {
            let _ = writeln!(out, "{line}");
            continue;
        }
        let name: String = line.chars().take(VALUE_AT).collect();
        let value: String = line.chars().skip(VALUE_AT).collect();
        for (i, part) in wrap(&value, width - VALUE_AT).iter().enumerate() {
            let lead = if i == 0 { name.as_str() } else { "" };
            let _ = writeln!(out, "{lead:<VALUE_AT$}{part}");
        }
    }
    out
}

/// Below this many columns, the timeline's other columns leave the detail too little room:
/// each detail goes on lines of its own under its row.
const WIDE_ENOUGH: u16 = 140;

/// The timeline on a narrow terminal: the table without its detail column, so that each row
/// is one line, with each detail under its row, indented and wrapped to `width`. Where even
/// that is too wide, the least needed columns (attempts, duration, time, kind) move into
/// the detail, in that order.
fn print_narrow(cx: &Ctx, columns: &[&str], rows: Vec<Vec<Cell>>, width: u16) {
    let width = usize::from(width);
    let mut rows: Vec<(Vec<String>, String)> = rows
        .into_iter()
        .map(|mut row| {
            let detail = row.pop().map(|c| c.content()).unwrap_or_default();
            (row.iter().map(Cell::content).collect(), detail)
        })
        .collect();
    let mut kept: Vec<usize> = (0..columns.len()).collect();
    let render = |kept: &[usize], rows: &[(Vec<String>, String)]| {
        let mut table = cx.out.table(kept.iter().map(|&i| columns[i]));
        table.set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        for (cells, _) in rows {
            table.add_row(kept.iter().map(|&i| cells[i].as_str()));
        }
        table.to_string()
    };
    let mut text = render(&kept, &rows);
    // Attempts, duration, time, kind: what a reader misses least, and how it reads in the detail.
    for (column, label) in [(7, " attempts"), (6, ""), (1, ""), (4, "")] {
        if text.lines().all(|l| l.trim_end().chars().count() <= width) {
            break;
        }
        kept.retain(|&i| i != column);
        for (cells, detail) in &mut rows {
            let value = &cells[column];
            if !value.trim().is_empty() {
                *detail = format!("{}{label}; {detail}", value.trim());
            }
        }
        text = render(&kept, &rows);
    }
    let mut lines = text.lines();
    for line in lines.by_ref().take(2) {
        outln!("{}", line.trim_end());
    }
    let indent = "     ";
    let room = width.saturating_sub(indent.len()).max(20);
    for (line, (_, detail)) in lines.zip(&rows) {
        outln!("{}", line.trim_end());
        for part in wrap(detail.trim_end_matches("; "), room) {
            outln!("{indent}{}", cx.out.dim(&part));
        }
    }
}

/// `text` in lines of at most `width` characters, broken at spaces where it can be.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word = word.to_owned();
        loop {
            let used = line.chars().count();
            let needed = word.chars().count() + usize::from(used > 0);
            if used + needed <= width {
                if used > 0 {
                    line.push(' ');
                }
                line.push_str(&word);
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            // A word longer than a line is cut.
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            lines.push(head);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn clock(ms: i64) -> String {
    // The date is in the header; the timeline shows the time of day.
    fmt_time(ms).get(11..).unwrap_or_default().to_owned()
}

fn transition_row(cx: &Ctx, t: &TransitionRecord, state: Option<&StateAtVersion>) -> Vec<Cell> {
    let name = match t.kind {
        TransitionKind::Start => t.to_state.clone(),
        TransitionKind::Status
        | TransitionKind::Cancel
        | TransitionKind::Terminate
        | TransitionKind::SignalDropped
        | TransitionKind::Edited
            if t.from_state == t.to_state =>
        {
            t.to_state.clone()
        }
        _ => format!("{} → {}", t.from_state, t.to_state),
    };
    let event = match t.kind {
        TransitionKind::Error | TransitionKind::Terminate => {
            cx.out.cell(t.kind.as_str(), Color::Red)
        }
        TransitionKind::Cancel | TransitionKind::SignalDropped | TransitionKind::Edited => {
            cx.out.cell(t.kind.as_str(), Color::Magenta)
        }
        kind => cx.out.cell(kind.as_str(), Color::Blue),
    };
    vec![
        Cell::new(t.version),
        Cell::new(clock(t.created_at)),
        event,
        Cell::new(name),
        Cell::new(""),
        cx.out.status_cell(t.status),
        Cell::new(""),
        Cell::new(""),
        {
            let data = state
                .and_then(|s| state_data(&s.state_name, &s.state))
                .map_or_else(String::new, |d| format!("; state {}", ellipsize(&d, 80)));
            let by = t
                .note
                .as_ref()
                .map_or_else(String::new, |n| format!("by {}: {}; ", n.by, n.reason));
            cx.out.dim_cell(format!("{by}epoch {}{data}", t.epoch))
        },
    ]
}

fn entry_row(cx: &Ctx, e: &JournalEntry, version: Option<u64>) -> Vec<Cell> {
    let (event, detail) = match e.kind {
        EntryKind::Decision => ("decision", decision_detail(e)),
        EntryKind::Tool => ("  tool", call_detail(e)),
        EntryKind::Compensation => ("  compensate", call_detail(e)),
        EntryKind::Child => ("  children", children_detail(e)),
    };
    let event = if e.kind == EntryKind::Decision {
        format!("  {event}")
    } else {
        event.to_owned()
    };
    let status = match (e.kind, e.status) {
        (EntryKind::Decision, CallStatus::Failed) => cx.out.cell("rejected", Color::Red),
        (EntryKind::Decision, CallStatus::Succeeded) => cx.out.cell("accepted", Color::Green),
        _ => cx.out.call_status_cell(e.status),
    };
    vec![
        Cell::new(version.map_or_else(String::new, |v| v.to_string())),
        Cell::new(clock(e.started_at)),
        Cell::new(event),
        Cell::new(&e.name),
        Cell::new(e.tool_kind.map_or("", |k| k.as_str())),
        status,
        Cell::new(fmt_duration_ms(e.duration_ms)),
        Cell::new(e.attempts),
        Cell::new(detail),
    ]
}

fn call_detail(e: &JournalEntry) -> String {
    let mut parts = Vec::new();
    if let Some(key) = &e.idempotency_key {
        parts.push(format!("key {key}"));
    }
    if let Some(code) = &e.error_code {
        let msg = e.error_message.as_deref().unwrap_or("");
        parts.push(format!("error {code}: {}", ellipsize(msg, 60)));
    }
    parts.push(format!(
        "input {}",
        e.input_hash.get(..12).unwrap_or(&e.input_hash)
    ));
    parts.join("; ")
}

/// The child runs a step started: how many, and their ids.
fn children_detail(e: &JournalEntry) -> String {
    let ids: Vec<&str> = (e.output.as_ref().and_then(|o| o.as_array()))
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    format!("started {}: {}", ids.len(), ellipsize(&ids.join(", "), 100))
}

fn decision_detail(e: &JournalEntry) -> String {
    let Some(record) = e
        .output
        .as_ref()
        .and_then(|o| serde_json::from_value::<DecisionRecord>(o.clone()).ok())
    else {
        return e
            .error_code
            .as_ref()
            .map_or_else(String::new, |c| format!("error {c}"));
    };
    let mut parts = Vec::new();
    match (&record.decision, &record.rejection) {
        (Some(Decision::Transition { to, .. }), _) => parts.push(format!("chose → {to}")),
        (Some(Decision::Tool { tool, input }), _) => parts.push(format!(
            "chose tool {tool} {}",
            ellipsize(&shown(input).to_string(), 40)
        )),
        (Some(Decision::Tools { calls }), _) => {
            let names: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
            parts.push(format!("chose tools {} at once", names.join(", ")));
        }
        (None, Some(r)) => parts.push(format!(
            "rejected {}: {}",
            r.code,
            ellipsize(&r.message, 60)
        )),
        (None, None) => parts.push("no decision".to_owned()),
    }
    if let Some(first) = parts.first_mut() {
        let _ = write!(first, " of [{}]", record.options.join(", "));
    }
    if !record.model.is_empty() {
        parts.push(format!("model {}", record.model));
    }
    // A scripted router reports no usage (or zero); only a real model's tokens are shown.
    if record.input_tokens.unwrap_or(0) > 0 || record.output_tokens.unwrap_or(0) > 0 {
        let t = |n: Option<u64>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
        parts.push(format!(
            "tokens {} in / {} out",
            t(record.input_tokens),
            t(record.output_tokens)
        ));
    }
    parts.push(format!("latency {}", fmt_duration_ms(record.latency_ms)));
    parts.join("; ")
}
