// Calling a tool that only another agent declares: one error at the call, saying the tool is
// not declared on this agent and how to declare it.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};
use ui_tests::{ChargePayment, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(write(ChargePayment)))]
enum Billing {
    #[agent(initial, tools(ChargePayment), to(Paid))]
    Charging,
    #[agent(terminal)]
    Paid,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts)))]
enum Browse {
    #[agent(initial, tools(SearchProducts), to(Done))]
    Searching,
    #[agent(terminal)]
    Done,
}

struct Shop;

impl BrowseHandlers for Shop {
    async fn searching(&self, ctx: Ctx<'_, browse::Searching>, _: browse::Searching) -> StepResult<browse::Searching> {
        ctx.call::<ChargePayment>(Default::default()).await?;
        Ok(ctx.to(browse::Done))
    }
}

fn main() {
    let _ = Billing::Charging;
}
