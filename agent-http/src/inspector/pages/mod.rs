//! The pages: runs, one run, one run's timing, one run's state edited, agents, one agent,
//! one journal entry, schedules, workers, sign-in. Each handler reads the store, builds a
//! view (strings ready to show) and renders a template; askama escapes every value unless a
//! template says `|safe`, which only the SVG built by [`graph::svg`](super::graph::svg)
//! (escaped there) uses.

mod agent_pages;
mod edit_page;
mod entry_page;
mod login_page;
mod run_family;
mod run_page;
mod runs_page;
mod schedules_page;
mod timing_page;
mod workers_page;

use std::fmt::Write as _;

use agent_core::store::RunRecord;
use askama::Template;
use axum::http::{StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};

use super::root_of;
use super::view;
use crate::error::ApiError;

pub(crate) use agent_pages::{agent, agents};
pub(crate) use edit_page::edit;
pub(crate) use entry_page::entry;
pub(crate) use login_page::{login, sign_in};
pub(crate) use run_page::run;
pub(crate) use runs_page::runs;
pub(crate) use schedules_page::schedules;
pub(crate) use timing_page::timing;
pub(crate) use workers_page::workers;

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
    /// Where a search found the run (`id`, or a state's field and value); empty elsewhere.
    matched: String,
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
                .map(view::waiting_for)
                .unwrap_or_default(),
            error: r
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            labels: r
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            created: view::time(r.created_at),
            updated: view::time(r.updated_at),
            matched: String::new(),
        }
    }
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
