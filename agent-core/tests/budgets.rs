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
    #[agent(initial, to(Think, Plan, Fetch, Gather))]
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
    /// Calls the tool `calls` times within a budget of two calls per visit; spending it
    /// escalates.
    #[agent(
        tools(LookUp),
        to(Done),
        on_error = Stopped,
        on_budget = Escalated,
        budget(tool_calls = 2)
    )]
    Gather { calls: u32 },
    #[agent(terminal)]
    Escalated(String),
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
            "gather" => ctx.to(thinker::Gather { calls }),
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

    async fn gather(
        &self,
        ctx: Ctx<'_, thinker::Gather>,
        thinker::Gather { calls }: thinker::Gather,
    ) -> StepResult<thinker::Gather> {
        for key in 0..calls {
            // A handler that swallows the refusal still ends in the budget's edge.
            let _ = ctx.call::<LookUp>(LookUpInput { key }).await;
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

#[tokio::test]
async fn a_states_budget_per_visit_takes_its_on_budget_edge() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, 0);
    runner.start("within", begin("gather", 2)).await.unwrap();
    let within = runner.run("within").await.unwrap();
    assert_eq!(within.state_name, "Done", "{within:?}");
    assert_eq!(within.spend.tool_calls, 2);

    runner.start("past", begin("gather", 3)).await.unwrap();
    let past = runner.run("past").await.unwrap();
    assert_eq!(past.state_name, "Escalated", "{past:?}");
    let why = past.state.to_string();
    assert!(
        why.contains("state `Gather`'s budget per visit of 2 tool calls is spent"),
        "{why}"
    );
    assert_eq!(past.spend.tool_calls, 2, "the refused call was made");
    let history = store.history("past").await.unwrap();
    assert_eq!(
        history.last().map(|t| t.to_state.as_str()),
        Some("Escalated"),
        "{history:?}"
    );
}

/// An agent whose enum sets each run's budget.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(budget(asks = 1, cost = 0.5))]
pub enum Capped {
    #[agent(initial, route = llm, to(Start, Done), on_budget = Over)]
    Start,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Over(String),
}

#[derive(Clone, Debug)]
pub struct CappedRuns;

impl CappedHandlers for CappedRuns {
    async fn start(
        &self,
        ctx: Ctx<'_, capped::Start>,
        route: capped::StartRoute,
        _: capped::Start,
    ) -> StepResult<capped::Start> {
        Ok(match route {
            capped::StartRoute::Start => ctx.to(capped::Start),
            capped::StartRoute::Done => ctx.to(capped::Done),
        })
    }
}

#[tokio::test]
async fn the_agents_budget_bounds_every_run_unless_its_start_sets_one() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Capped, _>::builder(
        Arc::clone(&store),
        CappedRuns,
        durable_agents::ToolBox::new(),
    )
    .router(model(100))
    .build()
    .unwrap();
    let started = runner.start("capped", Capped::Start).await.unwrap();
    let declared = Budget {
        asks: Some(1),
        cost_micros: Some(500_000),
        ..Budget::UNLIMITED
    };
    assert_eq!(started.budget, Some(declared));
    let ended = runner.run("capped").await.unwrap();
    assert_eq!(ended.state_name, "Over", "{ended:?}");
    assert_eq!(ended.spend.asks, 1);

    let more = Budget {
        asks: Some(3),
        ..Budget::UNLIMITED
    };
    (runner.start_with_budget("more", Capped::Start, Labels::new(), more))
        .await
        .unwrap();
    let ended = runner.run("more").await.unwrap();
    assert_eq!(ended.state_name, "Over", "{ended:?}");
    assert_eq!(
        ended.spend.asks, 3,
        "the start's budget replaces the agent's"
    );
}
