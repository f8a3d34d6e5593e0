//! Version 2 of the checkout agent: a shipping step between payment and receipt.
//!
//! Version 1 ([`crate::checkout`]) stays in the code, as it would in yours while runs of it
//! are in flight: this version declares `migrate_from(v1::Checkout, with = from_v1)`, and
//! [`from_v1`] maps every version 1 state to a version 2 state (an exhaustive `match`: a
//! forgotten state does not compile). A worker running this version claims runs of both
//! versions and moves each version 1 run across once, at its next step, in a `migrated`
//! transition of its history. A run that had paid but not yet sent its receipt is shipped
//! first. `cargo run --example checkout-v2` shows runs started on version 1 finishing here.
//!
//! What the derive checks about the migration: version 1 is an agent of the same name with a
//! lower version; version 1's hybrid tool `ReserveInventory` is declared hybrid here with the
//! same compensation (a version 1 run failing on version 2 still releases its reservations);
//! every signal version 1 waits for is still waited for (it waits for none).

use std::sync::Arc;

use durable_agents::prelude::*;

use crate::checkout::{
    self as v1, AddToCart, Cart, ChargePayment, Customer, Recommend, ReleaseInventory,
    RemoveFromCart, ReserveInventory, SearchProducts, SendReceipt, SendReceiptInput, browse, pay,
    reserve,
};
use crate::shop::{Product, Shop};

/// The checkout agent, version 2.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    version = 2,
    migrate_from(v1::Checkout, with = from_v1),
    tools(
        read(SearchProducts, Recommend),
        write(
            AddToCart,
            RemoveFromCart,
            ChargePayment,
            ReleaseInventory,
            BookShipment,
            SendReceipt
        ),
        hybrid(ReserveInventory(compensate = ReleaseInventory)),
    ),
    max_steps = 40,
)]
pub enum Checkout {
    /// The customer browses; the step ends with recommendations read from the typed cart.
    #[agent(
        initial,
        tools(SearchProducts, AddToCart, RemoveFromCart, Recommend),
        to(Review)
    )]
    Browsing {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
    },
    /// The LLM reviews the cart and recommendations and decides: check out, or browse on.
    #[agent(route = llm, tools(SearchProducts), to(Reserving, Browsing), on_error = Failed)]
    Review {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
        /// What the recommender proposed for this cart.
        recommendations: Vec<Product>,
    },
    /// Reserve stock for every item (hybrid: released if the checkout fails).
    #[agent(tools(ReserveInventory), to(Payment), on_error = Failed)]
    Reserving {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
    },
    /// Charge the card (write, idempotency key).
    #[agent(tools(ChargePayment), to(Shipping), on_error = Failed)]
    Payment {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
        /// Held reservations.
        reservations: Vec<String>,
    },
    /// New in version 2: book the shipment of the paid order (write).
    #[agent(tools(BookShipment), to(Receipt))]
    Shipping {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
        /// The payment.
        payment_id: String,
    },
    /// Send the receipt (write).
    #[agent(tools(SendReceipt), to(Done))]
    Receipt {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
        /// The payment.
        payment_id: String,
        /// The shipment.
        shipment_id: String,
    },
    /// Paid, shipped and receipted.
    #[agent(terminal)]
    Done {
        /// The receipt.
        receipt_id: String,
        /// What was paid.
        total_cents: u64,
    },
    /// Something failed: every reservation is released by compensation.
    #[agent(terminal, compensate)]
    Failed {
        /// Why.
        reason: Failure,
    },
}

/// Where each version 1 state goes in version 2. A paid order waiting for its receipt is
/// shipped first: the new step applies to runs in flight too.
#[must_use]
pub fn from_v1(old: v1::Checkout) -> Checkout {
    match old {
        v1::Checkout::Browsing { customer, cart } => Checkout::Browsing { customer, cart },
        v1::Checkout::Review {
            customer,
            cart,
            recommendations,
        } => Checkout::Review {
            customer,
            cart,
            recommendations,
        },
        v1::Checkout::Reserving { customer, cart } => Checkout::Reserving { customer, cart },
        v1::Checkout::Payment {
            customer,
            cart,
            reservations,
        } => Checkout::Payment {
            customer,
            cart,
            reservations,
        },
        v1::Checkout::Receipt {
            customer,
            cart,
            payment_id,
        } => Checkout::Shipping {
            customer,
            cart,
            payment_id,
        },
        v1::Checkout::Done {
            receipt_id,
            total_cents,
        } => Checkout::Done {
            receipt_id,
            total_cents,
        },
        v1::Checkout::Failed { reason } => Checkout::Failed { reason },
    }
}

