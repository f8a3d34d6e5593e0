//! The workers page (`GET /ui/workers`): who holds which leases, and the work waiting per
//! agent (runs a worker may claim that none holds, runs waiting by what they wait for).
//!
//! The store keeps no list of workers: a worker is known by the leases it holds, read from
//! the runs that are not final (a bounded scan, newest first, said on the page); the counts
//! per agent and status are exact (the store counts them).

use std::collections::BTreeMap;

use agent_core::store::{RunFilter, RunStatus, now_ms};
use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::{PageError, html};
use crate::Reader;
use crate::inspector::{root_of, view};

/// Runs not final read to find the leases and the waits, newest first.
const SCAN: usize = 2000;
/// Runs named per worker; the rest counted.
const RUNS_NAMED: usize = 10;
/// The statuses of runs that are not final: those that can hold a lease or wait.
const OPEN: [RunStatus; 3] = [
    RunStatus::Running,
    RunStatus::Compensating,
    RunStatus::Waiting,
];

struct WorkerRow {
    owner: String,
    /// `(run id, its lease's expiry, expired)`, the first [`RUNS_NAMED`].
    runs: Vec<(String, String, bool)>,
    held: usize,
    expired: usize,
    /// The soonest and the latest expiry of its leases.
    soonest: String,
    latest: String,
}

struct BacklogRow {
    agent: String,
    runnable: u64,
    /// Of the runnable runs, those a worker holds (as far as the scan read).
    leased: usize,
    unleased: String,
    waiting: u64,
    /// What the waiting runs wait for, with how many (`confirm 3, children:all 1`).
    waits: Vec<(String, usize)>,
}

#[derive(Template)]
#[template(path = "workers.html", config = "inspector/askama.toml")]
struct WorkersPage<'a> {
    root: &'a str,
    title: &'a str,
    workers: &'a [WorkerRow],
    backlog: &'a [BacklogRow],
    scanned: usize,
    /// Whether the scan read every run not final (the lease counts are then exact).
    complete: bool,
    scan: usize,
}

/// `GET /ui/workers`: leases by worker, backlog by agent.
pub(crate) async fn workers(State(app): State<Reader>, uri: Uri) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let now = now_ms();
        let open = app
            .store
            .list_runs(&RunFilter {
                statuses: OPEN.to_vec(),
                limit: Some(SCAN),
                ..RunFilter::default()
            })
            .await?;
        let complete = open.len() < SCAN;
        let mut by_owner: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
        let mut leased: BTreeMap<&str, usize> = BTreeMap::new();
        let mut waits: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
        for run in &open {
            if let (Some(owner), Some(at)) = (&run.lease_owner, run.lease_expires_at) {
                by_owner.entry(owner).or_default().push((&run.id, at));
                if run.status.is_runnable() {
                    *leased.entry(&run.agent).or_default() += 1;
                }
            }
            if run.status == RunStatus::Waiting {
                let what = run
                    .waiting_for
                    .as_ref()
                    .map_or_else(|| "(nothing recorded)".to_owned(), view::waiting_for);
                *waits
                    .entry(&run.agent)
                    .or_default()
                    .entry(what)
                    .or_default() += 1;
            }
        }
        let workers: Vec<WorkerRow> = by_owner
            .into_iter()
            .map(|(owner, mut runs)| {
                runs.sort_by_key(|(_, at)| *at);
                WorkerRow {
                    owner: owner.to_owned(),
                    held: runs.len(),
                    expired: runs.iter().filter(|(_, at)| *at <= now).count(),
                    soonest: runs
                        .first()
                        .map(|(_, at)| view::time(*at))
                        .unwrap_or_default(),
                    latest: runs
                        .last()
                        .map(|(_, at)| view::time(*at))
                        .unwrap_or_default(),
                    runs: runs
                        .iter()
                        .take(RUNS_NAMED)
                        .map(|(id, at)| ((*id).to_owned(), view::time(*at), *at <= now))
                        .collect(),
                }
            })
            .collect();
        let mut backlog = Vec::new();
        // The registered agents, and those of runs started without registering a graph.
        let mut agents: std::collections::BTreeSet<String> =
            app.store.agents().await?.into_iter().collect();
        agents.extend(open.iter().map(|r| r.agent.clone()));
        for agent in agents {
            let counts = app
                .store
                .count_runs(&RunFilter {
                    agent: Some(agent.clone()),
                    statuses: OPEN.to_vec(),
                    ..RunFilter::default()
                })
                .await?;
            let count = |pick: fn(RunStatus) -> bool| -> u64 {
                counts
                    .iter()
                    .filter(|(s, _)| pick(*s))
                    .map(|(_, n)| n)
                    .sum()
            };
            let runnable = count(RunStatus::is_runnable);
            let waiting = count(|s| s == RunStatus::Waiting);
            let held = leased.get(agent.as_str()).copied().unwrap_or(0);
            let free = runnable.saturating_sub(held as u64);
            backlog.push(BacklogRow {
                unleased: if complete {
                    free.to_string()
                } else {
                    format!("at most {free}")
                },
                leased: held,
                runnable,
                waiting,
                waits: waits
                    .remove(agent.as_str())
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                agent,
            });
        }
        Ok::<_, PageError>(
            WorkersPage {
                root: &root,
                title: "Workers",
                workers: &workers,
                backlog: &backlog,
                scanned: open.len(),
                complete,
                scan: SCAN,
            }
            .render()?,
        )
    }
    .await;
    html(result, &uri)
}
