// A state that starts child agents, named by path, joins them all or takes the first.
use durable_agents::agent::ChildOutcome;
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

mod agents {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    pub enum Research {
        #[agent(initial, to(Found))]
        Searching { topic: String },
        #[agent(terminal)]
        Found { summary: String },
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Report {
    #[agent(initial, children(agents::Research), children_outlive, to(Write))]
    Plan { topics: Vec<String> },
    #[agent(route = llm, children(Report), to(Done, Plan))]
    Write { summaries: Vec<String> },
    #[agent(terminal)]
    Done,
}

struct Writer;

impl ReportHandlers for Writer {
    async fn plan(&self, ctx: Ctx<'_, report::Plan>, report::Plan { topics }: report::Plan) -> StepResult<report::Plan> {
        let states = topics.into_iter().map(|topic| agents::Research::Searching { topic });
        let mut summaries = Vec::new();
        for child in ctx.spawn_all::<agents::Research>(states).await? {
            if let ChildOutcome::Completed(agents::Research::Found { summary }) = child.outcome {
                summaries.push(summary);
            }
        }
        Ok(ctx.to(report::Write { summaries }))
    }

    async fn write(
        &self,
        ctx: Ctx<'_, report::Write>,
        route: report::WriteRoute,
        _: report::Write,
    ) -> StepResult<report::Write> {
        Ok(match route {
            report::WriteRoute::Done => ctx.to(report::Done),
            report::WriteRoute::Plan => {
                // An agent may start runs of itself (bounded by `max_child_depth`).
                let sub = ctx.spawn_first::<Report>([Report::Plan { topics: vec![] }]).await?;
                let _ = sub.completed();
                ctx.to(report::Plan { topics: vec![] })
            }
        })
    }
}

fn main() {
    let graph = Report::graph();
    assert_eq!(graph.state("Plan").unwrap().children, ["Research"]);
    assert!(graph.state("Plan").unwrap().children_outlive);
    assert_eq!(graph.state("Write").unwrap().children, ["Report"]);
}
