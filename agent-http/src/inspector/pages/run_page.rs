//! A run's page (`GET /ui/runs/{id}`): state, timeline, journal, decisions, signals, children.

use agent_core::graph::GraphDescription;
use agent_core::router::{Decision, DecisionRecord};
use agent_core::store::verify::{VerifyReport, verify_run};
use agent_core::store::{EntryKind, JournalEntry, RunFilter, RunRecord, RunStatus, TransitionKind};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::{PageError, RunRow, html};
use crate::Reader;
use crate::extract::{Path, Query};
use crate::inspector::graph::{self, Overlay};
use crate::inspector::root_of;
use crate::inspector::view::{self, Change};

/// Versions whose state (and change) the timeline shows; older ones link to the API.
const TIMELINE_STATES: usize = 200;
/// Journal entries on one page of a run's journal (newest page first).
const JOURNAL_PAGE: usize = 200;
/// A run's page reads at most this many of its latest transitions (its graph's overlay and
/// path are drawn from them; older ones through the API, a page at a time).
const HISTORY_READ: usize = 2000;
/// A run's page reads at most this many journal entries, from the first version of the
/// transitions it read.
const JOURNAL_READ: usize = 10 * JOURNAL_PAGE;
/// Children listed on a run's page, newest first.
const CHILDREN_SHOWN: usize = 200;
/// A run's page verifies its hash chain up to this many versions (verifying reads every
/// version's state); a longer chain is left to `agentctl verify`.
const VERIFIED_VERSIONS: u64 = 1000;
/// Inputs and outputs shown inline up to this many bytes; the rest on the entry's page.
pub(super) const INLINE_JSON: usize = 2048;

struct TimelineRow {
    version: u64,
    kind: &'static str,
    from: String,
    to: String,
    status: &'static str,
    at: String,
    note: String,
    hash: String,
    state: Option<String>,
    changes: Vec<Change>,
    pruned: bool,
}

struct EntryRow {
    version: u64,
    seq: u32,
    kind: &'static str,
    state: String,
    name: String,
    tool_kind: String,
    key: String,
    attempts: u32,
    duration_ms: u64,
    status: &'static str,
    error: String,
    input: String,
    input_cut: bool,
    output: String,
    output_cut: bool,
    started: String,
}

/// A decision as a row of a table (the run's page, the timing page).
pub(super) struct DecisionRow {
    pub(super) version: u64,
    pub(super) seq: u32,
    pub(super) status: &'static str,
    pub(super) options: String,
    pub(super) choice: String,
    pub(super) rejection: String,
    pub(super) model: String,
    pub(super) tokens: String,
    pub(super) latency_ms: u64,
}

struct SignalRow {
    id: i64,
    name: String,
    payload: String,
    sent: String,
}

struct VerifyView {
    /// Whether the chain was verified here (not when it is longer than this page verifies).
    checked: bool,
    ok: bool,
    summary: String,
}

struct RunView {
    id: String,
    agent: String,
    fingerprint: String,
    state_name: String,
    status: &'static str,
    version: u64,
    waiting_for: String,
    /// The run waits for a signal a person can send (not for its children).
    waits_for_signal: bool,
    /// The signal form's controls, from the wait's payload schema (`None`: JSON).
    signal_fields: Option<Vec<view::FormField>>,
    wake_at: String,
    error: String,
    lease: String,
    cancel_requested: String,
    labels: String,
    /// What started the run (a schedule's tick, a webhook's delivery, a message), from its
    /// labels; empty for code and the API.
    started_by: String,
    created: String,
    updated: String,
    state: String,
    graph: Option<String>,
    path: Vec<String>,
    timeline: Vec<TimelineRow>,
    timeline_older: usize,
    journal: Vec<EntryRow>,
    /// Which page of the journal is shown (0: the newest entries) and how many there are.
    journal_page: usize,
    journal_pages: usize,
    journal_total: usize,
    decisions: Vec<DecisionRow>,
    signals: Vec<SignalRow>,
    children: Vec<RunRow>,
    spawned_by: Option<(String, u64)>,
    forked_from: Option<(String, u64)>,
    verify: VerifyView,
    is_final: bool,
    can_retry: bool,
    head: u64,
}

#[derive(Template)]
#[template(path = "run.html", config = "inspector/askama.toml")]
struct RunPage<'a> {
    root: &'a str,
    title: &'a str,
    p: &'a RunView,
}

#[derive(Template)]
#[template(path = "run_live.html", config = "inspector/askama.toml")]
struct RunLive<'a> {
    root: &'a str,
    p: &'a RunView,
}

/// The run's path over its agent's graph.
fn overlay(run: &RunRecord, history: &[agent_core::store::TransitionRecord]) -> Overlay {
    let mut o = Overlay {
        current: Some(run.state_name.clone()),
        ..Overlay::default()
    };
    for t in history {
        o.visited.insert(t.from_state.clone());
        o.visited.insert(t.to_state.clone());
        if matches!(t.kind, TransitionKind::Step | TransitionKind::Error) {
            *o.taken
                .entry((t.from_state.clone(), t.to_state.clone()))
                .or_default() += 1;
        }
        if t.kind == TransitionKind::Error {
            o.failed.insert(t.from_state.clone());
        }
    }
    o
}

