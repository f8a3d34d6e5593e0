//! The expansion is lint-clean: deriving under `deny(warnings)`, `missing_docs` and clippy's
//! pedantic group compiles (run by `cargo clippy --all-targets -- -D warnings`), for a public
//! agent with tools, routes (one transition typed) and waits, for a private agent declared
//! inside a function, for a tool function whose input is its arguments (one documented,
//! one not), and for a version 2 migrating from the public agent.
#![deny(warnings, missing_docs, clippy::pedantic)]

use durable_agents::{Agent, Ctx, StepResult, Wake};
use serde::{Deserialize, Serialize};
use ui_tests::{
    Cart, ChargePayment, GetCart, Order, ReleaseInventory, ReserveInventory, SearchProducts,
};

/// Add a note (a tool whose input is its arguments).
#[durable_agents::tool_fn(write)]
pub async fn add_note(
    /// The note's text.
    text: String,
    pinned: bool,
) -> durable_agents::ToolResult<String> {
    Ok(if pinned { text } else { String::new() })
}

/// The checkout agent.
#[derive(Agent, Clone, Debug, Serialize, Deserialize)]
#[agent(tools(
    read(SearchProducts, GetCart),
    write(ReleaseInventory, ChargePayment),
    hybrid(ReserveInventory(compensate = ReleaseInventory)),
))]
pub enum Checkout {
    /// Looking around.
    #[agent(initial, tools(SearchProducts, GetCart), to(Review))]
    Browsing {
        /// The cart.
        cart: Cart,
    },
    /// The LLM decides.
    #[agent(route = llm, tools(ReserveInventory), to(Payment(args = Order), Browsing), on_error = Failed)]
    Review {
        /// The cart.
        cart: Cart,
    },
    /// Paying.
    #[agent(tools(ChargePayment), to(Confirm, Failed), max_tool_calls = 3)]
    Payment(Order),
    /// Waiting for approval.
    #[agent(wait = "approval", wait_timeout_ms = 1000, to(Done, Failed))]
    Confirm,
    /// Paid.
    #[agent(terminal)]
    Done,
    /// Gave up.
    #[agent(terminal, compensate)]
    Failed {
        /// Why.
        reason: String,
    },
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(
        &self,
        ctx: Ctx<'_, checkout::Browsing>,
        checkout::Browsing { cart }: checkout::Browsing,
    ) -> StepResult<checkout::Browsing> {
        let _ = ctx.call::<GetCart>(()).await?;
        Ok(ctx.to(checkout::Review { cart }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, checkout::Review>,
        route: checkout::ReviewRoute,
        checkout::Review { cart }: checkout::Review,
    ) -> StepResult<checkout::Review> {
        Ok(match route {
            checkout::ReviewRoute::Payment(order) => ctx.to(checkout::Payment(order)),
            checkout::ReviewRoute::Browsing => ctx.to(checkout::Browsing { cart }),
        })
    }

    async fn payment(
        &self,
        ctx: Ctx<'_, checkout::Payment>,
        checkout::Payment(f0): checkout::Payment,
    ) -> StepResult<checkout::Payment> {
        let _ = ctx.call::<ChargePayment>(f0).await?;
        Ok(ctx.to(checkout::Confirm))
    }

    async fn confirm(
        &self,
        ctx: Ctx<'_, checkout::Confirm>,
        wake: Wake,
        _: checkout::Confirm,
    ) -> StepResult<checkout::Confirm> {
        Ok(match wake {
            Wake::Signal(_) => ctx.to(checkout::Done),
            Wake::TimedOut => ctx.to(checkout::Failed {
                reason: "timed out".to_owned(),
            }),
        })
    }
}

/// Version 2 of the checkout agent: no approval step.
pub mod v2 {
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};
    use ui_tests::{ReleaseInventory, ReserveInventory};

    /// The checkout agent, version 2.
    #[derive(Agent, Clone, Debug, Serialize, Deserialize)]
    #[agent(
        name = "Checkout",
        version = 2,
        migrate_from(super::Checkout, with = from_v1, skip_signal("approval")),
        tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory)))
    )]
    pub enum CheckoutV2 {
        /// Reserving.
        #[agent(initial, tools(ReserveInventory), to(Done, Failed))]
        Reserving,
        /// Paid.
        #[agent(terminal)]
        Done,
        /// Gave up.
        #[agent(terminal, compensate)]
        Failed {
            /// Why.
            reason: String,
        },
    }

    fn from_v1(old: super::Checkout) -> CheckoutV2 {
        match old {
            super::Checkout::Browsing { .. }
            | super::Checkout::Review { .. }
            | super::Checkout::Payment(_) => CheckoutV2::Reserving,
            super::Checkout::Confirm | super::Checkout::Done => CheckoutV2::Done,
            super::Checkout::Failed { reason } => CheckoutV2::Failed { reason },
        }
    }
}

fn handles<A: durable_agents::agent::Handle<H>, H>() {}

#[test]
fn derives_are_lint_clean() {
    #[derive(Agent, Clone, Serialize, Deserialize)]
    enum Local {
        #[agent(initial, to(End))]
        Start(u8),
        #[agent(terminal)]
        End,
    }

    struct L;

    impl LocalHandlers for L {
        async fn start(
            &self,
            ctx: Ctx<'_, local::Start>,
            local::Start(f0): local::Start,
        ) -> StepResult<local::Start> {
            let _ = f0;
            Ok(ctx.to(local::End))
        }
    }

    handles::<Checkout, Shop>();
    handles::<Local, L>();
    assert_eq!(Checkout::graph().states.len(), 6);
    assert_eq!(Local::graph().states.len(), 2);
    let note = AddNoteInput {
        text: "milk".to_owned(),
        pinned: true,
    };
    assert!(note.pinned && note.text == "milk");
    assert_eq!(<AddNote as durable_agents::Tool>::NAME, "AddNote");
    assert_eq!(v2::CheckoutV2::older_versions().len(), 1);
}
