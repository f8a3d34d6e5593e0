//! Budgets of a run (`Runner::start_with_budget`, `Runner::set_budget`): the spend of each
//! ask and tool call is journaled and carried by each commit, a limit the spend reached
//! refuses the next ask or call, the step fails with the code `budget` and the run takes
//! the state's failure edge; an operator's higher budget lets a failed run go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use durable_agents::router::{Cost, RouterReply, ScriptedRouter};
use durable_agents::runner::RunnerError;
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{Budget, FailureCode, Labels, RunFailure, RunStatus, Spend, Store};
use durable_agents::tool::ToolsFor;
use durable_agents::{Agent, Ctx, Runner, StepResult, ToolResult, tool_fn};
use serde::{Deserialize, Serialize};

/// Looks something up.
#[tool_fn(read)]
pub async fn look_up(
    /// What.
    key: u32,
) -> ToolResult<u32> {
    Ok(key * 2)
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(LookUp)))]
pub enum Thinker {
    /// Goes where `path` says.
    #[agent(initial, to(Think, Plan, Fetch))]
    Begin { path: String, calls: u32 },
    /// Asks the model again and again: each ask spends 150 tokens and 0.01 of cost.
    #[agent(route = llm, to(Think, Done), on_error = Stopped)]
    Think,
    /// The same, without a failure edge: a spent budget fails the run.
    #[agent(route = llm, to(Plan, Done))]
    Plan,
    /// Calls the tool `calls` times.
    #[agent(tools(LookUp), to(Done), on_error = Stopped)]
    Fetch { calls: u32 },
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Stopped(String),
}

#[derive(Clone, Debug)]
pub struct Handlers;

impl ThinkerHandlers for Handlers {
    async fn begin(
        &self,
        ctx: Ctx<'_, thinker::Begin>,
        thinker::Begin { path, calls }: thinker::Begin,
    ) -> StepResult<thinker::Begin> {
        Ok(match path.as_str() {
            "think" => ctx.to(thinker::Think),
            "plan" => ctx.to(thinker::Plan),
            _ => ctx.to(thinker::Fetch { calls }),
        })
    }

    async fn think(
        &self,
        ctx: Ctx<'_, thinker::Think>,
        route: thinker::ThinkRoute,
        _: thinker::Think,
    ) -> StepResult<thinker::Think> {
        Ok(match route {
            thinker::ThinkRoute::Think => ctx.to(thinker::Think),
            thinker::ThinkRoute::Done => ctx.to(thinker::Done),
        })
    }

    async fn plan(
        &self,
        ctx: Ctx<'_, thinker::Plan>,
        route: thinker::PlanRoute,
        _: thinker::Plan,
    ) -> StepResult<thinker::Plan> {
        Ok(match route {
            thinker::PlanRoute::Plan => ctx.to(thinker::Plan),
            thinker::PlanRoute::Done => ctx.to(thinker::Done),
        })
    }

    async fn fetch(
        &self,
        ctx: Ctx<'_, thinker::Fetch>,
        thinker::Fetch { calls }: thinker::Fetch,
    ) -> StepResult<thinker::Fetch> {
        for key in 0..calls {
            ctx.call::<LookUp>(LookUpInput { key }).await?;
        }
        Ok(ctx.to(thinker::Done))
    }
}

/// A model that loops back to the state it was asked in `loops` times, then ends, each
/// answer billed 100 tokens in, 50 out, and priced 0.01.
fn model(loops: u32) -> Arc<ScriptedRouter> {
    let asked = AtomicU32::new(0);
    Arc::new(ScriptedRouter::from_fn(move |request| {
        let n = asked.fetch_add(1, Ordering::SeqCst);
        let to = if n < loops {
            request.state.as_str()
        } else {
            "Done"
        };
        RouterReply {
            input_tokens: Some(100),
            output_tokens: Some(50),
            cost: Some(Cost {
                amount: 0.01,
                currency: "USD".into(),
            }),
            ..ScriptedRouter::choose(to, "{}")
        }
    }))
}

fn begin(path: &str, calls: u32) -> Thinker {
    Thinker::Begin {
        path: path.into(),
        calls,
    }
}

fn runner(store: &Arc<dyn Store>, loops: u32) -> Runner<Thinker, Handlers> {
    Runner::<Thinker, _>::builder(
        Arc::clone(store),
        Handlers,
        ThinkerTools::from_shared(&()).into_tool_box(),
    )
    .router(model(loops))
    .build()
    .unwrap()
}

