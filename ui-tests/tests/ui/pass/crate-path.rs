// `crate = path` names agent-core through a re-export, as a facade crate would.
mod facade {
    pub use durable_agents as core_of_agents;
}

use facade::core_of_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(crate = crate::facade::core_of_agents)]
enum Flow {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(&self, ctx: Ctx<'_, flow::Start>, _: flow::Start) -> StepResult<flow::Start> {
        Ok(ctx.to(flow::Done))
    }
}

fn main() {
    assert_eq!(Flow::graph().agent, "Flow");
}
