//! Item 8: replay regression. Each fixture under `fixtures/replay/` (journals of real runs
//! of the fixture agent, see `src/bin/gen-replay-fixtures.rs`) is loaded into a fresh
//! store (each test once per backend: `MemoryStore`, PostgreSQL, SQLite; a fresh schema or
//! file per replay) through the public `Store` API and driven by the current build with
//! tools and a router that fail the test when called: the journal must serve every call
//! and the run must reach the same states, statuses and versions. A graph changed
//! incompatibly must be refused with a typed error, never diverge silently.

use std::sync::Arc;

use agent_conformance::fixture::{Behaviour, Charge, Lookup, Order, Release, Reserve, World};
use agent_core::router::Router;
use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::{RunRecord, RunStatus, Store};
use agent_core::{Agent, Ctx, Handle, RoutedByLlm, StepError, StepResult, Wake};
use battery::backends::{Backend, Fresh};
use battery::order::{self, advance};
use battery::replay::{Capture, load, load_all};
use battery::{CallLog, ForbiddenRouter, forbid, forbidden_router, probe_all};
use serde::{Deserialize, Serialize};

fn config() -> RunnerConfig {
    order::config("replayer", std::time::Duration::from_secs(5))
}

/// A runner of `A` whose tools and router fail the test when called.
fn sealed<A, H>(
    store: &Arc<dyn Store>,
    handlers: H,
) -> (Runner<A, H>, Arc<CallLog>, Arc<ForbiddenRouter>)
where
    A: Agent + Handle<H> + RoutedByLlm,
    H: Send + Sync + 'static,
{
    let log = CallLog::new();
    let router = forbidden_router();
    let world = Arc::new(World::default());
    let runner = Runner::<A, H>::builder(
        Arc::clone(store),
        handlers,
        probe_all(&order::tools(&world), &log, &forbid()),
    )
    .router(Arc::clone(&router) as Arc<dyn Router>)
    .config(config())
    .build()
    .expect("tool box matches");
    (runner, log, router)
}

fn sealed_calls(log: &CallLog, router: &ForbiddenRouter) -> Result<(), String> {
    let calls = log.calls();
    let asked = router.asked();
    if calls.is_empty() && asked.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the journal did not serve every call: tools {:?}, router asked in {:?}",
        calls
            .iter()
            .map(|c| format!("{}@v{}", c.tool, c.version))
            .collect::<Vec<_>>(),
        asked.iter().map(|r| r.state.clone()).collect::<Vec<_>>()
    ))
}

fn same(expected: &battery::replay::Version, got: &RunRecord) -> Result<(), String> {
    let ok = got.version == expected.version
        && got.state_name == expected.state_name
        && got.state == expected.state
        && got.status == expected.status
        && got.error == expected.error;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected v{} `{}` {} {:?} {}, got v{} `{}` {} {:?} {}",
            expected.version,
            expected.state_name,
            expected.status,
            expected.error,
            expected.state,
            got.version,
            got.state_name,
            got.status,
            got.error,
            got.state
        ))
    }
}

/// Replay one step: the store as it stood at version `at`, one step by the current build.
async fn replay_step(backend: Backend, capture: &Capture, at: u64) -> Result<(), String> {
    let fresh = Fresh::open(backend).await.ok_or("no store")?;
    let store = &fresh.store;
    let result = async {
        load(store, capture, at, false).await?;
        let (runner, log, router) = sealed::<Order, _>(store, Behaviour);
        let got = advance(&runner, &capture.run_id, 1).await?;
        sealed_calls(&log, &router)?;
        same(
            &capture.versions[usize::try_from(at).unwrap_or(usize::MAX) + 1],
            &got,
        )
    }
    .await;
    fresh.finish().await;
    result
}

