//! The agents the runner checks execute. [`Order`]: a read, a write and a hybrid tool, an
//! LLM-routed state with a scripted router, an `on_error` path into a compensating state,
//! and a wait. [`Fanout`]: one step of parallel hybrid calls, with an `on_error` path into a
//! compensating state. [`Batch`]: a parent that starts one [`Fanout`] child per order and
//! joins them (all, or the first), with a read before and a write after the join.
//!
//! The tools act on a recording fake [`World`] that honours idempotency keys and counts
//! every effect by key and every execution, so a check can prove "applied exactly once".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use agent_core::router::{RouterReply, ScriptedRouter};
use agent_core::tool::{
    Compensate, Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError, ToolPolicy, kind,
};
use agent_core::{Agent, ChildOutcome, Ctx, StepResult, Wake};

/// The world the fixture's tools change: every effect recorded by idempotency key.
#[derive(Debug, Default)]
pub struct World {
    inner: Mutex<WorldState>,
}

/// What the world saw.
#[derive(Debug, Default, Clone)]
pub struct WorldState {
    /// Effects applied, in order: (tool, idempotency key). A key appears once at most when
    /// the runner honours the contract.
    pub applied: Vec<(String, String)>,
    /// Executions per key, including repeats the key deduplicated.
    pub executions: BTreeMap<String, u32>,
    /// Read tool executions.
    pub reads: u32,
    /// Results by key, returned again for a repeated key.
    results: BTreeMap<String, serde_json::Value>,
    /// Reservations made, in order.
    pub reserved: Vec<String>,
    /// Reservations currently held.
    pub held: Vec<String>,
    /// Reservations released, in order.
    pub released: Vec<String>,
    /// Make every charge fail permanently.
    pub fail_charges: bool,
    /// Make the next N charge attempts time out.
    pub charge_timeouts: u32,
    /// Make every reservation of this SKU fail permanently.
    pub fail_reserve_of: Option<String>,
    next_id: u32,
}

impl World {
    /// A snapshot of what happened.
    #[must_use]
    pub fn state(&self) -> WorldState {
        self.lock().clone()
    }

    /// Change the world's behaviour.
    pub fn configure(&self, f: impl FnOnce(&mut WorldState)) {
        f(&mut self.lock());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WorldState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Apply an effect once per key; a repeated key returns the first result.
    fn effect(
        &self,
        tool: &str,
        key: &str,
        apply: impl FnOnce(&mut WorldState) -> serde_json::Value,
    ) -> serde_json::Value {
        let mut w = self.lock();
        *w.executions.entry(key.to_owned()).or_default() += 1;
        if let Some(v) = w.results.get(key) {
            return v.clone();
        }
        let v = apply(&mut w);
        w.applied.push((tool.to_owned(), key.to_owned()));
        w.results.insert(key.to_owned(), v.clone());
        v
    }
}

/// The payload of the `confirm` signal: the customer's answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Confirmation {
    /// The customer confirms the order.
    pub ok: bool,
    /// What the customer said, if anything.
    #[serde(default)]
    pub note: Option<String>,
}

/// The input of the fixture's tools that act on one item: its SKU.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Sku {
    /// Its code.
    pub sku: String,
}

/// A price.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Price {
    /// The SKU.
    pub sku: String,
    /// Cents.
    pub cents: u64,
}

/// A reservation.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Reservation {
    /// Its id.
    pub reservation: String,
}

/// A charge.
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
pub struct Lookup(pub Arc<World>);
/// Reserve stock (hybrid, undone by [`Release`]).
#[derive(Debug, Clone)]
pub struct Reserve(pub Arc<World>);
/// Release a reservation (write).
#[derive(Debug, Clone)]
pub struct Release(pub Arc<World>);
/// Charge the customer (write).
#[derive(Debug, Clone)]
pub struct Charge(pub Arc<World>);

fn fast_policy() -> ToolPolicy {
    ToolPolicy {
        timeout: Duration::from_millis(200),
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            multiplier: 2.0,
            jitter: true,
        },
        cache: true,
        journal_with_commit: false,
    }
}

impl Tool for Lookup {
    const NAME: &'static str = "Lookup";
    const DESCRIPTION: &'static str = "Look up the price of a SKU.";
    type Kind = kind::Read;
    type Input = Sku;
    type Output = Price;
    fn policy() -> ToolPolicy {
        fast_policy()
    }
}

impl Execute for Lookup {
    async fn execute(&self, input: Sku, _: &ToolContext) -> Result<Price, ToolError> {
        self.0.lock().reads += 1;
        Ok(Price {
            cents: 100 * (input.sku.len() as u64),
            sku: input.sku,
        })
    }
}

impl Tool for Reserve {
    const NAME: &'static str = "Reserve";
    type Kind = kind::Hybrid;
    type Input = Sku;
    type Output = Reservation;
    fn policy() -> ToolPolicy {
        fast_policy()
    }
}

