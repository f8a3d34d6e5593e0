//! A run's page (`GET /ui/runs/{id}`): state, timeline, journal, decisions, signals, pending
//! calls, its family (parents and children).
//!
//! Every part is bounded whatever the run's length: the timeline and the journal a page at a
//! time (`?timeline=N`, `?journal=N`, 0 the newest), the path summarised, the children a
//! bounded tree.

use agent_core::graph::GraphDescription;
use agent_core::router::{Decision, DecisionRecord};
use agent_core::store::verify::{VerifyReport, verify_run};
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, RunRecord, RunStatus, TransitionKind, TransitionRecord,
    now_ms,
};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::run_family::{Family, TreeLine, family};
use super::{PageError, RunRow, html};
use crate::Reader;
use crate::extract::{Path, Query};
use crate::inspector::graph::{self, Overlay};
use crate::inspector::root_of;
use crate::inspector::view::{self, Change};

/// Versions on one page of the timeline (newest page first), each with its state and change.
const TIMELINE_PAGE: u64 = 50;
/// Steps of the path named at each end; those between are counted.
const PATH_ENDS: usize = 3;
/// Journal entries on one page of a run's journal (newest page first).
const JOURNAL_PAGE: usize = 200;
/// A run's page reads at most this many of its latest transitions (its graph's overlay and
/// path are drawn from them; older ones through the API, a page at a time).
const HISTORY_READ: usize = 2000;
/// A run's page reads at most this many journal entries, from the first version of the
/// timeline's page (the entries of its versions' steps).
const JOURNAL_READ: usize = 10 * JOURNAL_PAGE;
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

