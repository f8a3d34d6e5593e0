// The argument reaches the handler as its declared type, and as no other.
use durable_agents::{Agent, Ctx, StepResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount_cents: u64,
}

#[derive(Deserialize, JsonSchema)]
pub struct RefundArgs {
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, route = llm, to(Payment(args = PayArgs), Done))]
    Review,
    #[agent(to(Done))]
    Payment { cents: u64 },
    #[agent(terminal)]
    Done,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn review(&self, ctx: Ctx<'_, checkout::Review>, route: checkout::ReviewRoute, _: checkout::Review) -> StepResult<checkout::Review> {
        Ok(match route {
            checkout::ReviewRoute::Payment(RefundArgs { amount_cents }) => ctx.to(checkout::Payment { cents: amount_cents }),
            checkout::ReviewRoute::Done => ctx.to(checkout::Done),
        })
    }

    async fn payment(&self, ctx: Ctx<'_, checkout::Payment>, _: checkout::Payment) -> StepResult<checkout::Payment> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {}
