// A handler that leaves out the state (here `Start { n }`, its last parameter) is E0050, pointing at the state it runs.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Done))]
    Start { n: u32 },
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(&self, ctx: Ctx<'_, flow::Start>) -> StepResult<flow::Start> {
        Ok(ctx.to(flow::Done))
    }
}

fn main() {}
