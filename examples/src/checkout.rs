//! The checkout agent: browse, review (LLM-routed), reserve, pay, send a receipt.
//!
//! The cart is typed state. The recommendation step reads the cart and the list of removed
//! items from that state, so an item the customer removed cannot come back, however long
//! ago it was mentioned. The payment is a write tool with an idempotency key: when the
//! gateway times out, the runner retries with the same key and never asks the LLM again.
//! Stock is reserved by a hybrid tool whose compensation releases it: a failed payment
//! releases every reservation, last first.

use std::sync::Arc;
use std::time::Duration;

use durable_agents::agent::{AllowsTool, State};
use durable_agents::prelude::*;
use durable_agents::router::{RouterReply, ScriptedRouter};

use crate::shop::{Product, Shop, ShopError};

/// What a customer does while browsing (the demo's scripted customer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CartAction {
    /// Search the catalogue.
    Search(String),
    /// Put a SKU in the cart.
    Add(String),
    /// Take a SKU out of the cart.
    Remove(String),
}

/// The customer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Customer {
    /// User name.
    pub user: String,
    /// Card to charge.
    pub card: String,
    /// What the customer does while browsing; consumed by the browsing step.
    pub plan: Vec<CartAction>,
}

/// The cart: typed state, the single source of truth for what is in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Cart {
    /// The products in the cart.
    pub items: Vec<Product>,
    /// SKUs the customer removed: never recommended again.
    pub removed: Vec<String>,
}

impl Cart {
    /// SKUs in the cart.
    #[must_use]
    pub fn skus(&self) -> Vec<String> {
        self.items.iter().map(|p| p.sku.clone()).collect()
    }

    /// Total in cents.
    #[must_use]
    pub fn total_cents(&self) -> u64 {
        self.items.iter().map(|p| p.price_cents).sum()
    }
}

/// The checkout agent.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    tools(
        read(SearchProducts, Recommend),
        write(AddToCart, RemoveFromCart, ChargePayment, ReleaseInventory, SendReceipt),
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
    /// Charge the card (write, idempotency key; the gateway may time out).
    #[agent(tools(ChargePayment), to(Receipt), on_error = Failed)]
    Payment {
        /// Who.
        customer: Customer,
        /// The cart.
        cart: Cart,
        /// Held reservations.
        reservations: Vec<String>,
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
    },
    /// Paid, reserved and receipted.
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

// --- Tools -------------------------------------------------------------------------------
// Each tool is an async fn; `#[tool_fn]` generates the type named after it (`ChargePayment`)
// that the agent lists and the handlers call, and its input from the documented parameters
// (`ChargePaymentInput`, whose schema the model reads). All of them share the shop.

impl From<ShopError> for ToolError {
    fn from(e: ShopError) -> Self {
        match e {
            ShopError::Refused(m) => ToolError::permanent(m),
            e @ ShopError::File { .. } => ToolError::retryable(e.to_string()),
        }
    }
}

/// Search the catalogue by name or SKU.
#[tool_fn(read, timeout_ms = 1000, retries = 3)]
pub async fn search_products(
    Shared(shop): Shared<Arc<Shop>>,
    /// Text to look for.
    query: String,
) -> ToolResult<Vec<Product>> {
    Ok(shop.search(&query))
}

/// Recommend products related to the cart, never one in the cart or removed from it.
#[tool_fn(read, timeout_ms = 1000, retries = 3)]
pub async fn recommend(
    Shared(shop): Shared<Arc<Shop>>,
    /// SKUs in the cart.
    cart: Vec<String>,
    /// SKUs never to recommend.
    exclude: Vec<String>,
) -> ToolResult<Vec<Product>> {
    Ok(shop.recommend(&cart, &exclude))
}