/// Every step of every fixture, each from a store loaded at the version before it.
async fn every_step_replays_from_the_journal(backend: Backend) {
    if !Fresh::available(backend).await {
        return;
    }
    let fixtures = load_all();
    assert!(fixtures.len() >= 5, "fixtures are committed");
    let mut failures = Vec::new();
    let mut steps = 0;
    for (file, capture) in &fixtures {
        for w in capture.versions.windows(2) {
            steps += 1;
            if let Err(e) = replay_step(backend, capture, w[0].version).await {
                failures.push(format!("{file} step from v{}: {e}", w[0].version));
            }
        }
    }
    eprintln!(
        "FIGURE item8 per-step replay: backend={backend:?} fixtures={} steps={steps} failures={}",
        fixtures.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

battery::on_every_backend!(
    every_step_replays_from_the_journal,
    whole_runs_replay_from_the_journal,
    renamed_state_and_changed_field_are_quarantined,
    removed_edge_is_refused_before_any_effect,
);

/// Every fixture as a whole: version 0 and the whole journal loaded, then driven to its
/// end; every committed version must match.
async fn whole_runs_replay_from_the_journal(backend: Backend) {
    if !Fresh::available(backend).await {
        return;
    }
    let mut failures = Vec::new();
    for (file, capture) in load_all() {
        let fresh = Fresh::open(backend).await.expect("a store");
        let store = &fresh.store;
        load(store, &capture, 0, true).await.unwrap();
        let (runner, log, router) = sealed::<Order, _>(store, Behaviour);
        let result = async {
            let last = advance(&runner, &capture.run_id, 1_000).await?;
            sealed_calls(&log, &router)?;
            let history = store
                .history(&capture.run_id)
                .await
                .map_err(|e| e.to_string())?;
            if history.len() != capture.versions.len() {
                return Err(format!(
                    "{} versions, expected {}",
                    history.len(),
                    capture.versions.len()
                ));
            }
            for (t, v) in history.iter().zip(&capture.versions) {
                let state = store
                    .state_at(&capture.run_id, t.version)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("state missing")?;
                if t.to_state != v.state_name
                    || t.status != v.status
                    || t.kind != v.kind
                    || state.state != v.state
                {
                    return Err(format!("v{} differs: {t:?} vs {v:?}", t.version));
                }
            }
            same(capture.versions.last().expect("versions"), &last)
        }
        .await;
        fresh.finish().await;
        if let Err(e) = result {
            failures.push(format!("{file}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The fixture agent with `Decide` renamed `Review` and `Pay.cents` now a string.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    name = "Order",
    tools(read(Lookup), write(Charge, Release), hybrid(Reserve(compensate = Release)))
)]
pub(crate) enum Renamed {
    #[agent(initial, tools(Lookup, Reserve), to(Review))]
    Start { items: Vec<String> },
    #[agent(route = llm, tools(Lookup), to(Pay, Cancelled))]
    Review {
        items: Vec<String>,
        reservations: Vec<String>,
    },
    #[agent(tools(Charge), to(Confirm), on_error = Failed)]
    Pay { cents: String },
    #[agent(wait = "confirm", to(Done, Failed))]
    Confirm { payment_id: String },
    #[agent(terminal)]
    Done { payment_id: String },
    #[agent(terminal, compensate)]
    Cancelled,
    #[agent(terminal, compensate)]
    Failed { reason: String },
}

/// The fixture agent with the edge `Decide -> Pay` removed (`Pay` stays reachable from
/// `Start`).
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    name = "Order",
    tools(read(Lookup), write(Charge, Release), hybrid(Reserve(compensate = Release)))
)]
pub(crate) enum Narrowed {
    #[agent(initial, tools(Lookup, Reserve), to(Decide, Pay))]
    Start { items: Vec<String> },
    #[agent(route = llm, tools(Lookup), to(Cancelled))]
    Decide {
        items: Vec<String>,
        reservations: Vec<String>,
    },
    #[agent(tools(Charge), to(Confirm), on_error = Failed)]
    Pay { cents: u64 },
    #[agent(wait = "confirm", to(Done, Failed))]
    Confirm { payment_id: String },
    #[agent(terminal)]
    Done { payment_id: String },
    #[agent(terminal, compensate)]
    Cancelled,
    #[agent(terminal, compensate)]
    Failed { reason: String },
}

/// Handlers of the changed agents: they must never be reached for an old run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unreached;

fn unreached() -> StepError {
    StepError::handler("a handler of the changed graph ran for a run of the old graph")
}

impl RenamedHandlers for Unreached {
    async fn start(
        &self,
        _: Ctx<'_, renamed::Start>,
        _: renamed::Start,
    ) -> StepResult<renamed::Start> {
        Err(unreached())
    }
    async fn review(
        &self,
        _: Ctx<'_, renamed::Review>,
        _: renamed::ReviewRoute,
        _: renamed::Review,
    ) -> StepResult<renamed::Review> {
        Err(unreached())
    }
    async fn pay(&self, _: Ctx<'_, renamed::Pay>, _: renamed::Pay) -> StepResult<renamed::Pay> {
        Err(unreached())
    }
    async fn confirm(
        &self,
        _: Ctx<'_, renamed::Confirm>,
        _: Wake,
        _: renamed::Confirm,
    ) -> StepResult<renamed::Confirm> {
        Err(unreached())
    }
}

impl NarrowedHandlers for Unreached {
    async fn start(
        &self,
        _: Ctx<'_, narrowed::Start>,
        _: narrowed::Start,
    ) -> StepResult<narrowed::Start> {
        Err(unreached())
    }
    async fn decide(
        &self,
        ctx: Ctx<'_, narrowed::Decide>,
        route: narrowed::DecideRoute,
        _: narrowed::Decide,
    ) -> StepResult<narrowed::Decide> {
        Ok(match route {
            narrowed::DecideRoute::Cancelled => ctx.to(narrowed::Cancelled),
        })
    }
    async fn pay(&self, _: Ctx<'_, narrowed::Pay>, _: narrowed::Pay) -> StepResult<narrowed::Pay> {
        Err(unreached())
    }
    async fn confirm(
        &self,
        _: Ctx<'_, narrowed::Confirm>,
        _: Wake,
        _: narrowed::Confirm,
    ) -> StepResult<narrowed::Confirm> {
        Err(unreached())
    }
}

/// Replay `capture` at the first version in `state` with agent `A`: the outcome and the
/// sealed calls.
async fn replay_changed<A>(
    backend: Backend,
    capture: &Capture,
    state: &str,
) -> Option<Result<RunRecord, String>>
where
    A: Agent + Handle<Unreached> + RoutedByLlm,
{
    let at = capture
        .versions
        .iter()
        .find(|v| v.state_name == state)?
        .version;
    let fresh = Fresh::open(backend).await?;
    let store = &fresh.store;
    let outcome = async {
        load(store, capture, at, false).await?;
        let (runner, log, router) = sealed::<A, Unreached>(store, Unreached);
        // Several steps: a refusal is final at once; a divergence shows its effects.
        let got = advance(&runner, &capture.run_id, 10).await?;
        sealed_calls(&log, &router)?;
        Ok(got)
    }
    .await;
    fresh.finish().await;
    Some(outcome)
}

fn expect_quarantine(got: Result<RunRecord, String>, code: &str) -> Result<(), String> {
    let r = got?;
    if r.status == RunStatus::Quarantined && r.error.as_ref().is_some_and(|e| e.code == code) {
        Ok(())
    } else {
        Err(format!(
            "expected quarantined with `{code}`, got {} in `{}` with {:?}",
            r.status, r.state_name, r.error
        ))
    }
}

/// A removed state and a changed field type: quarantined with `graph.incompatible` and
/// `state.corrupt`, before any tool call or question.
async fn renamed_state_and_changed_field_are_quarantined(backend: Backend) {
    if !Fresh::available(backend).await {
        return;
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for (file, capture) in load_all() {
        for (state, code) in [("Decide", "graph.incompatible"), ("Pay", "state.corrupt")] {
            if let Some(got) = replay_changed::<Renamed>(backend, &capture, state).await {
                checked += 1;
                if let Err(e) = expect_quarantine(got, code) {
                    failures.push(format!("{file} at `{state}`: {e}"));
                }
            }
        }
    }
    assert!(checked >= 8, "only {checked} cases");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// An edge removed under a run whose journal chose it: the run must be refused with a
/// typed error before anything runs, not fail and compensate under the new graph.
async fn removed_edge_is_refused_before_any_effect(backend: Backend) {
    if !Fresh::available(backend).await {
        return;
    }
    let mut failures = Vec::new();
    for (file, capture) in load_all() {
        let chose_pay = capture
            .versions
            .windows(2)
            .any(|w| w[0].state_name == "Decide" && w[1].state_name == "Pay");
        if !chose_pay {
            continue;
        }
        let Some(got) = replay_changed::<Narrowed>(backend, &capture, "Decide").await else {
            continue;
        };
        let outcome = got.and_then(|r| {
            if r.status == RunStatus::Quarantined && r.error.is_some() {
                Ok(())
            } else {
                Err(format!(
                    "ended {} in `{}` with {:?}",
                    r.status, r.state_name, r.error
                ))
            }
        });
        if let Err(e) = outcome {
            failures.push(format!("{file}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
