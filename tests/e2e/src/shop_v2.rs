//! Version 2 of the battery's shop agent (issue 20): a paid order is shipped before it is
//! done. Version 1 ([`crate::shop::Shop`]) stays as it is; this one declares
//! `migrate_from(Shop, with = from_v1)`, and a worker running it claims runs of both
//! versions and moves each version 1 run across once, at its next step.
//!
//! ```text
//!   Start ──► Decide (route = llm) ──► Pay ──► Shipping (new) ──► Done { shipment }
//!                  │                    └──(on_error)──► Failed (compensate)
//!                  └──► Cancelled (compensate)
//! ```
//!
//! What makes the migration real: `Pay` now leads to the new `Shipping` state (a read, then a
//! write of the same [`Service`]), and `Done` carries the shipment, which version 1's `Done`
//! has not (`None`: those orders finished before shipping existed). Every other state keeps
//! its calls, so a step interrupted on version 1 and carried over by index replays them
//! rather than failing as nondeterministic.

use std::sync::Arc;

use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::Store;
use agent_core::tool::{Execute, Tool, ToolBox, ToolContext, ToolError, ToolPolicy, kind};
use agent_core::{Agent, Ctx, StepResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::service::Service;
use crate::shop::{
    Amount, Charge, Lookup, Release, Reserve, ScriptedShopRouter, Shop, Sku, effect, policy,
};

/// What to ship.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Parcel {
    /// The order's payment.
    pub payment_id: String,
}

/// A booked shipment.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Shipment {
    /// Its id.
    pub shipment_id: String,
}

/// Book the shipment of a paid order (write), new in version 2.
#[derive(Debug, Clone)]
pub struct Ship(pub Arc<Service>);

