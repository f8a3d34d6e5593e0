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

use durable_agents::prelude::*;
use durable_agents::router::{RouterReply, ScriptedRouter};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::shop::{Product, Shop, ShopError, ShopState};

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
// that the agent lists and the handlers call. All of them share the shop (`Shared`).

/// A search.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Query {
    /// Text to look for.
    pub query: String,
}

/// A cart change.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CartChange {
    /// Whose cart.
    pub user: String,
    /// Which product.
    pub sku: String,
}

/// A recommendation request: built by the handler from typed state, never from a log.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RecommendFor {
    /// SKUs in the cart.
    pub cart: Vec<String>,
    /// SKUs never to recommend.
    pub exclude: Vec<String>,
}

/// A reservation request.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReserveRequest {
    /// Which product.
    pub sku: String,
}

/// A reservation.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Reservation {
    /// Its id.
    pub reservation_id: String,
}

/// A charge.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChargeRequest {
    /// Whose card.
    pub user: String,
    /// The card.
    pub card: String,
    /// Amount in cents.
    pub cents: u64,
}

/// A payment.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct PaymentConfirmation {
    /// Its id.
    pub payment_id: String,
}

/// A receipt to send.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReceiptRequest {
    /// To whom.
    pub user: String,
    /// For which payment.
    pub payment_id: String,
    /// What was bought.
    pub skus: Vec<String>,
}

/// A sent receipt.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReceiptSent {
    /// Its id.
    pub receipt_id: String,
}

impl From<ShopError> for ToolError {
    fn from(e: ShopError) -> Self {
        match e {
            ShopError::Refused(m) => ToolError::permanent(m),
            e @ ShopError::File { .. } => ToolError::retryable(e.to_string()),
        }
    }
}

/// Apply `op` once per idempotency key (the shop's effect log), and decode its result.
fn effect<T: DeserializeOwned>(
    shop: &Shop,
    op: &str,
    cx: &ToolContext,
    apply: impl FnOnce(&mut ShopState) -> Result<(Value, String), ShopError>,
) -> ToolResult<T> {
    let v = shop.effect(op, cx.idempotency_key(), apply)?;
    serde_json::from_value(v).map_err(|e| ToolError::permanent(e.to_string()))
}

/// Search the catalogue by name or SKU.
#[tool_fn(read, timeout_ms = 1000, retries = 3)]
pub async fn search_products(
    Shared(shop): Shared<Arc<Shop>>,
    q: Query,
) -> ToolResult<Vec<Product>> {
    Ok(shop.search(&q.query))
}

/// Recommend products related to the cart, never one in the cart or removed from it.
#[tool_fn(read, timeout_ms = 1000, retries = 3)]
pub async fn recommend(
    Shared(shop): Shared<Arc<Shop>>,
    r: RecommendFor,
) -> ToolResult<Vec<Product>> {
    Ok(shop.recommend(&r.cart, &r.exclude))
}

/// Put a product in the customer's cart.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn add_to_cart(
    Shared(shop): Shared<Arc<Shop>>,
    c: CartChange,
    cx: &ToolContext,
) -> ToolResult<Product> {
    effect(&shop, "add_to_cart", cx, |s| {
        let p = s.catalogue.get(&c.sku).cloned();
        let p = p.ok_or_else(|| ShopError::Refused(format!("no product `{}`", c.sku)))?;
        s.carts
            .entry(c.user.clone())
            .or_default()
            .push(c.sku.clone());
        Ok((json!(p), format!("{} += {}", c.user, c.sku)))
    })
}

/// Take a product out of the customer's cart.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn remove_from_cart(
    Shared(shop): Shared<Arc<Shop>>,
    c: CartChange,
    cx: &ToolContext,
) -> ToolResult<()> {
    effect(&shop, "remove_from_cart", cx, |s| {
        let cart = s.carts.entry(c.user.clone()).or_default();
        let at = cart.iter().position(|x| x == &c.sku);
        let at = at.ok_or_else(|| ShopError::Refused(format!("`{}` is not in the cart", c.sku)))?;
        cart.remove(at);
        Ok((Value::Null, format!("{} -= {}", c.user, c.sku)))
    })
}

/// Reserve one unit of stock.
#[tool_fn(hybrid, compensate = ReleaseInventory, timeout_ms = 1000, retries = 3)]
pub async fn reserve_inventory(
    Shared(shop): Shared<Arc<Shop>>,
    r: ReserveRequest,
    cx: &ToolContext,
) -> ToolResult<Reservation> {
    effect(&shop, "reserve", cx, |s| {
        let stock = s.stock.entry(r.sku.clone()).or_default();
        if *stock == 0 {
            return Err(ShopError::Refused(format!("`{}` is out of stock", r.sku)));
        }
        *stock -= 1;
        let id = Shop::next_id(s, "res");
        s.reservations.insert(id.clone(), r.sku.clone());
        Ok((
            json!({ "reservation_id": id }),
            format!("reserved 1 {} as {id}", r.sku),
        ))
    })
}

/// Release a reservation (the compensation of `ReserveInventory`).
#[tool_fn(write, timeout_ms = 1000, retries = 5)]
pub async fn release_inventory(
    Shared(shop): Shared<Arc<Shop>>,
    r: Reservation,
    cx: &ToolContext,
) -> ToolResult<()> {
    effect(&shop, "release", cx, |s| {
        let id = r.reservation_id;
        let Some(sku) = s.reservations.remove(&id) else {
            return Ok((Value::Null, format!("{id} was not held")));
        };
        *s.stock.entry(sku.clone()).or_default() += 1;
        Ok((Value::Null, format!("released {id} ({sku})")))
    })
}

