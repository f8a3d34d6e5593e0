// The checkout agent of DESIGN.md: every kind of state, legal tool calls and transitions.
use durable_agents::{Agent, Ctx, StepResult, Wake};
use serde::{Deserialize, Serialize};
use ui_tests::{Cart, ChargePayment, GetCart, Order, ReleaseInventory, ReserveInventory, SearchProducts};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(
    read(SearchProducts, GetCart),
    write(ReleaseInventory, ChargePayment),
    hybrid(ReserveInventory(compensate = ReleaseInventory)),
))]
pub enum Checkout {
    #[agent(initial, tools(SearchProducts, GetCart), to(Review))]
    Browsing { cart: Cart },
    #[agent(route = llm, tools(ReserveInventory), to(Payment, Browsing), on_error = Failed)]
    Review { cart: Cart },
    #[agent(tools(ChargePayment), to(Confirm, Failed), max_tool_calls = 3, timeout_ms = 30_000)]
    Payment { order: Order },
    #[agent(wait = "approval", wait_timeout_ms = 60_000, to(Done, Failed))]
    Confirm(Order),
    #[agent(terminal)]
    Done { receipt: String },
    #[agent(terminal, compensate)]
    Failed { reason: String },
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, checkout::Browsing { cart }: checkout::Browsing) -> StepResult<checkout::Browsing> {
        let _found = ctx.call::<SearchProducts>("socks".into()).await?;
        let _cart = ctx.call::<GetCart>(()).await?;
        Ok(ctx.to(checkout::Review { cart }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, checkout::Review>,
        route: checkout::ReviewRoute,
        checkout::Review { cart }: checkout::Review,
    ) -> StepResult<checkout::Review> {
        Ok(match route {
            checkout::ReviewRoute::Payment => {
                let order = Order { id: cart.items.join(",") };
                let _reservation = ctx.call::<ReserveInventory>(order.clone()).await?;
                ctx.to(checkout::Payment { order })
            }
            checkout::ReviewRoute::Browsing => ctx.to(checkout::Browsing { cart }),
        })
    }

    async fn payment(&self, ctx: Ctx<'_, checkout::Payment>, checkout::Payment { order }: checkout::Payment) -> StepResult<checkout::Payment> {
        match ctx.call::<ChargePayment>(order.clone()).await {
            Ok(_) => Ok(ctx.to(checkout::Confirm(order))),
            Err(e) => Ok(ctx.to(checkout::Failed { reason: e.to_string() })),
        }
    }

    async fn confirm(&self, ctx: Ctx<'_, checkout::Confirm>, wake: Wake, checkout::Confirm(f0): checkout::Confirm) -> StepResult<checkout::Confirm> {
        Ok(match wake {
            Wake::Signal(_) => ctx.to(checkout::Done { receipt: f0.id }),
            Wake::TimedOut => ctx.to(checkout::Failed { reason: "no approval".into() }),
        })
    }
}

fn assert_handles<A: durable_agents::agent::Handle<Shop>>() {}

fn main() {
    assert_handles::<Checkout>();
    let g = Checkout::graph();
    assert_eq!(g.agent, "Checkout");
    assert_eq!(Checkout::NAME, "Checkout");
    let names: Vec<&str> = g.states.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Browsing", "Review", "Payment", "Confirm", "Done", "Failed"]);
    assert_eq!(g.states[0].data, "{ cart : Cart }");
    assert_eq!(g.states[3].data, "(Order)");
    assert!(g.has_edge("Review", "Failed"));
    assert_eq!(g.tool("ReserveInventory").unwrap().compensation.as_deref(), Some("ReleaseInventory"));
    let done = Checkout::Done { receipt: String::new() };
    assert_eq!(done.state_name(), "Done");
}