fn entry_row(e: &JournalEntry) -> EntryRow {
    let (input, input_cut) = view::json(&e.input, INLINE_JSON);
    let (output, output_cut) = e
        .output
        .as_ref()
        .map_or((String::new(), false), |o| view::json(o, INLINE_JSON));
    let error = [
        e.error_code.clone(),
        e.error_class.map(|c| format!("({c:?})")),
        e.error_message.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    EntryRow {
        version: e.version,
        seq: e.seq,
        kind: e.kind.as_str(),
        state: e.state.clone(),
        name: e.name.clone(),
        tool_kind: e.tool_kind.map(|k| k.to_string()).unwrap_or_default(),
        key: e.idempotency_key.clone().unwrap_or_default(),
        attempts: e.attempts,
        duration_ms: e.duration_ms,
        status: e.status.as_str(),
        error,
        input,
        input_cut,
        output,
        output_cut,
        started: view::time(e.started_at),
    }
}

pub(super) fn decision_row(e: &JournalEntry) -> DecisionRow {
    let record: Option<DecisionRecord> = e
        .output
        .as_ref()
        .and_then(|o| serde_json::from_value(o.clone()).ok());
    match record {
        Some(r) => DecisionRow {
            version: e.version,
            seq: e.seq,
            status: e.status.as_str(),
            options: r.options.join(", "),
            choice: match &r.decision {
                Some(Decision::Transition { to, .. }) => format!("→ {to}"),
                Some(Decision::Tool { tool, .. }) => format!("tool {tool}"),
                Some(Decision::Tools { calls }) => format!(
                    "tools {}",
                    calls
                        .iter()
                        .map(|c| c.tool.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => String::new(),
            },
            rejection: r
                .rejection
                .as_ref()
                .map(|j| {
                    let code = serde_json::to_value(j.code)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    format!("{code}: {}", j.message)
                })
                .unwrap_or_default(),
            model: r.model,
            tokens: match (r.input_tokens, r.output_tokens) {
                (None, None) => String::new(),
                (i, o) => format!(
                    "{} in / {} out",
                    i.map_or("?".to_owned(), |n| n.to_string()),
                    o.map_or("?".to_owned(), |n| n.to_string())
                ),
            },
            latency_ms: r.latency_ms,
        },
        None => DecisionRow {
            version: e.version,
            seq: e.seq,
            status: e.status.as_str(),
            options: String::new(),
            choice: String::new(),
            rejection: e.error_code.clone().unwrap_or_default(),
            model: String::new(),
            tokens: String::new(),
            latency_ms: e.duration_ms,
        },
    }
}

fn verify_view(report: &VerifyReport) -> VerifyView {
    VerifyView {
        checked: true,
        ok: report.ok,
        summary: match &report.problem {
            None => format!(
                "{} versions verified{}; head {}",
                report.verified,
                if report.legacy > 0 {
                    format!(" ({} with the legacy hash)", report.legacy)
                } else {
                    String::new()
                },
                report
                    .head_hash
                    .as_deref()
                    .map_or("none", |h| &h[..h.len().min(16)])
            ),
            Some(p) => format!("version {}: {} ({})", p.version, p.message, p.kind.as_str()),
        },
    }
}

async fn run_view(app: &Reader, id: &str, journal_page: usize) -> Result<RunView, PageError> {
    let head = app.events.event_head().await?.get();
    let run = app
        .store
        .load_run(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("run `{id}` not found")))?;
    // Every read bounded, whatever the run's length: the latest transitions, the journal
    // from the first of them, a page of children, and the chain verified only when short.
    let first_read = (run.version + 1).saturating_sub(HISTORY_READ as u64);
    let history = app.store.history_from(id, first_read, HISTORY_READ).await?;
    let journal = app
        .store
        .journal_from(id, (first_read, 0), JOURNAL_READ)
        .await?;
    let signals = app.store.pending_signals(id).await?;
    let children = app
        .store
        .list_runs(&RunFilter {
            spawned_by: Some(id.to_owned()),
            limit: Some(CHILDREN_SHOWN),
            ..RunFilter::default()
        })
        .await?;
    let graph: Option<GraphDescription> = app
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    let verify = if run.version > VERIFIED_VERSIONS {
        VerifyView {
            checked: false,
            ok: false,
            summary: format!(
                "not verified here: {} versions, more than this page verifies \
                 ({VERIFIED_VERSIONS}); run `agentctl verify`",
                run.version
            ),
        }
    } else {
        verify_view(&verify_run(app.store.as_ref(), &run).await?)
    };
    let signal_fields = graph
        .as_ref()
        .and_then(|g| g.states.iter().find(|s| s.name == run.state_name))
        .and_then(|s| s.wait.as_ref())
        .and_then(|w| w.payload_schema.as_ref())
        .and_then(view::form_fields);
    let over = overlay(&run, &history);
    let path: Vec<String> = history
        .iter()
        .filter(|t| t.from_state != t.to_state || t.kind == TransitionKind::Step)
        .filter(|t| t.kind != TransitionKind::Start)
        .map(|t| format!("{} → {}", t.from_state, t.to_state))
        .collect();
    let older = history.len().saturating_sub(TIMELINE_STATES);
    let not_shown = older + usize::try_from(first_read).unwrap_or(usize::MAX);
    let mut timeline = Vec::new();
    let mut previous: Option<Value> = None;
    for t in history.iter().skip(older.saturating_sub(1)) {
        let state = app.store.state_at(id, t.version).await?;
        let changes = match (&previous, &state) {
            (Some(before), Some(now)) => view::diff(before, &now.state),
            _ => Vec::new(),
        };
        previous = state.as_ref().map(|s| s.state.clone());
        if timeline.is_empty() && older > 0 {
            // Read only for the change of the first version shown.
            timeline.push(None);
            continue;
        }
        timeline.push(Some(TimelineRow {
            version: t.version,
            kind: t.kind.as_str(),
            from: t.from_state.clone(),
            to: t.to_state.clone(),
            status: t.status.as_str(),
            at: view::time(t.created_at),
            note: t
                .note
                .as_ref()
                .map(|n| format!("by {}: {}", n.by, n.reason))
                .unwrap_or_default(),
            hash: t.hash[..t.hash.len().min(12)].to_owned(),
            pruned: state.is_none(),
            state: state.map(|s| view::json(&s.state, INLINE_JSON).0),
            changes,
        }));
    }
    let timeline: Vec<TimelineRow> = timeline.into_iter().flatten().collect();
    let decisions = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .map(decision_row)
        .collect();
    let is_final = run.status.is_final();
    // The journal a page at a time, newest page first: a run with 10,000 entries is not
    // one page of 10,000 rows. Entries stay in journal order within a page.
    let journal_pages = journal.len().div_ceil(JOURNAL_PAGE).max(1);
    let journal_page = journal_page.min(journal_pages - 1);
    let end = journal.len().saturating_sub(journal_page * JOURNAL_PAGE);
    let shown = end.saturating_sub(JOURNAL_PAGE)..end;
    Ok(RunView {
        id: run.id.clone(),
        agent: run.agent.clone(),
        fingerprint: run.fingerprint.clone(),
        state_name: run.state_name.clone(),
        status: run.status.as_str(),
        version: run.version,
        waiting_for: run
            .waiting_for
            .as_ref()
            .map(view::waiting_for)
            .unwrap_or_default(),
        waits_for_signal: run.status == RunStatus::Waiting
            && run
                .waiting_for
                .as_ref()
                .is_some_and(|w| w.signal_name().is_some()),
        signal_fields,
        wake_at: run.wake_at.map(view::time).unwrap_or_default(),
        error: run
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        lease: match (&run.lease_owner, run.lease_expires_at) {
            (Some(owner), Some(at)) => {
                format!(
                    "held by {owner} until {} (epoch {})",
                    view::time(at),
                    run.epoch
                )
            }
            _ => format!("free (epoch {})", run.epoch),
        },
        cancel_requested: run
            .cancel_requested
            .as_ref()
            .map(|n| format!("by {}: {}", n.by, n.reason))
            .unwrap_or_default(),
        labels: RunRow::from(&run).labels,
        started_by: view::started_by(&run.labels),
        created: view::time(run.created_at),
        updated: view::time(run.updated_at),
        state: view::json(&run.state, 64 * 1024).0,
        graph: graph.as_ref().map(|g| graph::svg(g, &over)),
        path,
        timeline,
        timeline_older: not_shown,
        journal: journal[shown].iter().map(entry_row).collect(),
        journal_page,
        journal_pages,
        journal_total: journal.len(),
        decisions,
        signals: signals
            .iter()
            .map(|s| SignalRow {
                id: s.id,
                name: s.name.clone(),
                payload: view::json(&s.payload, INLINE_JSON).0,
                sent: view::time(s.created_at),
            })
            .collect(),
        children: children.iter().map(RunRow::from).collect(),
        spawned_by: run
            .spawned_by
            .as_ref()
            .map(|s| (s.run_id.clone(), s.version)),
        forked_from: run.parent.clone(),
        verify,
        is_final,
        can_retry: matches!(
            run.status,
            RunStatus::Failed | RunStatus::Quarantined | RunStatus::DeadLettered
        ),
        head,
    })
}

/// Which part of a run's page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunQuery {
    /// `live`: only the section that moves with the run.
    #[serde(default)]
    fragment: String,
    /// The page of the journal (0, the default: the newest entries).
    #[serde(default)]
    journal: usize,
}

/// `GET /ui/runs/{id}`: one run, whole.
pub(crate) async fn run(
    State(app): State<Reader>,
    uri: Uri,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let view = run_view(&app, &id, q.journal).await?;
        let title = format!("Run {id}");
        Ok(if q.fragment == "live" {
            RunLive {
                root: &root,
                p: &view,
            }
            .render()?
        } else {
            RunPage {
                root: &root,
                title: &title,
                p: &view,
            }
            .render()?
        })
    }
    .await;
    html(result, &uri)
}
