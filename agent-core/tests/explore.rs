//! Path exploration (`runner::explore`): the exploring router covers every edge the model
//! chooses and every tool legal in every routed state, given the samples it needs; what it
//! cannot take is reported with why (no sample, a handler's decision, a signal without a
//! payload, a state it could not reach).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use durable_agents::router::Router;
use durable_agents::runner::{ExploreConfig, Runner, RunnerError, explore};
use durable_agents::store::{RunStatus, Store};
use durable_agents::tool::ToolsFor;
use durable_agents::{Agent, Ctx, Shared, StepResult, ToolResult, Wake, tool_fn};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The tools called, in order.
#[derive(Debug, Default)]
pub struct Log(Mutex<Vec<String>>);

/// Look the customer up (no input).
#[tool_fn(read)]
pub async fn lookup(Shared(log): Shared<Arc<Log>>) -> ToolResult<u32> {
    log.0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push("Lookup".into());
    Ok(3)
}

/// Search the orders.
#[tool_fn(read)]
pub async fn search(
    Shared(log): Shared<Arc<Log>>,
    /// What to look for.
    query: String,
) -> ToolResult<u32> {
    log.0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(format!("Search {query}"));
    Ok(1)
}

/// Pay money back.
#[tool_fn(write)]
pub async fn refund_money(
    Shared(log): Shared<Arc<Log>>,
    /// How much.
    cents: u32,
) -> ToolResult<String> {
    log.0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(format!("RefundMoney {cents}"));
    Ok("refunded".into())
}

/// What the model gives to refund.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct RefundArgs {
    pub cents: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Lookup, Search), write(RefundMoney)))]
pub enum Support {
    #[agent(initial, to(Triage, Close))]
    Start { vip: bool },
    #[agent(route = llm, tools(Lookup, Search), to(Refund(args = RefundArgs), Escalate, Close))]
    Triage,
    #[agent(route = llm, tools(RefundMoney), to(Close, Triage))]
    Refund { cents: u32 },
    #[agent(wait = "approve", to(Close))]
    Escalate,
    #[agent(terminal)]
    Close,
}

#[derive(Clone, Debug)]
pub struct Handlers;

impl SupportHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, support::Start>,
        support::Start { vip }: support::Start,
    ) -> StepResult<support::Start> {
        Ok(if vip {
            ctx.to(support::Triage)
        } else {
            ctx.to(support::Close)
        })
    }

    async fn triage(
        &self,
        ctx: Ctx<'_, support::Triage>,
        route: support::TriageRoute,
        _: support::Triage,
    ) -> StepResult<support::Triage> {
        Ok(match route {
            support::TriageRoute::Refund(RefundArgs { cents }) => ctx.to(support::Refund { cents }),
            support::TriageRoute::Escalate => ctx.to(support::Escalate),
            support::TriageRoute::Close => ctx.to(support::Close),
        })
    }

    async fn refund(
        &self,
        ctx: Ctx<'_, support::Refund>,
        route: support::RefundRoute,
        _: support::Refund,
    ) -> StepResult<support::Refund> {
        Ok(match route {
            support::RefundRoute::Close => ctx.to(support::Close),
            support::RefundRoute::Triage => ctx.to(support::Triage),
        })
    }

    async fn escalate(
        &self,
        ctx: Ctx<'_, support::Escalate>,
        _: Wake,
        _: support::Escalate,
    ) -> StepResult<support::Escalate> {
        Ok(ctx.to(support::Close))
    }
}

/// What the tests hand `explore`: a runner of `Support` over a store with a router.
type Built = Result<Runner<Support, Handlers>, RunnerError>;

fn build(log: &Arc<Log>) -> impl Fn(Arc<dyn Store>, Arc<dyn Router>) -> Built {
    let log = Arc::clone(log);
    move |store, router| {
        Runner::<Support, _>::builder(
            store,
            Handlers,
            SupportTools::from_shared(&log).into_tool_box(),
        )
        .router(router)
        .build()
    }
}

