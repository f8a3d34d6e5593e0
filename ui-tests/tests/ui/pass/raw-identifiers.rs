// `r#Match` and `Match` are one name to Rust, and so to the derive: a state and a tool written raw are found when named plain, and the other way round.
use durable_agents::{Agent, Ctx, Execute, StepResult, Tool, ToolContext, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Tool)]
#[tool(kind = read, input = String, output = usize)]
pub struct r#Search;

impl Execute for Search {
    async fn execute(&self, input: String, _cx: &ToolContext) -> Result<usize, ToolError> {
        Ok(input.len())
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(Search)))]
enum Flow {
    #[agent(initial, tools(r#Search), to(Match))]
    Start,
    #[agent(to(r#Done))]
    r#Match,
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(&self, ctx: Ctx<'_, flow::Start>, _: flow::Start) -> StepResult<flow::Start> {
        let _ = ctx.call::<Search>("socks".to_owned()).await?;
        Ok(ctx.to(flow::r#Match))
    }

    async fn r#match(&self, ctx: Ctx<'_, flow::Match>, _: flow::r#Match) -> StepResult<flow::Match> {
        Ok(ctx.to(flow::Done))
    }
}

fn main() {
    let _ = H;
    assert_eq!(Search::NAME, "Search");
    assert_eq!(Flow::graph().states[1].name, "Match");
    assert_eq!(Flow::graph().states[0].to, ["Match"]);
}
