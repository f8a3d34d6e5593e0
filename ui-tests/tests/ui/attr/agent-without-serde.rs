// An agent enum without the serde derives is reported at its name, once per missing derive, and nowhere else: not at the generated impls, not in the handlers.
use durable_agents::{Agent, Ctx, StepResult};

#[derive(Agent, Clone)]
enum Flow {
    #[agent(initial, to(Done))]
    Start { n: u32 },
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(&self, ctx: Ctx<'_, flow::Start>, flow::Start { n }: flow::Start) -> StepResult<flow::Start> {
        let _ = n;
        Ok(ctx.to(flow::Done))
    }
}

fn name<A: Agent>() -> &'static str {
    A::NAME
}

fn main() {
    let _ = (H, name::<Flow>());
}
