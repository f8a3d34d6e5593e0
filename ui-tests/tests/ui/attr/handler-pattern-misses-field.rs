// Destructuring a state's struct by a field it does not have (a typo) or without one it has is rustc's own pattern error, naming the struct and its fields.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Review))]
    Start { user: String, card: String },
    #[agent(to(Done))]
    Review { user: String, card: String },
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(
        &self,
        ctx: Ctx<'_, flow::Start>,
        flow::Start { usr, card }: flow::Start,
    ) -> StepResult<flow::Start> {
        Ok(ctx.to(flow::Review { user: usr, card }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, flow::Review>,
        flow::Review { user }: flow::Review,
    ) -> StepResult<flow::Review> {
        let _ = user;
        Ok(ctx.to(flow::Done))
    }
}

fn main() {}
