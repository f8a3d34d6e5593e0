// A state with exactly one successor still reports an illegal move by name, not as a type mismatch.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Review))]
    Browsing,
    #[agent(to(Done))]
    Review,
    #[agent(terminal)]
    Done,
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
