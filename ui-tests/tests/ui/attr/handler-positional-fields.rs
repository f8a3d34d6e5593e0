// A handler written the old way, with the state's fields as parameters instead of the state's struct: E0050 (two fields) and E0053 (one field) at the state, naming the struct.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Review))]
    Start { user: String, card: String },
    #[agent(to(Done))]
    Review { user: String },
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(&self, ctx: Ctx<'_, flow::Start>, user: String, card: String) -> StepResult<flow::Start> {
        let _ = card;
        Ok(ctx.to(flow::Review { user }))
    }

    async fn review(&self, ctx: Ctx<'_, flow::Review>, user: String) -> StepResult<flow::Review> {
        let _ = user;
        Ok(ctx.to(flow::Done))
    }
}

fn main() {}
