//! A stopped run's state edited by hand (`GET /ui/runs/{id}/edit`): the state as JSON in a
//! text box, the reason and who, a preview of the change and the edit sent to the API
//! (`POST /v1/runs/{id}/state`) by the page's script, as a JSON Patch of what changed.
//!
//! The page says up front whether the run can be edited, by the rules the API applies
//! ([`agent_core::store::edit`]); the API still decides, and its refusal is shown.

use agent_core::graph::GraphDescription;
use agent_core::store::edit::{allowed_from, check_editable};
use agent_core::store::{RunRecord, RunStatus};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::{PageError, html};
use crate::Reader;
use crate::extract::Path;
use crate::inspector::{root_of, view};

/// A state larger than this (pretty JSON) is not put in a text box: a browser edits it
/// badly, and `agentctl edit` takes a patch from a file.
const EDITABLE_BYTES: usize = 1024 * 1024;

struct EditView {
    id: String,
    state_name: String,
    status: &'static str,
    version: u64,
    /// Why the run stopped: its error, or what it waits for.
    stopped: String,
    /// The states the graph leads to from the current one (an edit to another needs the
    /// graph overridden).
    leads_to: String,
    /// The state as pretty JSON, sealed values shown as `"[sealed:<key id>]"`.
    state: String,
    /// Why the page offers no form; `None` when the run can be edited here.
    refusal: Option<String>,
}

#[derive(Template)]
#[template(path = "edit.html", config = "inspector/askama.toml")]
struct EditPage<'a> {
    root: &'a str,
    title: &'a str,
    p: &'a EditView,
}

/// Why `run` cannot be edited now, in the words an operator acts on; `None` when it can:
/// the API's own check ([`check_editable`]).
pub(super) fn refusal(run: &RunRecord) -> Option<String> {
    check_editable(run).err().map(|e| e.to_string())
}

/// The states `graph` leads to from `from` ([`allowed_from`]), for the page.
fn leads_to(graph: Option<&GraphDescription>, from: &str) -> String {
    let Some(graph) = graph.filter(|g| g.state(from).is_some()) else {
        return "unknown (the agent's graph is not stored)".to_owned();
    };
    let to = allowed_from(graph, from);
    if to.is_empty() {
        "none (a terminal state)".to_owned()
    } else {
        to.join(", ")
    }
}

async fn edit_view(app: &Reader, id: &str) -> Result<EditView, PageError> {
    let run = app
        .store
        .load_run(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("run `{id}` not found")))?;
    let graph = app
        .store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    let (state, cut) = view::json(&run.state, EDITABLE_BYTES);
    let refusal = refusal(&run).or_else(|| {
        cut.then(|| {
            format!(
                "its state is larger than this page edits ({EDITABLE_BYTES} bytes); use \
                 `agentctl edit` with a JSON Patch"
            )
        })
    });
    let stopped = match (&run.error, &run.waiting_for) {
        (Some(e), _) => e.to_string(),
        (None, Some(w)) if run.status == RunStatus::Waiting => {
            format!("it waits for {}", view::waiting_for(w))
        }
        _ if run.status.is_final() => format!("it ended: {}", run.status.as_str()),
        _ => format!("it is {}", run.status.as_str()),
    };
    Ok(EditView {
        id: run.id.clone(),
        status: run.status.as_str(),
        version: run.version,
        stopped,
        leads_to: leads_to(graph.as_ref(), &run.state_name),
        state_name: run.state_name,
        state,
        refusal,
    })
}

/// `GET /ui/runs/{id}/edit`: the form that edits a stopped run's state, or why there is none.
pub(crate) async fn edit(State(app): State<Reader>, uri: Uri, Path(id): Path<String>) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let view = edit_view(&app, &id).await?;
        let title = format!("Edit the state of run {id}");
        Ok(EditPage {
            root: &root,
            title: &title,
            p: &view,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}