/// Put a product in the customer's cart.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn add_to_cart(
    Shared(shop): Shared<Arc<Shop>>,
    /// Whose cart.
    user: String,
    /// Which product.
    sku: String,
    cx: &ToolContext,
) -> ToolResult<Product> {
    Ok(shop.add_to_cart(cx.idempotency_key(), &user, &sku)?)
}

/// Take a product out of the customer's cart.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn remove_from_cart(
    Shared(shop): Shared<Arc<Shop>>,
    /// Whose cart.
    user: String,
    /// Which product.
    sku: String,
    cx: &ToolContext,
) -> ToolResult<()> {
    Ok(shop.remove_from_cart(cx.idempotency_key(), &user, &sku)?)
}

/// Reserve one unit of stock; the reservation's id is what `ReleaseInventory` takes.
#[tool_fn(hybrid, compensate = ReleaseInventory, timeout_ms = 1000, retries = 3)]
pub async fn reserve_inventory(
    Shared(shop): Shared<Arc<Shop>>,
    /// Which product.
    sku: String,
    cx: &ToolContext,
) -> ToolResult<String> {
    Ok(shop.reserve(cx.idempotency_key(), &sku)?)
}

/// Release a reservation (the compensation of `ReserveInventory`).
#[tool_fn(write, timeout_ms = 1000, retries = 5)]
pub async fn release_inventory(
    Shared(shop): Shared<Arc<Shop>>,
    /// The reservation's id.
    reservation_id: String,
    cx: &ToolContext,
) -> ToolResult<()> {
    Ok(shop.release(cx.idempotency_key(), &reservation_id)?)
}

/// Charge a card through the payment gateway; the payment's id.
#[tool_fn(write, timeout_ms = 800, retries = 3)]
pub async fn charge_payment(
    Shared(shop): Shared<Arc<Shop>>,
    /// Whose card.
    user: String,
    /// The card.
    card: String,
    /// Amount in cents.
    cents: u64,
    cx: &ToolContext,
) -> ToolResult<String> {
    if shop.gateway_hangs(cx.idempotency_key())? {
        // Past the tool's timeout: the runner retries with the same key.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(shop.charge(cx.idempotency_key(), &user, &card, cents)?)
}

/// Email the receipt; the receipt's id.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn send_receipt(
    Shared(shop): Shared<Arc<Shop>>,
    /// To whom.
    user: String,
    /// For which payment.
    payment_id: String,
    cx: &ToolContext,
) -> ToolResult<String> {
    Ok(shop.send_receipt(cx.idempotency_key(), &user, &payment_id)?)
}

/// Every tool of the checkout, acting on `shop`: a missing one would not compile.
#[must_use]
pub fn checkout_tools(shop: &Arc<Shop>) -> CheckoutTools {
    CheckoutTools::from_shared(shop)
}

/// The same tools as a `ToolBox`, for agents that share the checkout's tools.
#[must_use]
pub fn tools(shop: &Arc<Shop>) -> ToolBox {
    checkout_tools(shop).into_tool_box()
}

// --- Handlers ----------------------------------------------------------------------------

