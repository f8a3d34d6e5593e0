// Calling a tool in a state that does not list it does not compile, and says which tools are legal there.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, GetCart, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts, GetCart), write(ChargePayment)))]
enum Checkout {
    #[agent(initial, tools(SearchProducts, GetCart), to(Payment))]
    Browsing,
    #[agent(tools(ChargePayment), to(Done))]
    Payment,
    #[agent(terminal)]
    Done,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, _: checkout::Browsing) -> StepResult<checkout::Browsing> {
        ctx.call::<ChargePayment>(Default::default()).await?;
        Ok(ctx.to(checkout::Payment))
    }

    async fn payment(&self, ctx: Ctx<'_, checkout::Payment>, _: checkout::Payment) -> StepResult<checkout::Payment> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {}
