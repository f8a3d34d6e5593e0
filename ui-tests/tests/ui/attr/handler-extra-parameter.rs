// A handler with a parameter the state does not give (a routed state's `route` on a state that is not routed) is E0050, pointing at the state.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(Review))]
    Start,
    #[agent(route = llm, to(Done, Start))]
    Review { cart: Vec<String> },
    #[agent(terminal)]
    Done,
}

struct H;

impl FlowHandlers for H {
    async fn start(
        &self,
        ctx: Ctx<'_, flow::Start>,
        route: flow::ReviewRoute,
        _: flow::Start,
    ) -> StepResult<flow::Start> {
        let _ = route;
        Ok(ctx.to(flow::Review { cart: Vec::new() }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, flow::Review>,
        route: flow::ReviewRoute,
        flow::Review { cart }: flow::Review,
    ) -> StepResult<flow::Review> {
        let _ = cart;
        Ok(match route {
            flow::ReviewRoute::Done => ctx.to(flow::Done),
            flow::ReviewRoute::Start => ctx.to(flow::Start),
        })
    }
}

fn main() {}
