//! The derive's budget grammar: `budget(...)` on the enum is each run's budget, on a variant
//! what one visit may spend (`cost` exact in millionths), and `on_budget = T` is an edge of the
//! graph whose target `__on_budget` builds from the failure, as `on_error`'s is.

use durable_agents::store::FailureCode;
use durable_agents::{Agent, Failure};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Agent)]
#[agent(
    max_steps = 50,
    budget(tokens = 100_000, cost = 2, asks = 40, tool_calls = 80)
)]
pub enum Research {
    #[agent(initial, to(Search), budget(cost = 0.000001))]
    Plan,
    #[agent(to(Write), on_error = Failed, on_budget = OverBudget, budget(tokens = 20_000, cost = 0.50, asks = 3))]
    Search,
    #[agent(to(Done), on_budget = Failed)]
    Write,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    OverBudget { reason: Failure },
    #[agent(terminal)]
    Failed(String),
}

fn budget_failure(state: &str) -> Failure {
    Failure {
        state: state.to_owned(),
        code: FailureCode::Budget,
        message: "budget exceeded: 3 model asks".to_owned(),
    }
}

#[test]
fn the_graph_holds_each_budget_and_the_on_budget_edges() {
    let graph = Research::graph();
    let run = graph.budget.expect("the enum's budget");
    assert_eq!(
        (run.tokens, run.cost_micros, run.asks, run.tool_calls),
        (Some(100_000), Some(2_000_000), Some(40), Some(80))
    );
    assert_eq!(graph.max_steps, Some(50));

    let state = |name: &str| graph.state(name).expect("a declared state");
    let plan = state("Plan").budget.expect("Plan's budget");
    assert_eq!(
        (plan.tokens, plan.cost_micros, plan.asks, plan.tool_calls),
        (None, Some(1), None, None)
    );
    let search = state("Search").budget.expect("Search's budget");
    assert_eq!(
        (
            search.tokens,
            search.cost_micros,
            search.asks,
            search.tool_calls
        ),
        (Some(20_000), Some(500_000), Some(3), None)
    );
    assert_eq!(state("Write").budget, None);

    assert_eq!(state("Search").on_budget.as_deref(), Some("OverBudget"));
    assert_eq!(state("Search").on_error.as_deref(), Some("Failed"));
    assert_eq!(state("Write").on_budget.as_deref(), Some("Failed"));
    assert_eq!(state("Plan").on_budget, None);
    assert!(graph.has_edge("Search", "OverBudget"));
    assert!(graph.has_edge("Write", "Failed"));
    assert!(
        graph
            .edges()
            .any(|e| (e.from, e.to, e.error) == ("Search", "OverBudget", true))
    );
}

#[test]
fn on_budget_builds_its_target_from_the_failure() {
    assert_eq!(
        Research::__on_budget("Search", budget_failure("Search")),
        Some(Research::OverBudget {
            reason: budget_failure("Search")
        })
    );
    assert_eq!(
        Research::__on_budget("Write", budget_failure("Write")),
        Some(Research::Failed("budget exceeded: 3 model asks".to_owned()))
    );
    assert_eq!(Research::__on_budget("Plan", budget_failure("Plan")), None);
    // `on_error` keeps its own target.
    assert_eq!(
        Research::__on_error("Search", budget_failure("Search")),
        Some(Research::Failed("budget exceeded: 3 model asks".to_owned()))
    );
}
