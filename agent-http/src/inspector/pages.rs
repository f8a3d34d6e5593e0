//! The pages: runs, one run, agents, one agent, one journal entry, sign-in. Each handler
//! reads the store, builds a view (strings ready to show) and renders a template; askama
//! escapes every value unless a template says `|safe`, which only the SVG built by
//! [`graph::svg`](super::graph::svg) (escaped there) uses.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use agent_core::graph::{GraphDescription, Routing};
use agent_core::router::{Decision, DecisionRecord};
use agent_core::store::verify::{VerifyReport, verify_run};
use agent_core::store::{
    EntryKind, JournalEntry, RunFilter, RunRecord, RunStatus, TransitionKind, now_ms,
};
use askama::Template;
use axum::extract::{Form, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::graph::{self, Overlay};
use super::view::{self, Change};
use super::{COOKIE, root_of};
use crate::Reader;
use crate::auth::Attempt;
use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::runs::{ListQuery, list_page};

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
const INLINE_JSON: usize = 2048;

/// A page that could not be shown, as a page.
pub(crate) struct PageError {
    status: StatusCode,
    message: String,
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self {
            status: e.status(),
            message: e.to_string(),
        }
    }
}

impl From<agent_core::store::StoreError> for PageError {
    fn from(e: agent_core::store::StoreError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("the page did not render: {e}"),
        }
    }
}

#[derive(Template)]
#[template(path = "error.html", config = "inspector/askama.toml")]
struct ErrorPage<'a> {
    root: &'a str,
    title: &'a str,
    message: &'a str,
}

impl PageError {
    fn not_found(message: String) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message,
        }
    }

    fn render(&self, root: &str) -> Response {
        let title = self.status.canonical_reason().unwrap_or("error");
        let page = ErrorPage {
            root,
            title,
            message: &self.message,
        };
        match page.render() {
            Ok(html) => (self.status, Html(html)).into_response(),
            Err(_) => (self.status, self.message.clone()).into_response(),
        }
    }
}

fn html(result: Result<String, PageError>, uri: &Uri) -> Response {
    match result {
        Ok(body) => Html(body).into_response(),
        Err(e) => e.render(&root_of(uri.path())),
    }
}

/// A run as a row of the runs table.
pub(crate) struct RunRow {
    id: String,
    agent: String,
    state: String,
    status: &'static str,
    version: u64,
    waiting_for: String,
    error: String,
    labels: String,
    created: String,
    updated: String,
}

impl From<&RunRecord> for RunRow {
    fn from(r: &RunRecord) -> Self {
        Self {
            id: r.id.clone(),
            agent: r.agent.clone(),
            state: r.state_name.clone(),
            status: r.status.as_str(),
            version: r.version,
            waiting_for: r
                .waiting_for
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            error: r
                .error
                .as_ref()
                .map(|e| format!("{}: {}", e.code, e.message))
                .unwrap_or_default(),
            labels: r
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            created: view::time(r.created_at),
            updated: view::time(r.updated_at),
        }
    }
}

/// The runs page's query: the API's filters, an age instead of times.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunsQuery {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    label: String,
    /// `1h`, `24h`, `7d`, `30d`, or empty for any.
    #[serde(default)]
    age: String,
    limit: Option<usize>,
    cursor: Option<String>,
    /// `rows`: only the live section (the script fetches it when runs move).
    #[serde(default)]
    fragment: String,
}

