//! The runs page (`GET /ui/`): the runs, filtered, a page at a time, with counts per status;
//! and the search, by run id (exact, or its first characters) and by text in the runs' states.

use std::collections::BTreeMap;

use agent_core::store::{RunFilter, RunStatus, now_ms};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{PageError, RunRow, encode, html};
use crate::Reader;
use crate::error::ApiError;
use crate::extract::Query;
use crate::inspector::root_of;
use crate::inspector::view;
use crate::runs::{ListQuery, list_page};

/// The most runs one batch action acts on: a batch over more is refused by the page, which
/// asks for narrower filters (each run is one request to the API).
pub(crate) const BATCH_MAX: usize = 500;

/// Runs one search reads (the newest matching the other filters, or the next ones from its
/// cursor): the store has no text search, so the page looks through a page of candidates.
pub(crate) const SEARCH_SCAN: usize = 500;

/// The runs page's query: the API's filters, an age instead of times, and a search.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunsQuery {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    label: String,
    /// Only the children of this run.
    #[serde(default)]
    parent: String,
    /// A run's id (its page opens), the first characters of ids, or text in the states.
    #[serde(default)]
    q: String,
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
    parent: String,
    age: String,
    limit: usize,
    /// The search, and what it looked through (`searched 500 runs …`); empty without one.
    search: String,
    searched: String,
    agents: Vec<String>,
    statuses: Vec<&'static str>,
    counts: Vec<(&'static str, String)>,
    rows: Vec<RunRow>,
    next: Option<String>,
    first_page: bool,
    /// The query of this page without its cursor (the first page's, and the live fetch's).
    query: String,
    /// The same filters as the API's `GET /v1/runs` takes them (the age as `created_after`,
    /// fixed when the page was rendered): the batch actions list their runs with it.
    api_query: String,
    /// The filters in words, for the batch's confirmation (`agent=Order, status=waiting`).
    filters_text: String,
    batch_max: usize,
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

/// `GET /ui/`: the runs, filtered, a page at a time, with counts per status.
pub(crate) async fn runs(
    State(app): State<Reader>,
    uri: Uri,
    Query(q): Query<RunsQuery>,
) -> Response {
    let root = root_of(uri.path());
    let search = q.q.trim();
    // A run's id typed whole opens its page.
    if !search.is_empty() && q.fragment.is_empty() {
        match app.store.load_run(search).await {
            Ok(Some(run)) => {
                let to = format!("{root}ui/runs/{}", encode(&run.id));
                return Redirect::to(&to).into_response();
            }
            Ok(None) => {}
            Err(e) => return html(Err(e.into()), &uri),
        }
    }
    let result = async {
        // Read where the events end before the runs: what moves after it reaches the page.
        let head = app.events.event_head().await?.get();
        let limit = q.limit.unwrap_or(50);
        let created_after = age_ms(q.age.trim())?.map(|ms| now_ms() - ms);
        let list = ListQuery {
            agent: non_empty(&q.agent),
            status: non_empty(&q.status),
            label: non_empty(&q.label),
            parent: non_empty(&q.parent),
            created_after,
            limit: Some(if search.is_empty() {
                limit
            } else {
                SEARCH_SCAN
            }),
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
        let mut page = list_page(app.store.as_ref(), list).await?;
        let scanned = page.runs.len();
        let found: Vec<RunRow> = page
            .runs
            .iter()
            .filter_map(|r| {
                let matched = view::found_in(&r.id, &r.state, search)?;
                let mut row = RunRow::from(r);
                row.matched = matched;
                Some(row)
            })
            .collect();
        if !search.is_empty() {
            page.runs.clear();
        }
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
                spawned_by: non_empty(&q.parent),
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
            ("parent", q.parent.trim()),
            ("q", search),
            ("age", q.age.trim()),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .chain(q.limit.map(|l| format!("limit={l}")))
        .collect::<Vec<_>>()
        .join("&");
        let filters: Vec<(&str, String)> = [
            ("agent", q.agent.trim()),
            ("status", q.status.trim()),
            ("label", q.label.trim()),
            ("parent", q.parent.trim()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
        let api_query = filters
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .chain(created_after.map(|t| format!("created_after={t}")))
            .collect::<Vec<_>>()
            .join("&");
        let filters_text = filters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(non_empty(&q.age).map(|a| format!("created in the last {a}")))
            .collect::<Vec<_>>()
            .join(", ");
        let first_page = q.cursor.as_deref().and_then(non_empty).is_none();
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
            parent: q.parent.trim().to_owned(),
            age: q.age.trim().to_owned(),
            limit,
            search: search.to_owned(),
            searched: if search.is_empty() {
                String::new()
            } else {
                format!(
                    "{} found among the {scanned} newest runs matching the other filters{} \
                     (a search looks through at most {SEARCH_SCAN} runs at a time: by id, \
                     from its first characters, and by text in the state){}",
                    found.len(),
                    if first_page {
                        ""
                    } else {
                        " after the previous ones"
                    },
                    if page.next.is_some() {
                        "; the next page searches the older ones"
                    } else {
                        ""
                    }
                )
            },
            agents: app.store.agents().await?,
            statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
            counts,
            rows: if search.is_empty() {
                page.runs.iter().map(RunRow::from).collect()
            } else {
                found
            },
            next,
            first_page,
            query,
            api_query,
            filters_text,
            batch_max: BATCH_MAX,
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