fn samples() -> ExploreConfig {
    ExploreConfig {
        tool_inputs: BTreeMap::from([
            ("Search".to_owned(), json!({ "query": "late parcel" })),
            ("RefundMoney".to_owned(), json!({ "cents": 500 })),
        ]),
        transition_arguments: BTreeMap::from([("Refund".to_owned(), json!({ "cents": 500 }))]),
        signals: BTreeMap::from([("approve".to_owned(), json!({}))]),
        ..ExploreConfig::default()
    }
}

#[tokio::test]
async fn with_samples_every_edge_and_tool_is_covered() {
    let log = Arc::new(Log::default());
    let initial = [Support::Start { vip: true }, Support::Start { vip: false }];
    let found = explore(&initial, &samples(), build(&log)).await.unwrap();
    let c = &found.coverage;
    assert_eq!(
        c.edges_taken().0,
        c.edges_taken().1,
        "{:#?}",
        found.unexplored
    );
    assert_eq!(
        c.tools_called().0,
        c.tools_called().1,
        "{:#?}",
        found.unexplored
    );
    assert!(found.unexplored.is_empty(), "{:#?}", found.unexplored);
    // Each run ended (the loop back to `Triage` did not run forever), and the scripts say
    // what the router chose, state by state.
    assert!(
        found
            .scenarios
            .iter()
            .all(|s| s.status == RunStatus::Completed)
    );
    let chose = |state: &str, option: &str| {
        found
            .scenarios
            .iter()
            .flat_map(|s| &s.choices)
            .any(|c| c.state == state && c.option == option)
    };
    for (state, option) in [
        ("Triage", "Lookup"),
        ("Triage", "Search"),
        ("Triage", "Refund"),
        ("Triage", "Escalate"),
        ("Triage", "Close"),
        ("Refund", "RefundMoney"),
        ("Refund", "Close"),
        ("Refund", "Triage"),
    ] {
        assert!(chose(state, option), "no script chose {option} in {state}");
    }
    let called = log.0.lock().unwrap().clone();
    assert!(
        called.contains(&"Search late parcel".to_owned()),
        "{called:?}"
    );
    assert!(called.contains(&"RefundMoney 500".to_owned()), "{called:?}");
    // A bounded number of runs: a round of the initial states that finds nothing new ends
    // the exploration.
    assert!(found.scenarios.len() < 16, "{} runs", found.scenarios.len());
}

#[tokio::test]
async fn without_samples_what_is_not_taken_is_said_why() {
    let log = Arc::new(Log::default());
    let found = explore(
        &[Support::Start { vip: true }],
        &ExploreConfig::default(),
        build(&log),
    )
    .await
    .unwrap();
    let why = |state: &str, option: &str| {
        let hit = (found.unexplored.iter()).find(|u| u.state == state && u.option == option);
        let Some(u) = hit else {
            let all = &found.unexplored;
            panic!("{state} -> {option} is not reported: {all:#?}");
        };
        u.why.clone()
    };
    assert!(why("Triage", "Search").contains("no sample input"));
    assert!(why("Triage", "Refund").contains("no sample argument"));
    assert!(why("Start", "Close").contains("handler"));
    assert!(why("Escalate", "Close").contains("signal `approve`"));
    assert!(why("Refund", "RefundMoney").contains("not reached"));
    let report = found.to_string();
    assert!(
        report.starts_with("Support: ") && report.contains("Triage -> Search: no sample input"),
        "{report}"
    );
    // What needs no sample was taken.
    for (state, option) in [("Triage", "Escalate"), ("Triage", "Close")] {
        assert!(
            found
                .unexplored
                .iter()
                .all(|u| (u.state.as_str(), u.option.as_str()) != (state, option)),
            "{state} -> {option}: {:#?}",
            found.unexplored
        );
    }
    assert!(
        found
            .coverage
            .tools
            .iter()
            .any(|t| t.state == "Triage" && t.tool == "Lookup" && t.calls > 0)
    );
}