fn age_ms(age: &str) -> Result<Option<i64>, ApiError> {
    let hour = 3_600_000;
    Ok(match age {
        "" => None,
        "1h" => Some(hour),
        "24h" => Some(24 * hour),
        "7d" => Some(7 * 24 * hour),
        "30d" => Some(30 * 24 * hour),
        other => {
            return Err(ApiError::bad_request(format!(
                "age is 1h, 24h, 7d or 30d, not `{other}`"
            )));
        }
    })
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

struct RunsView {
    agent: String,
    status: String,
    label: String,
    age: String,
    limit: usize,
    agents: Vec<String>,
    statuses: Vec<&'static str>,
    counts: Vec<(&'static str, String)>,
    rows: Vec<RunRow>,
    next: Option<String>,
    first_page: bool,
    /// The query of this page without its cursor (the first page's, and the live fetch's).
    query: String,
    head: u64,
}

#[derive(Template)]
#[template(path = "runs.html", config = "inspector/askama.toml")]
struct RunsPage<'a> {
    root: &'a str,
    title: &'a str,
    p: &'a RunsView,
}

#[derive(Template)]
#[template(path = "runs_live.html", config = "inspector/askama.toml")]
struct RunsLive<'a> {
    root: &'a str,
    p: &'a RunsView,
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `GET /ui/`: the runs, filtered, a page at a time, with counts per status.
pub(crate) async fn runs(
    State(app): State<Reader>,
    uri: Uri,
    Query(q): Query<RunsQuery>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        // Read where the events end before the runs: what moves after it reaches the page.
        let head = app.events.event_head().await?.get();
        let limit = q.limit.unwrap_or(50);
        let created_after = age_ms(q.age.trim())?.map(|ms| now_ms() - ms);
        let list = ListQuery {
            agent: non_empty(&q.agent),
            status: non_empty(&q.status),
            label: non_empty(&q.label),
            created_after,
            limit: Some(limit),
            cursor: q.cursor.as_deref().and_then(non_empty),
            ..ListQuery::default()
        };
        let statuses: Vec<RunStatus> = list
            .status
            .as_deref()
            .map(|f| {
                f.split(',')
                    .filter_map(|s| RunStatus::parse(s.trim()))
                    .collect()
            })
            .unwrap_or_default();
        let page = list_page(app.store.as_ref(), list).await?;
        let labels: BTreeMap<String, String> = non_empty(&q.label)
            .iter()
            .flat_map(|l| l.split(','))
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let counts = app
            .store
            .count_runs(&RunFilter {
                agent: non_empty(&q.agent),
                statuses,
                labels,
                created_after,
                ..RunFilter::default()
            })
            .await?
            .into_iter()
            .map(|(status, n)| (status.as_str(), n.to_string()))
            .collect();
        let query = [
            ("agent", q.agent.trim()),
            ("status", q.status.trim()),
            ("label", q.label.trim()),
            ("age", q.age.trim()),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .chain(q.limit.map(|l| format!("limit={l}")))
        .collect::<Vec<_>>()
        .join("&");
        let next = page.next.as_ref().map(|c| {
            if query.is_empty() {
                format!("cursor={}", encode(c))
            } else {
                format!("{query}&cursor={}", encode(c))
            }
        });
        let view = RunsView {
            agent: q.agent.trim().to_owned(),
            status: q.status.trim().to_owned(),
            label: q.label.trim().to_owned(),
            age: q.age.trim().to_owned(),
            limit,
            agents: app.store.agents().await?,
            statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
            counts,
            rows: page.runs.iter().map(RunRow::from).collect(),
            next,
            first_page: q.cursor.as_deref().and_then(non_empty).is_none(),
            query,
            head,
        };
        Ok::<_, PageError>(if q.fragment == "rows" {
            RunsLive {
                root: &root,
                p: &view,
            }
            .render()?
        } else {
            RunsPage {
                root: &root,
                title: "Runs",
                p: &view,
            }
            .render()?
        })
    }
    .await;
    html(result, &uri)
}

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

struct DecisionRow {
    version: u64,
    seq: u32,
    status: &'static str,
    options: String,
    choice: String,
    rejection: String,
    model: String,
    tokens: String,
    latency_ms: u64,
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

fn decision_row(e: &JournalEntry) -> DecisionRow {
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
            .map(ToString::to_string)
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
            .map(|e| format!("{}: {}", e.code, e.message))
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

#[derive(Template)]
#[template(path = "entry.html", config = "inspector/askama.toml")]
struct EntryPage<'a> {
    root: &'a str,
    title: &'a str,
    run: &'a str,
    json: &'a str,
}

/// `GET /ui/runs/{id}/entries/{version}/{seq}`: one journal entry, whole (large outputs).
pub(crate) async fn entry(
    State(app): State<Reader>,
    uri: Uri,
    Path((id, version, seq)): Path<(String, u64, u32)>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let entry = app
            .store
            .journal(&id, Some(version))
            .await?
            .into_iter()
            .find(|e| e.seq == seq)
            .ok_or_else(|| {
                PageError::not_found(format!("run `{id}` has no entry {version}.{seq}"))
            })?;
        let entry = serde_json::to_value(&entry).unwrap_or_default();
        let json =
            serde_json::to_string_pretty(&*agent_core::secrets::shown(&entry)).unwrap_or_default();
        let title = format!("Entry {version}.{seq} of run {id}");
        Ok(EntryPage {
            root: &root,
            title: &title,
            run: &id,
            json: &json,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}

#[derive(Template)]
#[template(path = "agents.html", config = "inspector/askama.toml")]
struct AgentsPage<'a> {
    root: &'a str,
    title: &'a str,
    agents: &'a [String],
}

/// `GET /ui/agents`: the registered agents.
pub(crate) async fn agents(State(app): State<Reader>, uri: Uri) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let agents = app.store.agents().await?;
        Ok(AgentsPage {
            root: &root,
            title: "Agents",
            agents: &agents,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}

struct StateRow {
    name: String,
    roles: String,
    wait: String,
    to: String,
    on_error: String,
    tools: Vec<(String, String)>,
    children: String,
}

struct ToolRow {
    name: String,
    kind: String,
    compensation: String,
    enabled: bool,
    reason: String,
}

#[derive(Template)]
#[template(path = "agent.html", config = "inspector/askama.toml")]
struct AgentPage<'a> {
    root: &'a str,
    title: &'a str,
    name: &'a str,
    graph: &'a str,
    states: &'a [StateRow],
    tools: &'a [ToolRow],
}

/// `GET /ui/agents/{name}`: an agent's graph, from the stored description.
pub(crate) async fn agent(
    State(app): State<Reader>,
    uri: Uri,
    Path(name): Path<String>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let g = app
            .store
            .agent_graph(&name, None)
            .await?
            .ok_or_else(|| PageError::not_found(format!("agent `{name}` is not registered")))?;
        let switches = app.store.tool_switches().await?;
        let kind_of = |tool: &str| {
            g.tool(tool)
                .map_or_else(|| "?".to_owned(), |t| t.kind.to_string())
        };
        let states: Vec<StateRow> = g
            .states
            .iter()
            .map(|s| {
                let mut roles = Vec::new();
                if s.initial {
                    roles.push("initial");
                }
                if s.terminal {
                    roles.push("terminal");
                }
                if s.compensate {
                    roles.push("compensates");
                }
                roles.push(if s.route == Routing::Llm {
                    "LLM-routed"
                } else {
                    "handler"
                });
                StateRow {
                    name: s.name.clone(),
                    roles: roles.join(", "),
                    wait: s
                        .wait
                        .as_ref()
                        .map(|w| match w.timeout_ms {
                            Some(t) => format!("{} (timeout {t} ms)", w.signal),
                            None => w.signal.clone(),
                        })
                        .unwrap_or_default(),
                    to: s.to.join(", "),
                    on_error: s.on_error.clone().unwrap_or_default(),
                    tools: s.tools.iter().map(|t| (t.clone(), kind_of(t))).collect(),
                    children: s.children.join(", "),
                }
            })
            .collect();
        let tools: Vec<ToolRow> = g
            .tools
            .iter()
            .map(|t| {
                let switch = switches.iter().find(|s| s.tool == t.name);
                ToolRow {
                    name: t.name.clone(),
                    kind: t.kind.to_string(),
                    compensation: t.compensation.clone().unwrap_or_default(),
                    enabled: switch.is_none_or(|s| s.enabled),
                    reason: switch.and_then(|s| s.reason.clone()).unwrap_or_default(),
                }
            })
            .collect();
        let svg = graph::svg(&g, &Overlay::default());
        let title = format!("Agent {name}");
        Ok(AgentPage {
            root: &root,
            title: &title,
            name: &name,
            graph: &svg,
            states: &states,
            tools: &tools,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}

#[derive(Template)]
#[template(path = "login.html", config = "inspector/askama.toml")]
struct LoginPage<'a> {
    root: &'a str,
    title: &'a str,
    failed: bool,
}

/// `GET /ui/login`: the sign-in form (needed only where reads need the token).
pub(crate) async fn login(uri: Uri) -> Response {
    let root = root_of(uri.path());
    html(
        LoginPage {
            root: &root,
            title: "Sign in",
            failed: false,
        }
        .render()
        .map_err(Into::into),
        &uri,
    )
}

/// The sign-in form's body.
#[derive(Debug, Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// `POST /ui/login`: check the token and keep it in a cookie for reads of `/ui/`.
/// A wrong token counts against the client ([`crate::throttle`]): past the limit, the form
/// answers `429` with `Retry-After` without checking what it is given.
pub(crate) fn sign_in(
    auth: &crate::auth::Auth,
    uri: &Uri,
    client: Option<std::net::IpAddr>,
    Form(form): Form<SignIn>,
) -> Response {
    let root = root_of(uri.path());
    let attempt = auth.attempt(&form.token, client);
    if attempt != Attempt::Accepted {
        let page = LoginPage {
            root: &root,
            title: "Sign in",
            failed: true,
        };
        let mut response = match page.render() {
            Ok(body) => (StatusCode::FORBIDDEN, Html(body)).into_response(),
            Err(e) => return PageError::from(e).render(&root),
        };
        if let Attempt::Throttled(secs) = attempt {
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return response;
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        hex::encode(form.token.as_bytes())
    );
    let mut response = Redirect::to("./").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
