// Independent mistakes are all reported at once, and the user's handler code sees no follow-on errors.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, ReserveInventory, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts), write(ChargePayment), hybrid(ReserveInventory)))]
enum Checkout {
    #[agent(initial, tools(SearchProducts, GetCart), to(Review))]
    Browsing,
    #[agent(to(Payment), colour = "red")]
    Review,
    #[agent(tools(ChargePayment), to(Done, Failed))]
    Payment,
    #[agent(terminal)]
    Done,
    #[agent(terminal, to(Review))]
    Failed,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, _: checkout::Browsing) -> StepResult<checkout::Browsing> {
        Ok(ctx.to(checkout::Review))
    }
    async fn review(&self, ctx: Ctx<'_, checkout::Review>, _: checkout::Review) -> StepResult<checkout::Review> {
        Ok(ctx.to(checkout::Payment))
    }
    async fn payment(&self, ctx: Ctx<'_, checkout::Payment>, _: checkout::Payment) -> StepResult<checkout::Payment> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {}
