//! The schedules (`GET /ui/schedules`): each with when it ticks, its next ticks, its latest
//! tick and the run that tick started, a link to the runs of all its past ticks, and its
//! actions (pause or resume, run now, delete); and a form for a new one. The actions and
//! the form go through the API with its token, as every action of the inspector does.

use agent_core::schedule::{Schedule, ScheduleSpec};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::{PageError, html};
use crate::Reader;
use crate::inspector::root_of;
use crate::inspector::view;

/// How many of a schedule's next ticks the page lists.
const NEXT_TICKS: usize = 3;

#[derive(Template)]
#[template(path = "schedules.html", config = "inspector/askama.toml")]
struct SchedulesPage<'a> {
    root: &'a str,
    title: &'a str,
    schedules: Vec<ScheduleRow>,
    /// The registered agents, for the new schedule's form.
    agents: Vec<String>,
}

struct ScheduleRow {
    id: String,
    agent: String,
    when: String,
    status: &'static str,
    next_ticks: Vec<String>,
    last_tick: String,
    last_run: String,
    last_error: String,
}

impl From<&Schedule> for ScheduleRow {
    fn from(s: &Schedule) -> Self {
        let when = match &s.spec {
            ScheduleSpec::Cron {
                expression,
                time_zone,
            } => format!("cron `{expression}` in {time_zone}"),
            ScheduleSpec::Interval { every_ms, .. } => format!("every {every_ms} ms"),
        };
        // The next ticks by the spec from the stored next one (jitter aside); none while
        // paused.
        let mut next_ticks = Vec::new();
        if let (Some(first), Ok(ticks), false) = (s.next_tick, s.spec.ticks(), s.paused) {
            let mut next = Some(first);
            while let Some(tick) = next.filter(|_| next_ticks.len() < NEXT_TICKS) {
                next_ticks.push(view::time(tick));
                next = ticks.next_after(tick);
            }
        }
        Self {
            id: s.id.clone(),
            agent: s.agent.clone(),
            when,
            status: if s.paused { "paused" } else { "active" },
            next_ticks,
            last_tick: s.last_tick.map(view::time).unwrap_or_default(),
            last_run: s.last_run_id.clone().unwrap_or_default(),
            last_error: s.last_error.clone().unwrap_or_default(),
        }
    }
}

/// `GET /ui/schedules`: every schedule, by id.
pub(crate) async fn schedules(State(app): State<Reader>, uri: Uri) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let schedules = app.schedules.list_schedules(None).await?;
        let agents = app.store.agents().await?;
        Ok::<_, PageError>(
            SchedulesPage {
                root: &root,
                title: "Schedules",
                schedules: schedules.iter().map(ScheduleRow::from).collect(),
                agents,
            }
            .render()?,
        )
    }
    .await;
    html(result, &uri)
}
