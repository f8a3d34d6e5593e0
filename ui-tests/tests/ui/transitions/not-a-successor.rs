// Moving to a state that is not a declared successor does not compile, and lists the legal targets.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review, Failed))]
    Browsing,
    #[agent(to(Done, Failed))]
    Review,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Failed,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, _: checkout::Browsing) -> StepResult<checkout::Browsing> {
        Ok(ctx.to(checkout::Done))
    }

    async fn review(&self, ctx: Ctx<'_, checkout::Review>, _: checkout::Review) -> StepResult<checkout::Review> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {}