/// A call journaled and not completed: sent with no result committed (its outcome unknown
/// until it is retried with the same key), or a compensation that failed and is retried
/// when the run resumes.
struct PendingCall {
    version: u64,
    seq: u32,
    kind: &'static str,
    name: String,
    tool_kind: String,
    key: String,
    attempts: u32,
    /// `started` (in flight, or cut short) or `retrying` (more than one attempt), or
    /// `failed, retried on resume` for a compensation.
    status: String,
    started: String,
    error: String,
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
    /// What the run spent (asks, tool calls, tokens, cost); empty while nothing.
    spend: String,
    /// The run's budget; empty for none.
    budget: String,
    created: String,
    updated: String,
    state: String,
    graph: Option<String>,
    /// The path's first and last steps, and how many are between them.
    path_head: Vec<String>,
    path_between: usize,
    path_tail: Vec<String>,
    /// The path read from this version on (0: from the start).
    path_from: u64,
    timeline: Vec<TimelineRow>,
    /// Which page of the timeline is shown (0: the newest versions) and how many there are.
    timeline_page: u64,
    timeline_pages: u64,
    /// The query of the pages before and after this one (`?timeline=2&journal=1`), empty
    /// for none.
    timeline_older: String,
    timeline_newer: String,
    timeline_oldest: String,
    journal: Vec<EntryRow>,
    /// Which page of the journal is shown (0: the newest entries) and how many there are.
    journal_page: usize,
    journal_pages: usize,
    journal_total: usize,
    journal_older: String,
    journal_newer: String,
    /// The versions whose steps' entries the journal shows (the timeline's page).
    journal_versions: (u64, u64),
    decisions: Vec<DecisionRow>,
    signals: Vec<SignalRow>,
    pending: Vec<PendingCall>,
    /// When the pending calls are tried again, as far as the run's record says.
    pending_next: String,
    family: Family,
    spawned_by: Option<(String, u64)>,
    forked_from: Option<(String, u64)>,
    verify: VerifyView,
    is_final: bool,
    can_retry: bool,
    /// Why the run cannot be edited now ([`super::edit_page`]); `None`: its page links to
    /// the edit.
    edit_refused: Option<String>,
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

/// The path over `history` (transitions that moved, or steps that stayed): its first and
/// last [`PATH_ENDS`] steps and how many are between, so that a run of thousands of steps
/// is one short sentence.
fn path(history: &[TransitionRecord]) -> (Vec<String>, usize, Vec<String>) {
    let steps: Vec<String> = history
        .iter()
        .filter(|t| t.from_state != t.to_state || t.kind == TransitionKind::Step)
        .filter(|t| t.kind != TransitionKind::Start)
        .map(|t| format!("{} → {}", t.from_state, t.to_state))
        .collect();
    if steps.len() <= 2 * PATH_ENDS + 1 {
        return (steps, 0, Vec::new());
    }
    let between = steps.len() - 2 * PATH_ENDS;
    let tail = steps[steps.len() - PATH_ENDS..].to_vec();
    let head = steps[..PATH_ENDS].to_vec();
    (head, between, tail)
}

/// `?timeline=T&journal=J#anchor`, the pages that are not the newest (0) left out.
fn page_query(timeline: u64, journal: usize, anchor: &str) -> String {
    let parts: Vec<String> = [("timeline", timeline), ("journal", journal as u64)]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    format!("?{}#{anchor}", parts.join("&"))
}

/// The calls of the run's current step that are not completed (the step in progress, or
/// cut short), and when they are tried again as far as the run's record says: the journal
/// keeps each call's attempts, not the time of its next one (a worker waits its backoff in
/// memory).
fn pending_calls(run: &RunRecord, step: &[JournalEntry]) -> (Vec<PendingCall>, String) {
    let pending: Vec<PendingCall> = step
        .iter()
        .filter(|e| {
            e.status == CallStatus::Started
                || (e.status == CallStatus::Failed && e.kind == EntryKind::Compensation)
        })
        .map(|e| PendingCall {
            version: e.version,
            seq: e.seq,
            kind: e.kind.as_str(),
            name: e.name.clone(),
            tool_kind: e.tool_kind.map(|k| k.to_string()).unwrap_or_default(),
            key: e.idempotency_key.clone().unwrap_or_default(),
            attempts: e.attempts,
            status: match (e.status, e.attempts) {
                (CallStatus::Failed, _) => "failed, retried on resume".to_owned(),
                (_, n) if n > 1 => format!("retrying (attempt {n})"),
                _ => "started, no result yet".to_owned(),
            },
            started: view::time(e.started_at),
            error: e.error_message.clone().unwrap_or_default(),
        })
        .collect();
    let next = match (&run.lease_owner, run.lease_expires_at, run.wake_at) {
        _ if pending.is_empty() => String::new(),
        _ if run.status.has_ended() => {
            "never: the run has ended; the calls' outcomes are unknown".to_owned()
        }
        (Some(owner), Some(at), _) if at <= now_ms() => format!(
            "at the next claim of the run: the lease of {owner} expired at {} (the worker \
             stopped renewing it)",
            view::time(at)
        ),
        (Some(owner), Some(at), _) => format!(
            "now, by {owner} (its backoff between attempts is not recorded); should it stop, \
             by the next worker to claim the run after its lease expires at {}",
            view::time(at)
        ),
        (_, _, Some(at)) => format!("when the run wakes, at {}", view::time(at)),
        _ if run.status.is_runnable() => {
            "when a worker claims the run (it is runnable and not leased)".to_owned()
        }
        _ => format!(
            "when the run is runnable again (it is {})",
            run.status.as_str()
        ),
    };
    (pending, next)
}

async fn run_view(app: &Reader, id: &str, q: &RunQuery) -> Result<RunView, PageError> {
    let head = app.events.event_head().await?.get();
    let run = app
        .store
        .load_run(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("run `{id}` not found")))?;
    // Every read bounded, whatever the run's length: the latest transitions, the journal
    // from the first of them, a page of the timeline, the current step's calls, a bounded
    // tree of children, and the chain verified only when short.
    let first_read = (run.version + 1).saturating_sub(HISTORY_READ as u64);
    let history = app.store.history_from(id, first_read, HISTORY_READ).await?;
    let step = app.store.journal(id, Some(run.version)).await?;
    let signals = app.store.pending_signals(id).await?;
    let family = family(app.store.as_ref(), &run).await?;
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
    let (path_head, path_between, path_tail) = path(&history);
    let path_from = history.first().map_or(0, |t| t.version);

