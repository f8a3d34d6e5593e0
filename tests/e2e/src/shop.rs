//! The example agent of the battery: an order that prices and reserves its items (read and
//! hybrid tools), asks an LLM (a scripted router with random latency) whether to pay or
//! cancel, charges (a write tool), and releases its reservations when cancelled or failed
//! (the saga).
//!
//! ```text
//!   Start ──► Decide (route = llm) ──► Pay ──► Done
//!                  │                    └──(on_error)──► Failed (compensate)
//!                  └──► Cancelled (compensate)
//! ```

use std::sync::Arc;
use std::time::Duration;

use agent_core::router::{RouteRequest, Router, RouterError, RouterReply, ScriptedRouter};
use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::Store;
use agent_core::tool::{
    Compensate, Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError, ToolPolicy, kind,
};
use agent_core::{Agent, Ctx, StepResult};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::service::{Call, Service};

/// A SKU.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Sku {
    /// Its code.
    pub sku: String,
}

/// A price.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Price {
    /// Cents.
    pub cents: u64,
}

/// A reservation.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Reservation {
    /// Its id.
    pub reservation: String,
}

/// An amount to charge.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Amount {
    /// Cents.
    pub cents: u64,
}

/// A payment.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Payment {
    /// Its id.
    pub payment_id: String,
}

/// Look a price up (read).
#[derive(Debug, Clone)]
pub struct Lookup(pub Arc<Service>);
/// Reserve stock (hybrid, undone by [`Release`]).
#[derive(Debug, Clone)]
pub struct Reserve(pub Arc<Service>);
/// Release a reservation (write).
#[derive(Debug, Clone)]
pub struct Release(pub Arc<Service>);
/// Charge the customer (write).
#[derive(Debug, Clone)]
pub struct Charge(pub Arc<Service>);

/// Generous: the service's own writes wait out a PostgreSQL restart.
pub(crate) fn policy() -> ToolPolicy {
    ToolPolicy {
        timeout: Duration::from_secs(90),
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            jitter: true,
        },
        cache: true,
        journal_with_commit: false,
    }
}

fn call<'a>(cx: &'a ToolContext, tool: &'a str) -> Call<'a> {
    Call {
        run_id: &cx.run_id,
        version: cx.version,
        seq: cx.call_index,
        tool,
        key: cx.idempotency_key.as_deref(),
    }
}

/// Execute a keyed call: record the execution, take the service's time, apply once per key
/// (the tree agents' tools use it too).
pub(crate) async fn effect(
    svc: &Service,
    cx: &ToolContext,
    tool: &str,
    target: &str,
) -> Result<(), ToolError> {
    let id = svc
        .record_call(&call(cx, tool))
        .await
        .map_err(ToolError::retryable)?;
    svc.tool_latency.sleep().await;
    let key = cx.idempotency_key();
    if key.is_empty() {
        return Err(ToolError::permanent("an effect without an idempotency key"));
    }
    svc.apply(key, tool, &cx.run_id, target)
        .await
        .map_err(ToolError::retryable)?;
    svc.finish_call(&id).await.map_err(ToolError::retryable)
}

impl Tool for Lookup {
    const NAME: &'static str = "Lookup";
    const DESCRIPTION: &'static str = "Look up the price of a SKU.";
    type Kind = kind::Read;
    type Input = Sku;
    type Output = Price;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Lookup {
    async fn execute(&self, input: Sku, cx: &ToolContext) -> Result<Price, ToolError> {
        let id = self
            .0
            .record_call(&call(cx, Self::NAME))
            .await
            .map_err(ToolError::retryable)?;
        self.0
            .finish_call(&id)
            .await
            .map_err(ToolError::retryable)?;
        Ok(Price {
            cents: 100 * input.sku.len() as u64,
        })
    }
}

impl Tool for Reserve {
    const NAME: &'static str = "Reserve";
    const DESCRIPTION: &'static str = "Reserve one unit of a SKU.";
    type Kind = kind::Hybrid;
    type Input = Sku;
    type Output = Reservation;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Reserve {
    async fn execute(&self, input: Sku, cx: &ToolContext) -> Result<Reservation, ToolError> {
        effect(&self.0, cx, Self::NAME, &input.sku).await?;
        // Deterministic per key, as a service that stores its answer by key returns it.
        Ok(Reservation {
            reservation: format!("res:{}", cx.idempotency_key()),
        })
    }
}

impl Compensate for Reserve {
    type With = Release;
    fn compensation(&self, _: &Sku, output: &Reservation) -> Reservation {
        output.clone()
    }
}

impl Tool for Release {
    const NAME: &'static str = "Release";
    const DESCRIPTION: &'static str = "Release a reservation.";
    type Kind = kind::Write;
    type Input = Reservation;
    type Output = ();
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Release {
    async fn execute(&self, input: Reservation, cx: &ToolContext) -> Result<(), ToolError> {
        effect(&self.0, cx, Self::NAME, &input.reservation).await
    }
}

impl Tool for Charge {
    const NAME: &'static str = "Charge";
    const DESCRIPTION: &'static str = "Charge the customer.";
    type Kind = kind::Write;
    type Input = Amount;
    type Output = Payment;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Charge {
    async fn execute(&self, _: Amount, cx: &ToolContext) -> Result<Payment, ToolError> {
        effect(&self.0, cx, Self::NAME, "charge").await?;
        Ok(Payment {
            payment_id: format!("pay:{}", cx.idempotency_key()),
        })
    }
}

/// The battery's agent.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    tools(read(Lookup), write(Charge, Release), hybrid(Reserve(compensate = Release))),
)]
pub enum Shop {
    /// Price and reserve every item.
    #[agent(initial, tools(Lookup, Reserve), to(Decide))]
    Start {
        /// The order (the run's id), so the router can record whose question it answers.
        order: String,
        /// SKUs.
        items: Vec<String>,
    },
    /// The router looks a price up, then decides to pay or cancel.
    #[agent(route = llm, tools(Lookup), to(Pay, Cancelled))]
    Decide {
        /// The order.
        order: String,
        /// SKUs.
        items: Vec<String>,
        /// Held reservations.
        reservations: Vec<String>,
    },
    /// Charge; a failed charge takes the error path.
    #[agent(tools(Charge), to(Done), on_error = Failed)]
    Pay {
        /// Total.
        cents: u64,
    },
    /// Paid.
    #[agent(terminal)]
    Done {
        /// The payment.
        payment_id: String,
    },
    /// Cancelled by the router: reservations are released.
    #[agent(terminal, compensate)]
    Cancelled,
    /// Failed: reservations are released.
    #[agent(terminal, compensate)]
    Failed {
        /// Why.
        reason: String,
    },
}

/// The handlers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour;

impl ShopHandlers for Behaviour {
    async fn start(
        &self,
        ctx: Ctx<'_, shop::Start>,
        shop::Start { order, items }: shop::Start,
    ) -> StepResult<shop::Start> {
        let mut reservations = Vec::new();
        for sku in &items {
            ctx.call::<Lookup>(Sku { sku: sku.clone() }).await?;
            let r = ctx.call::<Reserve>(Sku { sku: sku.clone() }).await?;
            reservations.push(r.reservation);
        }
        Ok(ctx.to(shop::Decide {
            order,
            items,
            reservations,
        }))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, shop::Decide>,
        route: shop::DecideRoute,
        shop::Decide { items, .. }: shop::Decide,
    ) -> StepResult<shop::Decide> {
        Ok(match route {
            shop::DecideRoute::Pay => ctx.to(shop::Pay {
                cents: 100 * items.len() as u64,
            }),
            shop::DecideRoute::Cancelled => ctx.to(shop::Cancelled),
        })
    }

