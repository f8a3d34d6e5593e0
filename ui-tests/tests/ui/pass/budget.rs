// The budget grammar: a budget for each run on the enum, one per visit on a state (any subset
// of the limits, `cost` a decimal or a whole amount), and `on_budget` as an edge the handler
// may also take.
use durable_agents::{Agent, Ctx, Failure, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(budget(tokens = 100_000, cost = 2, asks = 40, tool_calls = 80))]
pub enum Research {
    #[agent(initial, to(Write), on_budget = OverBudget, budget(cost = 0.50))]
    Search,
    #[agent(to(Done), on_error = Failed, on_budget = Failed, budget(asks = 3, tokens = 20_000, tool_calls = 1, cost = 0.000001))]
    Write,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    OverBudget(Failure),
    #[agent(terminal)]
    Failed { reason: String },
}

struct H;

impl ResearchHandlers for H {
    async fn search(&self, ctx: Ctx<'_, research::Search>, _: research::Search) -> StepResult<research::Search> {
        Ok(ctx.to(research::Write))
    }
    async fn write(&self, ctx: Ctx<'_, research::Write>, _: research::Write) -> StepResult<research::Write> {
        Ok(ctx.to(research::Failed { reason: "given up".to_owned() }))
    }
}

fn main() {
    let _ = H;
    let graph = Research::graph();
    assert_eq!(graph.budget.and_then(|b| b.cost_micros), Some(2_000_000));
    assert_eq!(graph.state("Search").and_then(|s| s.budget).and_then(|b| b.cost_micros), Some(500_000));
    assert!(graph.has_edge("Search", "OverBudget"));
}