impl Execute for Reserve {
    async fn execute(&self, input: Sku, cx: &ToolContext) -> Result<Reservation, ToolError> {
        if self.0.lock().fail_reserve_of.as_deref() == Some(input.sku.as_str()) {
            return Err(ToolError::permanent(format!(
                "{} is out of stock",
                input.sku
            )));
        }
        let v = self.0.effect("Reserve", cx.idempotency_key(), |w| {
            w.next_id += 1;
            let id = format!("res-{}-{}", input.sku, w.next_id);
            w.held.push(id.clone());
            w.reserved.push(id.clone());
            serde_json::json!({ "reservation": id })
        });
        serde_json::from_value(v).map_err(|e| ToolError::permanent(e.to_string()))
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
    type Kind = kind::Write;
    type Input = Reservation;
    type Output = ();
    fn policy() -> ToolPolicy {
        fast_policy()
    }
}

impl Execute for Release {
    async fn execute(&self, input: Reservation, cx: &ToolContext) -> Result<(), ToolError> {
        self.0.effect("Release", cx.idempotency_key(), |w| {
            w.held.retain(|r| r != &input.reservation);
            w.released.push(input.reservation.clone());
            serde_json::Value::Null
        });
        Ok(())
    }
}

impl Tool for Charge {
    const NAME: &'static str = "Charge";
    type Kind = kind::Write;
    type Input = Amount;
    type Output = Payment;
    fn policy() -> ToolPolicy {
        fast_policy()
    }
}

impl Execute for Charge {
    async fn execute(&self, input: Amount, cx: &ToolContext) -> Result<Payment, ToolError> {
        let (fail, hang) = {
            let mut w = self.0.lock();
            let hang = w.charge_timeouts > 0;
            if hang {
                w.charge_timeouts -= 1;
            }
            (w.fail_charges, hang)
        };
        if hang {
            // Longer than the policy's timeout: the runner retries with the same key.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        if fail {
            return Err(ToolError::permanent("card declined"));
        }
        let v = self.0.effect("Charge", cx.idempotency_key(), |w| {
            w.next_id += 1;
            serde_json::json!({ "payment_id": format!("pay-{}-{}", input.cents, w.next_id) })
        });
        serde_json::from_value(v).map_err(|e| ToolError::permanent(e.to_string()))
    }
}

/// The fixture agent.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(
    crate = ::agent_core,
    tools(read(Lookup), write(Charge, Release), hybrid(Reserve(compensate = Release))),
)]
pub enum Order {
    /// Price and reserve every item.
    #[agent(initial, tools(Lookup, Reserve), to(Decide))]
    Start {
        /// SKUs.
        items: Vec<String>,
    },
    /// The router looks a price up, then decides.
    #[agent(route = llm, tools(Lookup), to(Pay, Cancelled))]
    Decide {
        /// SKUs.
        items: Vec<String>,
        /// Held reservations.
        reservations: Vec<String>,
    },
    /// Charge; a declined card takes the error path.
    #[agent(tools(Charge), to(Confirm), on_error = Failed)]
    Pay {
        /// Total.
        cents: u64,
    },
    /// Wait for the customer's confirmation.
    #[agent(wait = "confirm", wait_payload = Confirmation, to(Done, Failed))]
    Confirm {
        /// The payment.
        payment_id: String,
    },
    /// Paid and confirmed.
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

/// The fixture's handlers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour;

impl OrderHandlers for Behaviour {
    async fn start(
        &self,
        ctx: Ctx<'_, order::Start>,
        order::Start { items }: order::Start,
    ) -> StepResult<order::Start> {
        let mut reservations = Vec::new();
        for sku in &items {
            ctx.call::<Lookup>(Sku { sku: sku.clone() }).await?;
            let r = ctx.call::<Reserve>(Sku { sku: sku.clone() }).await?;
            reservations.push(r.reservation);
        }
        Ok(ctx.to(order::Decide {
            items,
            reservations,
        }))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, order::Decide>,
        route: order::DecideRoute,
        order::Decide { items, .. }: order::Decide,
    ) -> StepResult<order::Decide> {
        Ok(match route {
            order::DecideRoute::Pay => ctx.to(order::Pay {
                cents: 100 * items.len() as u64,
            }),
            order::DecideRoute::Cancelled => ctx.to(order::Cancelled),
        })
    }

    async fn pay(
        &self,
        ctx: Ctx<'_, order::Pay>,
        order::Pay { cents }: order::Pay,
    ) -> StepResult<order::Pay> {
        let payment = ctx.call::<Charge>(Amount { cents }).await?;
        Ok(ctx.to(order::Confirm {
            payment_id: payment.payment_id,
        }))
    }