    async fn pay(
        &self,
        ctx: Ctx<'_, shop::Pay>,
        shop::Pay { cents }: shop::Pay,
    ) -> StepResult<shop::Pay> {
        let payment = ctx.call::<Charge>(Amount { cents }).await?;
        Ok(ctx.to(shop::Done {
            payment_id: payment.payment_id,
        }))
    }
}

/// Whether the router cancels this order (one in five, by a stable hash of its id).
#[must_use]
pub fn cancels(order: &str) -> bool {
    let h = order.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h % 5 == 0
}

/// What each of [`ScriptedShopRouter`]'s answers costs, in USD.
pub const ASK_COST: f64 = 0.002;

/// A stand-in for a model, labelled as such: it looks a price up, then pays (or cancels one
/// order in five). Every answer takes a random time and is recorded by the service.
#[derive(Debug)]
pub struct ScriptedShopRouter {
    svc: Arc<Service>,
}

impl ScriptedShopRouter {
    /// A router recording through `svc`.
    #[must_use]
    pub fn new(svc: Arc<Service>) -> Self {
        Self { svc }
    }
}

#[async_trait]
impl Router for ScriptedShopRouter {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        let order = request
            .state_data
            .get("Decide")
            .and_then(|d| d.get("order"))
            .and_then(|o| o.as_str())
            .unwrap_or("?")
            .to_owned();
        self.svc.llm_latency.sleep().await;
        let question = request.tool_results.len();
        self.svc
            .record_llm_call(&order, question)
            .await
            .map_err(|e| RouterError::new(agent_core::tool::ErrorClass::Retryable, e))?;
        let reply = if question == 0 {
            ScriptedRouter::choose("Lookup", &format!(r#"{{"sku":"check-{order}"}}"#))
        } else if cancels(&order) {
            ScriptedRouter::choose("Cancelled", "{}")
        } else {
            ScriptedRouter::choose("Pay", "{}")
        };
        // Priced as a provider's router with a price table prices it: the metric of model
        // spend counts it (`tests/metrics.rs`).
        Ok(RouterReply {
            cost: Some(agent_core::router::Cost {
                amount: ASK_COST,
                currency: "USD".to_owned(),
            }),
            ..reply
        })
    }
}

/// The tool box acting on `svc`.
#[must_use]
pub fn tools(svc: &Arc<Service>) -> ToolBox {
    ToolBox::new()
        .with(Lookup(Arc::clone(svc)))
        .with(Charge(Arc::clone(svc)))
        .with(Release(Arc::clone(svc)))
        .hybrid(Reserve(Arc::clone(svc)))
}

/// A runner of the shop over `store`, with the service's tools and router.
///
/// # Panics
/// Never for this agent (the tool box matches the graph).
#[must_use]
pub fn runner(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    config: RunnerConfig,
) -> Runner<Shop, Behaviour> {
    Runner::builder(store, Behaviour, tools(svc))
        .router(Arc::new(ScriptedShopRouter::new(Arc::clone(svc))))
        .config(config)
        .build()
        .expect("the tool box matches the graph")
}

/// The initial state of order `id`: two or three items.
#[must_use]
pub fn initial(id: &str) -> Shop {
    let n = 2 + usize::from(cancels(&format!("{id}/n")));
    Shop::Start {
        order: id.to_owned(),
        items: (0..n).map(|i| format!("sku-{i}")).collect(),
    }
}

/// The run id of order `i`.
#[must_use]
pub fn run_id(i: u64) -> String {
    format!("order-{i:06}")
}

const _: fn() = || {
    fn is_agent<A: Agent>() {}
    is_agent::<Shop>();
};