/// Book the shipment of a paid order; the shipment's id.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn book_shipment(
    Shared(shop): Shared<Arc<Shop>>,
    /// To whom.
    user: String,
    /// The order's payment.
    payment_id: String,
    cx: &ToolContext,
) -> ToolResult<String> {
    Ok(shop.book_shipment(cx.idempotency_key(), &user, &payment_id)?)
}

/// Every tool of version 2, acting on `shop`.
#[must_use]
pub fn checkout_tools(shop: &Arc<Shop>) -> CheckoutTools {
    CheckoutTools::from_shared(shop)
}

/// Version 2's behaviour: version 1's steps (shared, see [`v1::browse`]) and the shipping.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handlers;

impl CheckoutHandlers for Handlers {
    async fn browsing(
        &self,
        ctx: Ctx<'_, checkout::Browsing>,
        checkout::Browsing { customer, cart }: checkout::Browsing,
    ) -> StepResult<checkout::Browsing> {
        let (customer, cart, recommendations) = browse(&ctx, customer, cart).await?;
        Ok(ctx.to(checkout::Review {
            customer,
            cart,
            recommendations,
        }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, checkout::Review>,
        route: checkout::ReviewRoute,
        checkout::Review { customer, cart, .. }: checkout::Review,
    ) -> StepResult<checkout::Review> {
        if cart.items.is_empty() && route == checkout::ReviewRoute::Reserving {
            return Err(StepError::handler("cannot check out an empty cart"));
        }
        Ok(match route {
            checkout::ReviewRoute::Reserving => ctx.to(checkout::Reserving { customer, cart }),
            checkout::ReviewRoute::Browsing => ctx.to(checkout::Browsing { customer, cart }),
        })
    }

    async fn reserving(
        &self,
        ctx: Ctx<'_, checkout::Reserving>,
        checkout::Reserving { customer, cart }: checkout::Reserving,
    ) -> StepResult<checkout::Reserving> {
        let reservations = reserve(&ctx, &cart).await?;
        Ok(ctx.to(checkout::Payment {
            customer,
            cart,
            reservations,
        }))
    }

    async fn payment(
        &self,
        ctx: Ctx<'_, checkout::Payment>,
        checkout::Payment { customer, cart, .. }: checkout::Payment,
    ) -> StepResult<checkout::Payment> {
        let payment_id = pay(&ctx, &customer, &cart).await?;
        Ok(ctx.to(checkout::Shipping {
            customer,
            cart,
            payment_id,
        }))
    }

    async fn shipping(
        &self,
        ctx: Ctx<'_, checkout::Shipping>,
        checkout::Shipping {
            customer,
            cart,
            payment_id,
        }: checkout::Shipping,
    ) -> StepResult<checkout::Shipping> {
        let shipment_id = ctx
            .call::<BookShipment>(BookShipmentInput {
                user: customer.user.clone(),
                payment_id: payment_id.clone(),
            })
            .await?;
        Ok(ctx.to(checkout::Receipt {
            customer,
            cart,
            payment_id,
            shipment_id,
        }))
    }

    async fn receipt(
        &self,
        ctx: Ctx<'_, checkout::Receipt>,
        checkout::Receipt {
            customer,
            cart,
            payment_id,
            ..
        }: checkout::Receipt,
    ) -> StepResult<checkout::Receipt> {
        let receipt_id = ctx
            .call::<SendReceipt>(SendReceiptInput {
                user: customer.user,
                payment_id,
            })
            .await?;
        Ok(ctx.to(checkout::Done {
            receipt_id,
            total_cents: cart.total_cents(),
        }))
    }
}