/// The checkout's behaviour.
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
        Ok(ctx.to(checkout::Receipt {
            customer,
            cart,
            payment_id,
        }))
    }

    async fn receipt(
        &self,
        ctx: Ctx<'_, checkout::Receipt>,
        checkout::Receipt {
            customer,
            cart,
            payment_id,
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

// --- Steps every version of the checkout takes ---------------------------------------------
// Generic over the state, bounded by the tools each calls: a version of the agent whose
// state does not list one of them does not compile (`checkout_v2` reuses them).

/// Browse: play the customer's plan on the cart, then read recommendations from the typed
/// cart, so a removed item cannot come back.
///
/// # Errors
/// A tool call that failed after its retries.
pub async fn browse<S>(
    ctx: &Ctx<'_, S>,
    mut customer: Customer,
    mut cart: Cart,
) -> Result<(Customer, Cart, Vec<Product>), StepError>
where
    S: State
        + AllowsTool<SearchProducts>
        + AllowsTool<AddToCart>
        + AllowsTool<RemoveFromCart>
        + AllowsTool<Recommend>,
{
    for action in std::mem::take(&mut customer.plan) {
        match action {
            CartAction::Search(query) => {
                ctx.call::<SearchProducts>(query.into()).await?;
            }
            CartAction::Add(sku) => {
                let user = customer.user.clone();
                let product = ctx
                    .call::<AddToCart>(AddToCartInput {
                        user,
                        sku: sku.clone(),
                    })
                    .await?;
                cart.removed.retain(|s| s != &sku);
                cart.items.push(product);
            }
            CartAction::Remove(sku) => {
                let user = customer.user.clone();
                ctx.call::<RemoveFromCart>(RemoveFromCartInput {
                    user,
                    sku: sku.clone(),
                })
                .await?;
                cart.items.retain(|p| p.sku != sku);
                cart.removed.push(sku);
            }
        }
    }
    let recommendations = ctx
        .call::<Recommend>(RecommendInput {
            cart: cart.skus(),
            exclude: cart.removed.clone(),
        })
        .await?;
    Ok((customer, cart, recommendations))
}

/// Reserve one unit per item, up to four at a time: each keeps the journal index of its
/// item, so a resumed step replays them by item however they finished. If one fails, the
/// step fails and the saga releases the ones that were made.
///
/// # Errors
/// The first reservation that failed after its retries.
pub async fn reserve<S>(ctx: &Ctx<'_, S>, cart: &Cart) -> Result<Vec<String>, StepError>
where
    S: State + AllowsTool<ReserveInventory>,
{
    let requests = cart.skus().into_iter().map(ReserveInventoryInput::from);
    let mut reservations = Vec::new();
    for r in ctx.call_each::<ReserveInventory>(requests, 4).await {
        reservations.push(r?);
    }
    Ok(reservations)
}

/// Charge the cart's total to the customer's card; the payment's id.
///
/// # Errors
/// The charge failed after its retries (a declined card is permanent).
pub async fn pay<S>(ctx: &Ctx<'_, S>, customer: &Customer, cart: &Cart) -> Result<String, StepError>
where
    S: State + AllowsTool<ChargePayment>,
{
    Ok(ctx
        .call::<ChargePayment>(ChargePaymentInput {
            user: customer.user.clone(),
            card: customer.card.clone(),
            cents: cart.total_cents(),
        })
        .await?)
}

/// The offline stand-in for an LLM in the review state: a scripted router that checks out
/// when the cart is not empty. It is not a model; the example says so when it uses it.
#[must_use]
pub fn scripted_reviewer() -> ScriptedRouter {
    ScriptedRouter::from_fn(|req| -> RouterReply {
        let empty = req.state_data["Review"]["cart"]["items"]
            .as_array()
            .is_none_or(Vec::is_empty);
        let mut reply = ScriptedRouter::choose(if empty { "Browsing" } else { "Reserving" }, "{}");
        "scripted-reviewer (offline stand-in, not an LLM)".clone_into(&mut reply.model);
        reply
    })
}

/// The demo's customers: Alice pays (the gateway times out once), Bob's card is declined.
#[must_use]
pub fn demo_customers() -> [Customer; 2] {
    let plan = vec![
        CartAction::Search("mug".into()),
        CartAction::Add("mug".into()),
        CartAction::Search("tea".into()),
        CartAction::Add("tea".into()),
        CartAction::Remove("mug".into()),
        CartAction::Add("teapot".into()),
    ];
    [
        Customer {
            user: "alice".into(),
            card: "4242-good".into(),
            plan: plan.clone(),
        },
        Customer {
            user: "bob".into(),
            card: "4000-declined".into(),
            plan,
        },
    ]
}

/// The initial state for a customer.
#[must_use]
pub fn start(customer: Customer) -> Checkout {
    Checkout::Browsing {
        customer,
        cart: Cart::default(),
    }
}
