// Starting a child agent that the state does not list does not compile, and says which child
// agents the state may start.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Research {
    #[agent(initial, to(Found))]
    Searching { topic: String },
    #[agent(terminal)]
    Found { summary: String },
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Fact {
    #[agent(initial, to(Checked))]
    Checking { claim: String },
    #[agent(terminal)]
    Checked { holds: bool },
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Report {
    #[agent(initial, children(Fact), to(Write))]
    Plan { topics: Vec<String> },
    #[agent(to(Done))]
    Write,
    #[agent(terminal)]
    Done,
}

struct Writer;

impl ReportHandlers for Writer {
    async fn plan(&self, ctx: Ctx<'_, report::Plan>, report::Plan { topics }: report::Plan) -> StepResult<report::Plan> {
        let states = topics.into_iter().map(|topic| Research::Searching { topic });
        let _found = ctx.spawn_all::<Research>(states).await?;
        Ok(ctx.to(report::Write))
    }

    async fn write(&self, ctx: Ctx<'_, report::Write>, _: report::Write) -> StepResult<report::Write> {
        let claims = vec![Fact::Checking { claim: "x".into() }];
        let _checked = ctx.spawn_first::<Fact>(claims).await?;
        Ok(ctx.to(report::Done))
    }
}

fn main() {}
