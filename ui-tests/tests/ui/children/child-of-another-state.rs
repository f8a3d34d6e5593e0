// Starting a child agent that another state of the agent declares: one error at the call,
// naming the state's children.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Fact {
    #[agent(initial, to(Checked))]
    Checking { claim: String },
    #[agent(terminal)]
    Checked { holds: bool },
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Report {
    #[agent(initial, to(Check))]
    Plan,
    #[agent(children(Fact), to(Done))]
    Check,
    #[agent(terminal)]
    Done,
}

struct Writer;

impl ReportHandlers for Writer {
    async fn plan(&self, ctx: Ctx<'_, report::Plan>, _: report::Plan) -> StepResult<report::Plan> {
        let claims = vec![Fact::Checking { claim: "x".into() }];
        let _checked = ctx.spawn_all::<Fact>(claims).await?;
        Ok(ctx.to(report::Check))
    }

    async fn check(&self, ctx: Ctx<'_, report::Check>, _: report::Check) -> StepResult<report::Check> {
        Ok(ctx.to(report::Done))
    }
}

fn main() {}
