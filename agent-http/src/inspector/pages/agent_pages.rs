//! The agents' pages: the registered agents (`GET /ui/agents`), and one agent's graph.

use agent_core::graph::{GraphDescription, Routing, StateDescription, TimerDescription};
use agent_core::store::{DAY_MS, RunFilter, format_cost, now_ms};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::{PageError, html};
use crate::Reader;
use crate::extract::Path;
use crate::inspector::graph::{self, Overlay};
use crate::inspector::root_of;
use crate::inspector::view::{self, DataShape};

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

/// An initial state in the start form: its name and how its data is entered.
struct StartState {
    name: String,
    /// `unit` (the state is its name), `fields` (the controls below, one per field) or
    /// `json` (the variant's data typed as JSON).
    shape: &'static str,
    /// The data as written in the source (`(u32)`), shown beside a JSON box.
    data: String,
    fields: Vec<view::FormField>,
}

/// The initial states of `g`, each with the controls of its fields (from the data's types,
/// through the signal form's builder, [`view::form_fields`]).
fn start_states(g: &GraphDescription) -> Vec<StartState> {
    g.states
        .iter()
        .filter(|s| s.initial)
        .map(|s| {
            let (shape, fields) = match view::data_shape(&s.data) {
                DataShape::Unit => ("unit", Vec::new()),
                DataShape::Json => ("json", Vec::new()),
                DataShape::Fields(schema) => {
                    ("fields", view::form_fields(&schema).unwrap_or_default())
                }
            };
            StartState {
                name: s.name.clone(),
                shape,
                data: s.data.clone(),
                fields,
            }
        })
        .collect()
}

/// The days shown in an agent page's spend, today included.
const SPEND_DAYS: i64 = 14;

/// A day of an agent's spend, as its page shows it.
struct SpendDay {
    day: String,
    runs: u64,
    asks: u64,
    tokens: u64,
    cost: String,
    tool_calls: u64,
}

/// What the runs of `agent` created in the last [`SPEND_DAYS`] days spent, per day, the
/// newest first, and the most tokens of a day (the bars' scale).
async fn spend_days(app: &Reader, agent: &str) -> Result<(Vec<SpendDay>, u64), PageError> {
    let today = now_ms().div_euclid(DAY_MS) * DAY_MS;
    let days = (app.store)
        .spend_by_day(&RunFilter {
            agent: Some(agent.to_owned()),
            created_after: Some(today - (SPEND_DAYS - 1) * DAY_MS),
            ..RunFilter::default()
        })
        .await?;
    let most = days.iter().map(|d| d.spend.tokens()).max().unwrap_or(0);
    let rows = (days.iter().rev())
        .map(|d| SpendDay {
            day: view::time(d.day).chars().take(10).collect(),
            runs: d.runs,
            asks: d.spend.asks,
            tokens: d.spend.tokens(),
            cost: format_cost(d.spend.cost_micros),
            tool_calls: d.spend.tool_calls,
        })
        .collect();
    Ok((rows, most))
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
    /// The start form's states; empty when this server cannot start runs of the agent.
    starts: &'a [StartState],
    /// Whether this server starts runs of the agent (`ApiConfig::with_agent`).
    can_start: bool,
    /// What its runs spent per day, the newest first.
    spend: &'a [SpendDay],
    /// The most tokens of one of those days.
    most_tokens: u64,
    spend_days: i64,
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
                    wait: wait_text(s),
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
        let can_start = app.startable.contains(&name);
        let starts = if can_start {
            start_states(&g)
        } else {
            Vec::new()
        };
        let (spend, most_tokens) = spend_days(&app, &name).await?;
        let svg = graph::svg(&g, &Overlay::default());
        let title = format!("Agent {name}");
        Ok(AgentPage {
            root: &root,
            title: &title,
            name: &name,
            graph: &svg,
            states: &states,
            tools: &tools,
            starts: &starts,
            can_start,
            spend: &spend,
            most_tokens,
            spend_days: SPEND_DAYS,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}

/// The state's wait as the agent page shows it: its signal (with its timeout), its timer
/// (`timer 3 d`, `timer at remind_at`), or both.
fn wait_text(s: &StateDescription) -> String {
    let signal = s.wait.as_ref().map(|w| match w.timeout_ms {
        Some(t) => format!("{} (timeout {t} ms)", w.signal),
        None => w.signal.clone(),
    });
    let timer = s.timer.as_ref().map(TimerDescription::label);
    signal
        .into_iter()
        .chain(timer)
        .collect::<Vec<_>>()
        .join(", ")
}