    async fn confirm(
        &self,
        ctx: Ctx<'_, order::Confirm>,
        wake: Wake,
        order::Confirm { payment_id }: order::Confirm,
    ) -> StepResult<order::Confirm> {
        Ok(match wake {
            Wake::Signal(_) => ctx.to(order::Done { payment_id }),
            Wake::TimedOut => ctx.to(order::Failed {
                reason: "not confirmed".to_owned(),
            }),
        })
    }
}

/// The second fixture agent: one step reserves every item with parallel calls
/// ([`Ctx::call_each`]); a failed reservation takes the error path, whose compensations
/// release the reservations that completed.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(crate = ::agent_core, tools(write(Release), hybrid(Reserve(compensate = Release))))]
pub enum Fanout {
    /// Reserve every item at once.
    #[agent(initial, tools(Reserve), to(Reserved), on_error = Unavailable)]
    Reserving {
        /// SKUs.
        items: Vec<String>,
    },
    /// Every item is reserved.
    #[agent(terminal)]
    Reserved {
        /// The reservations, in the order of the items.
        reservations: Vec<String>,
    },
    /// An item could not be reserved: the others are released.
    #[agent(terminal, compensate)]
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// The handlers of [`Fanout`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FanoutBehaviour;

impl FanoutHandlers for FanoutBehaviour {
    async fn reserving(
        &self,
        ctx: Ctx<'_, fanout::Reserving>,
        fanout::Reserving { items }: fanout::Reserving,
    ) -> StepResult<fanout::Reserving> {
        let skus = items.iter().map(|sku| Sku { sku: sku.clone() });
        let mut reservations = Vec::with_capacity(items.len());
        for r in ctx.call_each::<Reserve>(skus, items.len()).await {
            reservations.push(r?.reservation);
        }
        Ok(ctx.to(fanout::Reserved { reservations }))
    }
}

/// The third fixture agent, a parent: it looks a price up, starts one [`Fanout`] child per
/// order and waits for all of them (or for the first to complete), then charges once.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(crate = ::agent_core, tools(read(Lookup), write(Charge)))]
pub enum Batch {
    /// Start the children and join them.
    #[agent(initial, tools(Lookup, Charge), children(Fanout), to(Settled, Short))]
    Splitting {
        /// One child per order, each reserving its items.
        orders: Vec<Vec<String>>,
        /// Wait for the first child to complete instead of all of them.
        first: bool,
    },
    /// Every child joined completed (or, with `first`, the first one did); charged once.
    #[agent(terminal)]
    Settled {
        /// The completed children's reservations, in the order of their orders.
        reservations: Vec<Vec<String>>,
        /// The charge.
        payment_id: String,
    },
    /// A child did not complete.
    #[agent(terminal)]
    Short {
        /// The children that did not complete, and how they ended.
        failed: Vec<String>,
    },
}

/// The handlers of [`Batch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchBehaviour;

impl BatchHandlers for BatchBehaviour {
    async fn splitting(
        &self,
        ctx: Ctx<'_, batch::Splitting>,
        batch::Splitting { orders, first }: batch::Splitting,
    ) -> StepResult<batch::Splitting> {
        let sku = orders.iter().flatten().next().cloned().unwrap_or_default();
        ctx.call::<Lookup>(Sku { sku }).await?;
        let children = orders.into_iter().map(|items| Fanout::Reserving { items });
        let joined = if first {
            vec![ctx.spawn_first::<Fanout>(children).await?]
        } else {
            ctx.spawn_all::<Fanout>(children).await?
        };
        let mut reservations = Vec::new();
        let mut failed = Vec::new();
        for child in joined {
            match child.outcome {
                ChildOutcome::Completed(Fanout::Reserved { reservations: r }) => {
                    reservations.push(r);
                }
                ChildOutcome::Completed(other) => {
                    failed.push(format!("{}: ended in {}", child.run_id, other.state_name()));
                }
                ChildOutcome::Ended { status, error } => {
                    failed.push(format!("{}: {status} ({})", child.run_id, error.code));
                }
            }
        }
        if !failed.is_empty() {
            return Ok(ctx.to(batch::Short { failed }));
        }
        let cents = 100 * reservations.iter().map(Vec::len).sum::<usize>() as u64;
        let payment = ctx.call::<Charge>(Amount { cents }).await?;
        Ok(ctx.to(batch::Settled {
            reservations,
            payment_id: payment.payment_id,
        }))
    }
}

/// The tool box acting on `world`.
#[must_use]
pub fn tools(world: &Arc<World>) -> ToolBox {
    ToolBox::new()
        .with(Lookup(Arc::clone(world)))
        .with(Charge(Arc::clone(world)))
        .with(Release(Arc::clone(world)))
        .hybrid(Reserve(Arc::clone(world)))
}

/// A scripted router (a stand-in for a model): looks the first item up, then picks
/// `choice` (`Pay` or `Cancelled`).
#[must_use]
pub fn router(choice: &'static str) -> ScriptedRouter {
    ScriptedRouter::from_fn(move |req| -> RouterReply {
        if req.tool_results.iter().any(|r| r.tool == "Lookup") {
            ScriptedRouter::choose(choice, "{}")
        } else {
            ScriptedRouter::choose("Lookup", r#"{"sku":"router-check"}"#)
        }
    })
}

/// The initial state of a fixture run.
#[must_use]
pub fn initial(items: &[&str]) -> Order {
    Order::Start {
        items: items.iter().map(|s| (*s).to_owned()).collect(),
    }
}