    // The timeline a page of versions at a time, newest page first; the version before
    // the page is read too, for the change of the page's first version.
    let oldest = app
        .store
        .version_span(id)
        .await?
        .map_or(run.version, |s| s.first.min(run.version));
    let span = run.version + 1 - oldest;
    let timeline_pages = span.div_ceil(TIMELINE_PAGE).max(1);
    let timeline_page = q.timeline.min(timeline_pages - 1);
    let last_shown = run.version - (timeline_page * TIMELINE_PAGE).min(run.version);
    let first_shown = (last_shown + 1).saturating_sub(TIMELINE_PAGE).max(oldest);
    let before = first_shown.saturating_sub(1);
    let page_history = app
        .store
        .history_from(
            id,
            before,
            usize::try_from(last_shown - before + 1).unwrap_or(0),
        )
        .await?;
    let mut timeline = Vec::new();
    let mut previous: Option<Value> = None;
    for t in &page_history {
        let state = app.store.state_at(id, t.version).await?;
        let changes = match (&previous, &state) {
            (Some(before), Some(now)) => view::diff(before, &now.state),
            _ => Vec::new(),
        };
        previous = state.as_ref().map(|s| s.state.clone());
        if t.version < first_shown {
            // Read only for the change of the first version shown.
            continue;
        }
        timeline.push(TimelineRow {
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
        });
    }
    // The journal of the steps begun at the versions of the timeline's page, so that the
    // two page together down to the first version.
    let journal: Vec<JournalEntry> = app
        .store
        .journal_from(id, (first_shown, 0), JOURNAL_READ)
        .await?
        .into_iter()
        .filter(|e| e.version <= last_shown)
        .collect();
    let is_final = run.status.is_final();
    // Within them, the journal a page at a time, newest page first: a run with 10,000 entries is not
    // one page of 10,000 rows. Entries stay in journal order within a page.
    let journal_pages = journal.len().div_ceil(JOURNAL_PAGE).max(1);
    let journal_page = q.journal.min(journal_pages - 1);
    let end = journal.len().saturating_sub(journal_page * JOURNAL_PAGE);
    let shown = &journal[end.saturating_sub(JOURNAL_PAGE)..end];
    // The decisions of the journal's page: a long run's thousands of decisions are paged
    // with the journal.
    let decisions = shown
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .map(decision_row)
        .collect();
    let (pending, pending_next) = pending_calls(&run, &step);
    let link = |timeline: u64, journal: usize, anchor| page_query(timeline, journal, anchor);
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
        spend: if run.spend.is_zero() {
            String::new()
        } else {
            run.spend.to_string()
        },
        budget: run.budget.map(|b| b.to_string()).unwrap_or_default(),
        created: view::time(run.created_at),
        updated: view::time(run.updated_at),
        state: view::json(&run.state, 64 * 1024).0,
        graph: graph.as_ref().map(|g| graph::svg(g, &over)),
        path_head,
        path_between,
        path_tail,
        path_from,
        timeline,
        timeline_page,
        timeline_pages,
        timeline_older: if timeline_page + 1 < timeline_pages {
            link(timeline_page + 1, journal_page, "timeline-h")
        } else {
            String::new()
        },
        timeline_newer: if timeline_page > 0 {
            link(timeline_page - 1, journal_page, "timeline-h")
        } else {
            String::new()
        },
        timeline_oldest: if timeline_page + 2 < timeline_pages {
            link(timeline_pages - 1, journal_page, "timeline-h")
        } else {
            String::new()
        },
        journal: shown.iter().map(entry_row).collect(),
        journal_page,
        journal_pages,
        journal_total: journal.len(),
        // Past the oldest entries of these versions, the next older versions' newest.
        journal_older: if journal_page + 1 < journal_pages {
            link(timeline_page, journal_page + 1, "journal-h")
        } else if timeline_page + 1 < timeline_pages {
            link(timeline_page + 1, 0, "journal-h")
        } else {
            String::new()
        },
        journal_newer: if journal_page > 0 {
            link(timeline_page, journal_page - 1, "journal-h")
        } else if timeline_page > 0 {
            link(timeline_page - 1, 0, "journal-h")
        } else {
            String::new()
        },
        journal_versions: (first_shown, last_shown),
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
        pending,
        pending_next,
        family,
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
        edit_refused: super::edit_page::refusal(&run),
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
    /// The page of the timeline (0, the default: the newest versions).
    #[serde(default)]
    timeline: u64,
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
        let view = run_view(&app, &id, &q).await?;
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