/// Charge a card through the payment gateway.
#[tool_fn(write, timeout_ms = 800, retries = 3)]
pub async fn charge_payment(
    Shared(shop): Shared<Arc<Shop>>,
    c: ChargeRequest,
    cx: &ToolContext,
) -> ToolResult<PaymentConfirmation> {
    let mut timed_out = false;
    shop.configure(|s| {
        if s.gateway_timeouts > 0 {
            s.gateway_timeouts -= 1;
            timed_out = true;
            // The request reached the gateway; it applies nothing before answering.
            *s.requests
                .entry(cx.idempotency_key().to_owned())
                .or_default() += 1;
        }
    })?;
    if timed_out {
        // The gateway hangs past the tool's timeout: the runner retries with the same key.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    effect(&shop, "charge", cx, |s| {
        if s.declined_cards.contains(&c.card) {
            return Err(ShopError::Refused(format!("card {} declined", c.card)));
        }
        let id = Shop::next_id(s, "pay");
        s.payments.insert(id.clone(), c.cents);
        Ok((
            json!({ "payment_id": id }),
            format!("charged {} cents to {}", c.cents, c.user),
        ))
    })
}

/// Email the receipt.
#[tool_fn(write, timeout_ms = 1000, retries = 3)]
pub async fn send_receipt(
    Shared(shop): Shared<Arc<Shop>>,
    r: ReceiptRequest,
    cx: &ToolContext,
) -> ToolResult<ReceiptSent> {
    effect(&shop, "send_receipt", cx, |s| {
        let id = Shop::next_id(s, "rcpt");
        s.receipts.insert(id.clone(), r.user.clone());
        Ok((
            json!({ "receipt_id": id }),
            format!("receipt {id} for {}", r.payment_id),
        ))
    })
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
        customer: Customer,
        cart: Cart,
    ) -> StepResult<checkout::Browsing> {
        let mut customer = customer;
        let mut cart = cart;
        for action in std::mem::take(&mut customer.plan) {
            match action {
                CartAction::Search(query) => {
                    ctx.call::<SearchProducts>(Query { query }).await?;
                }
                CartAction::Add(sku) => {
                    let product = ctx
                        .call::<AddToCart>(CartChange {
                            user: customer.user.clone(),
                            sku: sku.clone(),
                        })
                        .await?;
                    cart.removed.retain(|s| s != &sku);
                    cart.items.push(product);
                }
                CartAction::Remove(sku) => {
                    ctx.call::<RemoveFromCart>(CartChange {
                        user: customer.user.clone(),
                        sku: sku.clone(),
                    })
                    .await?;
                    cart.items.retain(|p| p.sku != sku);
                    cart.removed.push(sku);
                }
            }
        }
        // The recommender reads the typed cart, so a removed item cannot come back.
        let recommendations = ctx
            .call::<Recommend>(RecommendFor {
                cart: cart.skus(),
                exclude: cart.removed.clone(),
            })
            .await?;
        Ok(ctx.to(checkout::new::Review {
            customer,
            cart,
            recommendations,
        }))
    }

    async fn review(
        &self,
        ctx: Ctx<'_, checkout::Review>,
        route: checkout::ReviewRoute,
        customer: Customer,
        cart: Cart,
        _recommendations: Vec<Product>,
    ) -> StepResult<checkout::Review> {
        if cart.items.is_empty() && route == checkout::ReviewRoute::Reserving {
            return Err(StepError::handler("cannot check out an empty cart"));
        }
        Ok(match route {
            checkout::ReviewRoute::Reserving => ctx.to(checkout::Reserving::new(customer, cart)),
            checkout::ReviewRoute::Browsing => ctx.to(checkout::Browsing::new(customer, cart)),
        })
    }

    async fn reserving(
        &self,
        ctx: Ctx<'_, checkout::Reserving>,
        customer: Customer,
        cart: Cart,
    ) -> StepResult<checkout::Reserving> {
        // One reservation per item, up to four at a time: each keeps the journal index of
        // its item, so a resumed step replays them by item however they finished. If one
        // fails, the step fails and the saga releases the ones that were made.
        let requests = cart.skus().into_iter().map(|sku| ReserveRequest { sku });
        let mut reservations = Vec::new();
        for r in ctx.call_each::<ReserveInventory>(requests, 4).await {
            reservations.push(r?.reservation_id);
        }
        Ok(ctx.to(checkout::new::Payment {
            customer,
            cart,
            reservations,
        }))
    }

    async fn payment(
        &self,
        ctx: Ctx<'_, checkout::Payment>,
        customer: Customer,
        cart: Cart,
        _reservations: Vec<String>,
    ) -> StepResult<checkout::Payment> {
        let paid = ctx
            .call::<ChargePayment>(ChargeRequest {
                user: customer.user.clone(),
                card: customer.card.clone(),
                cents: cart.total_cents(),
            })
            .await?;
        Ok(ctx.to(checkout::new::Receipt {
            customer,
            cart,
            payment_id: paid.payment_id,
        }))
    }

    async fn receipt(
        &self,
        ctx: Ctx<'_, checkout::Receipt>,
        customer: Customer,
        cart: Cart,
        payment_id: String,
    ) -> StepResult<checkout::Receipt> {
        let sent = ctx
            .call::<SendReceipt>(ReceiptRequest {
                user: customer.user,
                payment_id,
                skus: cart.skus(),
            })
            .await?;
        Ok(ctx.to(checkout::new::Done {
            receipt_id: sent.receipt_id,
            total_cents: cart.total_cents(),
        }))
    }
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
