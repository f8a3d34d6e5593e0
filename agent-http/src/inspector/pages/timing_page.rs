//! A run's timing page (`GET /ui/runs/{id}/timing`): the waterfall of its steps, calls and
//! waits from its durable history, each decision's prompt and answer as stored, and a link
//! to the run's trace when a trace viewer is configured.

use agent_core::router::DecisionRecord;
use agent_core::secrets::holds_sealed;
use agent_core::store::{EntryKind, JournalEntry, now_ms};
use agent_core::trace::RunTrace;
use askama::Template;
use axum::Extension;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::run_page::{DecisionRow, INLINE_JSON, decision_row};
use super::{PageError, html};
use crate::Reader;
use crate::extract::{Path, Query};
use crate::inspector::timing::{self, Inputs, Waterfall};
use crate::inspector::{TraceUrl, root_of, view};

/// Steps on one page of the waterfall (the latest, unless the page asks for earlier ones):
/// 500 made a page of 760 KB for a run whose steps each call a tool (the inspector bench),
/// past the few hundred KB a page may take.
const STEPS_SHOWN: u64 = 200;
/// Journal entries read for the steps shown: a step that made thousands of calls does not
/// make a page of megabytes (the run's page pages the whole journal).
const ENTRIES_READ: usize = 600;

/// A decision with what was sent and what came back, as stored.
struct DecisionView {
    row: DecisionRow,
    /// The entry's input: what the journal keeps of the prompt (its hash and the options).
    prompt: String,
    /// The model's raw answer (redacted when it was journaled).
    answer: String,
    /// Either was cut: the entry's page has it whole.
    cut: bool,
}

struct TimingView {
    id: String,
    status: &'static str,
    version: u64,
    waterfall: Waterfall,
    decisions: Vec<DecisionView>,
    /// The first and last versions shown (none when the first is past the last).
    first: u64,
    last: u64,
    /// The `upto` of the pages before and after this one, when there are steps there.
    earlier: Option<u64>,
    later: Option<u64>,
    /// Entries of these steps past [`ENTRIES_READ`] were not read.
    entries_cut: bool,
    trace_id: String,
    trace_link: Option<String>,
}

#[derive(Template)]
#[template(path = "timing.html", config = "inspector/askama.toml")]
struct TimingPage<'a> {
    root: &'a str,
    title: &'a str,
    p: &'a TimingView,
}

/// Which steps a timing page shows.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TimingQuery {
    /// The last version shown (the run's head by default): the page shows up to
    /// [`STEPS_SHOWN`] steps ending there.
    upto: Option<u64>,
}

fn decision_view(e: &JournalEntry) -> DecisionView {
    let (prompt, prompt_cut) = view::json(&e.input, INLINE_JSON);
    let record: Option<DecisionRecord> = e
        .output
        .as_ref()
        .and_then(|o| serde_json::from_value(o.clone()).ok());
    let (answer, answer_cut) = match (&record, &e.output) {
        // The raw answer is text; were it JSON holding a sealed value, it shows sealed.
        (Some(r), _) => match serde_json::from_str::<Value>(&r.raw_output) {
            Ok(v) if holds_sealed(&v) => view::json(&v, INLINE_JSON),
            _ => view::cut(r.raw_output.clone(), INLINE_JSON),
        },
        (None, Some(output)) => view::json(output, INLINE_JSON),
        (None, None) => (String::new(), false),
    };
    DecisionView {
        row: decision_row(e),
        prompt,
        answer,
        cut: prompt_cut || answer_cut,
    }
}

async fn timing_view(
    app: &Reader,
    id: &str,
    upto: Option<u64>,
    trace_url: Option<&str>,
) -> Result<TimingView, PageError> {
    let run = app
        .store
        .load_run(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("run `{id}` not found")))?;
    let last = upto.unwrap_or(run.version).min(run.version);
    // The transition before the first step shown: where that step starts.
    let base = last.saturating_sub(STEPS_SHOWN);
    let first = base + 1;
    let count = usize::try_from(last - base + 1).unwrap_or(usize::MAX);
    let history = app.store.history_from(id, base, count).await?;
    // From the version before the base too: the calls of the step that left it waiting
    // say whether it waited for children.
    let journal = app
        .store
        .journal_from(id, (base.saturating_sub(1), 0), ENTRIES_READ + 1)
        .await?;
    let at_head = last == run.version;
    let journal_end = if at_head { last } else { last - 1 };
    let entries_cut = journal.len() > ENTRIES_READ
        && journal
            .get(ENTRIES_READ)
            .is_some_and(|e| e.version <= journal_end);
    let journal: Vec<JournalEntry> = journal
        .into_iter()
        .take(ENTRIES_READ)
        .filter(|e| e.version <= journal_end)
        .collect();
    let graph = app
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    let waterfall = timing::layout(&Inputs {
        run: &run,
        history: &history,
        journal: &journal,
        graph: graph.as_ref(),
        at_head,
        now: now_ms(),
    });
    let decisions = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision && e.version >= base)
        .map(decision_view)
        .collect();
    let trace_id = hex::encode(RunTrace::of_record(&run).trace_id);
    Ok(TimingView {
        id: run.id.clone(),
        status: run.status.as_str(),
        version: run.version,
        waterfall,
        decisions,
        first,
        last,
        earlier: (base > 0).then_some(base),
        later: (last < run.version).then(|| (last + STEPS_SHOWN).min(run.version)),
        entries_cut,
        trace_link: trace_url.map(|url| url.replace("{trace_id}", &trace_id)),
        trace_id,
    })
}

/// `GET /ui/runs/{id}/timing`: the run's waterfall.
pub(crate) async fn timing(
    State(app): State<Reader>,
    Extension(TraceUrl(trace_url)): Extension<TraceUrl>,
    uri: Uri,
    Path(id): Path<String>,
    Query(q): Query<TimingQuery>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let view = timing_view(&app, &id, q.upto, trace_url.as_deref()).await?;
        let title = format!("Timing of run {id}");
        Ok(TimingPage {
            root: &root,
            title: &title,
            p: &view,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}