impl Tool for Ship {
    const NAME: &'static str = "Ship";
    const DESCRIPTION: &'static str = "Book the shipment of a paid order.";
    type Kind = kind::Write;
    type Input = Parcel;
    type Output = Shipment;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Ship {
    async fn execute(&self, input: Parcel, cx: &ToolContext) -> Result<Shipment, ToolError> {
        effect(&self.0, cx, Self::NAME, &input.payment_id).await?;
        Ok(Shipment {
            shipment_id: format!("ship:{}", cx.idempotency_key()),
        })
    }
}

/// The battery's agent, version 2 (same agent name as version 1: runs move across).
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    name = "Shop",
    version = 2,
    migrate_from(Shop, with = from_v1),
    tools(
        read(Lookup),
        write(Charge, Release, Ship),
        hybrid(Reserve(compensate = Release))
    ),
)]
pub enum ShopV2 {
    /// Price and reserve every item (as in version 1).
    #[agent(initial, tools(Lookup, Reserve), to(Decide))]
    Start {
        /// The order (the run's id).
        order: String,
        /// SKUs.
        items: Vec<String>,
    },
    /// The router looks a price up, then decides to pay or cancel (as in version 1).
    #[agent(route = llm, tools(Lookup), to(Pay, Cancelled))]
    Decide {
        /// The order.
        order: String,
        /// SKUs.
        items: Vec<String>,
        /// Held reservations.
        reservations: Vec<String>,
    },
    /// Charge (as in version 1), then ship.
    #[agent(tools(Charge), to(Shipping), on_error = Failed)]
    Pay {
        /// Total.
        cents: u64,
    },
    /// New: look the shipping rate up, then book the shipment.
    #[agent(tools(Lookup, Ship), to(Done))]
    Shipping {
        /// The payment.
        payment_id: String,
    },
    /// Paid (and shipped, for orders paid on version 2).
    #[agent(terminal)]
    Done {
        /// The payment.
        payment_id: String,
        /// The shipment; `None` for orders done before version 2.
        shipment: Option<String>,
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

/// Every version 1 state, mapped (exhaustive: a forgotten state does not compile). Each
/// keeps its name, so an interrupted step finds the same calls at the same indexes; a run
/// paid on version 1 but not yet done is shipped by version 2's `Pay`.
#[must_use]
pub fn from_v1(old: Shop) -> ShopV2 {
    match old {
        Shop::Start { order, items } => ShopV2::Start { order, items },
        Shop::Decide {
            order,
            items,
            reservations,
        } => ShopV2::Decide {
            order,
            items,
            reservations,
        },
        Shop::Pay { cents } => ShopV2::Pay { cents },
        Shop::Done { payment_id } => ShopV2::Done {
            payment_id,
            shipment: None,
        },
        Shop::Cancelled => ShopV2::Cancelled,
        Shop::Failed { reason } => ShopV2::Failed { reason },
    }
}

/// Version 2's handlers: version 1's steps, and the shipping.
#[derive(Debug, Clone, Copy, Default)]
pub struct BehaviourV2;

impl ShopV2Handlers for BehaviourV2 {
    async fn start(
        &self,
        ctx: Ctx<'_, shop_v2::Start>,
        shop_v2::Start { order, items }: shop_v2::Start,
    ) -> StepResult<shop_v2::Start> {
        let mut reservations = Vec::new();
        for sku in &items {
            ctx.call::<Lookup>(Sku { sku: sku.clone() }).await?;
            let r = ctx.call::<Reserve>(Sku { sku: sku.clone() }).await?;
            reservations.push(r.reservation);
        }
        Ok(ctx.to(shop_v2::Decide {
            order,
            items,
            reservations,
        }))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, shop_v2::Decide>,
        route: shop_v2::DecideRoute,
        shop_v2::Decide { items, .. }: shop_v2::Decide,
    ) -> StepResult<shop_v2::Decide> {
        Ok(match route {
            shop_v2::DecideRoute::Pay => ctx.to(shop_v2::Pay {
                cents: 100 * items.len() as u64,
            }),
            shop_v2::DecideRoute::Cancelled => ctx.to(shop_v2::Cancelled),
        })
    }

    async fn pay(
        &self,
        ctx: Ctx<'_, shop_v2::Pay>,
        shop_v2::Pay { cents }: shop_v2::Pay,
    ) -> StepResult<shop_v2::Pay> {
        let payment = ctx.call::<Charge>(Amount { cents }).await?;
        Ok(ctx.to(shop_v2::Shipping {
            payment_id: payment.payment_id,
        }))
    }

    async fn shipping(
        &self,
        ctx: Ctx<'_, shop_v2::Shipping>,
        shop_v2::Shipping { payment_id }: shop_v2::Shipping,
    ) -> StepResult<shop_v2::Shipping> {
        ctx.call::<Lookup>(Sku {
            sku: "shipping".into(),
        })
        .await?;
        let shipment = ctx
            .call::<Ship>(Parcel {
                payment_id: payment_id.clone(),
            })
            .await?;
        Ok(ctx.to(shop_v2::Done {
            payment_id,
            shipment: Some(shipment.shipment_id),
        }))
    }
}

/// Version 2's tool box acting on `svc`: version 1's tools and [`Ship`].
#[must_use]
pub fn tools(svc: &Arc<Service>) -> ToolBox {
    crate::shop::tools(svc).with(Ship(Arc::clone(svc)))
}

/// A runner of version 2 over `store`, with the service's tools and version 1's router.
///
/// # Panics
/// Never for this agent (the tool box matches the graph).
#[must_use]
pub fn runner(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    config: RunnerConfig,
) -> Runner<ShopV2, BehaviourV2> {
    Runner::builder(store, BehaviourV2, tools(svc))
        .router(Arc::new(ScriptedShopRouter::new(Arc::clone(svc))))
        .config(config)
        .build()
        .expect("the tool box matches the graph")
}

const _: fn() = || {
    fn is_agent<A: Agent>() {}
    is_agent::<ShopV2>();
};