#[tokio::test]
async fn every_ask_is_counted_and_a_spent_token_budget_takes_the_failure_edge() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 100);
    let budget = Budget {
        tokens: Some(400),
        ..Budget::UNLIMITED
    };
    let started = (runner.start_with_budget("r", begin("think", 0), Labels::new(), budget)).await;
    assert_eq!(started.unwrap().budget, Some(budget));
    let ended = runner.run("r").await.unwrap();
    // Three asks of 150 tokens: the third crossed 400, the fourth was refused.
    assert_eq!(ended.state_name, "Stopped", "{ended:?}");
    assert_eq!(
        ended.spend,
        Spend {
            input_tokens: 300,
            output_tokens: 150,
            cost_micros: 30_000,
            asks: 3,
            tool_calls: 0,
        }
    );
    let why = ended.state.to_string();
    assert!(
        why.contains("the run's budget of 400 tokens is spent (450 used)"),
        "{why}"
    );
    assert_eq!(
        ended.error.as_ref().map(|e| e.code.clone()),
        Some(FailureCode::Budget)
    );
    // What the commits wrote is what the store reads back.
    let stored = store.load_run("r").await.unwrap().unwrap();
    assert_eq!(stored.spend, ended.spend);
}

#[tokio::test]
async fn a_run_without_a_budget_spends_without_limit_and_still_counts() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 5);
    runner.start("free", begin("think", 0)).await.unwrap();
    let ended = runner.run("free").await.unwrap();
    assert_eq!(ended.state_name, "Done");
    assert_eq!(ended.spend.asks, 6);
    assert_eq!(ended.spend.tokens(), 900);
    assert_eq!(ended.spend.cost_micros, 60_000);
    assert_eq!(ended.budget, None);
}

#[tokio::test]
async fn a_tool_call_past_the_budget_is_not_made() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 0);
    let budget = Budget {
        tool_calls: Some(2),
        ..Budget::UNLIMITED
    };
    (runner.start_with_budget("calls", begin("fetch", 3), Labels::new(), budget))
        .await
        .unwrap();
    let ended = runner.run("calls").await.unwrap();
    assert_eq!(ended.state_name, "Stopped", "{ended:?}");
    assert_eq!(ended.spend.tool_calls, 2);
    let journal = store.journal("calls", None).await.unwrap();
    assert_eq!(
        journal.len(),
        2,
        "the third call was journaled: {journal:?}"
    );
}

#[tokio::test]
async fn an_operator_raises_the_budget_of_a_failed_run_and_it_goes_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 3);
    let budget = Budget {
        asks: Some(2),
        ..Budget::UNLIMITED
    };
    (runner.start_with_budget("raise", begin("plan", 0), Labels::new(), budget))
        .await
        .unwrap();
    let failed = runner.run("raise").await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    assert_eq!(failed.spend.asks, 2);
    let raised = Budget {
        asks: Some(10),
        ..Budget::UNLIMITED
    };
    let set = runner.set_budget("raise", Some(raised)).await.unwrap();
    assert_eq!(set.budget, Some(raised));
    assert_eq!(set.spend.asks, 2, "the spend so far is kept");
    store
        .set_status("raise", RunStatus::Running, None::<RunFailure>)
        .await
        .unwrap();
    let ended = runner.run("raise").await.unwrap();
    assert_eq!(ended.state_name, "Done", "{ended:?}");
    assert_eq!(ended.spend.asks, 4);
}

#[tokio::test]
async fn a_budget_of_zero_is_refused_where_it_is_set() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 0);
    let zero = Budget {
        asks: Some(0),
        ..Budget::UNLIMITED
    };
    let started = runner
        .start_with_budget("zero", begin("think", 0), Labels::new(), zero)
        .await;
    assert!(
        matches!(&started, Err(RunnerError::InvalidBudget(_))),
        "{started:?}"
    );
    assert!(store.load_run("zero").await.unwrap().is_none());
    runner.start("some", begin("think", 0)).await.unwrap();
    let set = runner.set_budget("some", Some(zero)).await;
    assert!(
        set.as_ref()
            .is_err_and(|e| e.to_string().contains("can never be met")),
        "{set:?}"
    );
}
