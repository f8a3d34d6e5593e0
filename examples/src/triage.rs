//! The support-triage agent: an LLM classifies a ticket; refunds above a threshold wait for
//! a person's approval.
//!
//! The approval is bound to the exact refund: the run waits for a signal whose payload
//! carries the SHA-256 of `(run id, order, amount)`. An approval for another refund, or one
//! captured on another run and replayed here, does not match and is refused; the run goes
//! on waiting. A waiting run lives in the store, not in memory: it survives restarts.

use std::sync::{Arc, Mutex};

use durable_agents::router::{RouterReply, ScriptedRouter};
use durable_agents::store::input_hash;
use durable_agents::{Ctx, Execute, Failure, StepResult, ToolBox, ToolContext, ToolError, Wake};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Refunds above this need a person's approval.
pub const APPROVAL_THRESHOLD_CENTS: u64 = 10_000;

/// A support ticket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ticket {
    /// Who wrote.
    pub customer: String,
    /// About which order.
    pub order_id: String,
    /// What they wrote.
    pub text: String,
}

/// An order, as the order service knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OrderInfo {
    /// The order.
    pub order_id: String,
    /// What was paid.
    pub paid_cents: u64,
}

/// A refund to issue, exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RefundRequest {
    /// The run that proposed it (part of the approval's binding).
    pub run_id: String,
    /// The order.
    pub order_id: String,
    /// The amount.
    pub amount_cents: u64,
}

impl RefundRequest {
    /// What an approval must name: SHA-256 of the refund's canonical JSON.
    #[must_use]
    pub fn binding(&self) -> String {
        input_hash(&serde_json::to_value(self).unwrap_or_default())
    }
}

/// The payload of an `approval` signal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    /// [`RefundRequest::binding`] of the refund approved.
    pub refund_hash: String,
    /// Who approved.
    pub approver: String,
    /// Approved or refused.
    pub approved: bool,
}

/// The triage agent.
#[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
#[agent(
    tools(read(LookupOrder), write(IssueRefund, SendReply)),
    max_steps = 30
)]
pub enum Triage {
    /// Look the order up.
    #[agent(initial, tools(LookupOrder), to(Classify))]
    Received {
        /// The ticket.
        ticket: Ticket,
    },
    /// The LLM decides: propose a refund, answer, or escalate to a person.
    #[agent(route = llm, to(ProposeRefund, Answer, Escalated))]
    Classify {
        /// The ticket.
        ticket: Ticket,
        /// The order.
        order: OrderInfo,
    },
    /// Small refunds go through; large ones wait for approval.
    #[agent(to(AwaitApproval, Refund))]
    ProposeRefund {
        /// The ticket.
        ticket: Ticket,
        /// The order.
        order: OrderInfo,
    },
    /// Wait for a person to approve this exact refund.
    #[agent(wait = "approval", wait_payload = Approval, to(Refund, Answer, AwaitApproval))]
    AwaitApproval {
        /// The ticket.
        ticket: Ticket,
        /// The refund waiting for approval.
        refund: RefundRequest,
    },
    /// Issue the refund (write, idempotency key).
    #[agent(tools(IssueRefund), to(Answer), on_error = Escalated)]
    Refund {
        /// The ticket.
        ticket: Ticket,
        /// The refund.
        refund: RefundRequest,
    },
    /// Reply to the customer.
    #[agent(tools(SendReply), to(Closed))]
    Answer {
        /// The ticket.
        ticket: Ticket,
        /// The reply.
        message: String,
    },
    /// Done.
    #[agent(terminal)]
    Closed,
    /// Handed to a person.
    #[agent(terminal)]
    Escalated {
        /// Why.
        reason: Failure,
    },
}

/// The order and payment services the tools call (a stand-in with an effect log).
#[derive(Debug, Default)]
pub struct Desk {
    /// Orders by id.
    pub orders: Mutex<Vec<OrderInfo>>,
    /// Refunds issued: (idempotency key, order, cents).
    pub refunds: Mutex<Vec<(String, String, u64)>>,
    /// Replies sent: (idempotency key, customer, text).
    pub replies: Mutex<Vec<(String, String, String)>>,
}

impl Desk {
    /// A desk knowing these orders.
    #[must_use]
    pub fn with_orders(orders: &[(&str, u64)]) -> Self {
        Self {
            orders: Mutex::new(
                orders
                    .iter()
                    .map(|(id, cents)| OrderInfo {
                        order_id: (*id).to_owned(),
                        paid_cents: *cents,
                    })
                    .collect(),
            ),
            ..Self::default()
        }
    }

    /// Refunds issued.
    #[must_use]
    pub fn refunds(&self) -> Vec<(String, String, u64)> {
        self.refunds.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// An order lookup.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct OrderId {
    /// The order.
    pub order_id: String,
}

/// A reply.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Reply {
    /// To whom.
    pub customer: String,
    /// What.
    pub text: String,
}

/// Look an order up.
#[derive(Debug, Clone, durable_agents::Tool)]
#[tool(kind = read, input = OrderId, output = OrderInfo)]
pub struct LookupOrder(pub Arc<Desk>);

/// Refund an order (exactly once per idempotency key).
#[derive(Debug, Clone, durable_agents::Tool)]
#[tool(kind = write, input = RefundRequest, output = (), retries = 5)]
pub struct IssueRefund(pub Arc<Desk>);

/// Email the customer.
#[derive(Debug, Clone, durable_agents::Tool)]
#[tool(kind = write, input = Reply, output = ())]
pub struct SendReply(pub Arc<Desk>);

impl Execute for LookupOrder {
    async fn execute(&self, input: OrderId, _: &ToolContext) -> Result<OrderInfo, ToolError> {
        let orders = self
            .0
            .orders
            .lock()
            .map_err(|_| ToolError::permanent("poisoned"))?;
        orders
            .iter()
            .find(|o| o.order_id == input.order_id)
            .cloned()
            .ok_or_else(|| ToolError::permanent(format!("no order `{}`", input.order_id)))
    }
}

impl Execute for IssueRefund {
    async fn execute(&self, input: RefundRequest, cx: &ToolContext) -> Result<(), ToolError> {
        let mut refunds = self
            .0
            .refunds
            .lock()
            .map_err(|_| ToolError::permanent("poisoned"))?;
        if !refunds.iter().any(|(k, ..)| k == cx.idempotency_key()) {
            refunds.push((
                cx.idempotency_key().to_owned(),
                input.order_id,
                input.amount_cents,
            ));
        }
        Ok(())
    }
}

impl Execute for SendReply {
    async fn execute(&self, input: Reply, cx: &ToolContext) -> Result<(), ToolError> {
        let mut replies = self
            .0
            .replies
            .lock()
            .map_err(|_| ToolError::permanent("poisoned"))?;
        if !replies.iter().any(|(k, ..)| k == cx.idempotency_key()) {
            replies.push((cx.idempotency_key().to_owned(), input.customer, input.text));
        }
        Ok(())
    }
}

/// The tools acting on `desk`.
#[must_use]
pub fn tools(desk: &Arc<Desk>) -> ToolBox {
    ToolBox::new()
        .with(LookupOrder(Arc::clone(desk)))
        .with(IssueRefund(Arc::clone(desk)))
        .with(SendReply(Arc::clone(desk)))
}

/// The triage behaviour.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handlers;

impl TriageHandlers for Handlers {
    async fn received(
        &self,
        ctx: Ctx<'_, triage::Received>,
        triage::Received { ticket }: triage::Received,
    ) -> StepResult<triage::Received> {
        let order = ctx
            .call::<LookupOrder>(OrderId {
                order_id: ticket.order_id.clone(),
            })
            .await?;
        Ok(ctx.to(triage::Classify { ticket, order }))
    }

    async fn classify(
        &self,
        ctx: Ctx<'_, triage::Classify>,
        route: triage::ClassifyRoute,
        triage::Classify { ticket, order }: triage::Classify,
    ) -> StepResult<triage::Classify> {
        Ok(match route {
            triage::ClassifyRoute::ProposeRefund => ctx.to(triage::ProposeRefund { ticket, order }),
            triage::ClassifyRoute::Answer => {
                let message = format!(
                    "Thanks {}, we are looking into order {}.",
                    ticket.customer, order.order_id
                );
                ctx.to(triage::Answer { ticket, message })
            }
            triage::ClassifyRoute::Escalated => ctx.to(triage::Escalated {
                reason: Failure {
                    state: "Classify".into(),
                    code: "escalated".into(),
                    message: "the router handed the ticket to a person".into(),
                },
            }),
        })
    }

    async fn propose_refund(
        &self,
        ctx: Ctx<'_, triage::ProposeRefund>,
        triage::ProposeRefund { ticket, order }: triage::ProposeRefund,
    ) -> StepResult<triage::ProposeRefund> {
        let refund = RefundRequest {
            run_id: ctx.run_id().to_owned(),
            order_id: order.order_id,
            amount_cents: order.paid_cents,
        };
        Ok(if refund.amount_cents > APPROVAL_THRESHOLD_CENTS {
            ctx.to(triage::AwaitApproval { ticket, refund })
        } else {
            ctx.to(triage::Refund { ticket, refund })
        })
    }

    async fn await_approval(
        &self,
        ctx: Ctx<'_, triage::AwaitApproval>,
        wake: Wake,
        triage::AwaitApproval { ticket, refund }: triage::AwaitApproval,
    ) -> StepResult<triage::AwaitApproval> {
        let approval: Approval = match wake.payload() {
            Ok(a) => a,
            // A malformed approval is refused like a mismatched one: wait again.
            Err(_) => return Ok(ctx.to(triage::AwaitApproval { ticket, refund })),
        };
        if approval.refund_hash != refund.binding() {
            // Approved something else (another amount, or another run's refund): refused.
            return Ok(ctx.to(triage::AwaitApproval { ticket, refund }));
        }
        Ok(if approval.approved {
            ctx.to(triage::Refund { ticket, refund })
        } else {
            let message = format!("Sorry {}, your refund was not approved.", ticket.customer);
            ctx.to(triage::Answer { ticket, message })
        })
    }

    async fn refund(
        &self,
        ctx: Ctx<'_, triage::Refund>,
        triage::Refund { ticket, refund }: triage::Refund,
    ) -> StepResult<triage::Refund> {
        ctx.call::<IssueRefund>(refund.clone()).await?;
        let message = format!(
            "{} cents refunded for order {}.",
            refund.amount_cents, refund.order_id
        );
        Ok(ctx.to(triage::Answer { ticket, message }))
    }

    async fn answer(
        &self,
        ctx: Ctx<'_, triage::Answer>,
        triage::Answer { ticket, message }: triage::Answer,
    ) -> StepResult<triage::Answer> {
        ctx.call::<SendReply>(Reply {
            customer: ticket.customer,
            text: message,
        })
        .await?;
        Ok(ctx.to(triage::Closed))
    }
}

/// An offline stand-in for an LLM (not a model): refunds for tickets asking for one,
/// answers otherwise.
#[must_use]
pub fn scripted_classifier() -> ScriptedRouter {
    ScriptedRouter::from_fn(|req| -> RouterReply {
        let text = req.state_data["Classify"]["ticket"]["text"]
            .as_str()
            .unwrap_or("")
            .to_lowercase();
        let mut reply = ScriptedRouter::choose(
            if text.contains("refund") {
                "ProposeRefund"
            } else {
                "Answer"
            },
            "{}",
        );
        "scripted-classifier (offline stand-in, not an LLM)".clone_into(&mut reply.model);
        reply
    })
}

/// An approval signal payload for `refund`.
#[must_use]
pub fn approve(refund: &RefundRequest, approver: &str) -> serde_json::Value {
    serde_json::to_value(Approval {
        refund_hash: refund.binding(),
        approver: approver.to_owned(),
        approved: true,
    })
    .unwrap_or_default()
}

/// The command a person runs to approve `refund` of the waiting run `run_id` by hand: the
/// approval payload, bound to this exact refund, sent as the `approval` signal with
/// `agentctl`.
#[must_use]
pub fn approval_command(run_id: &str, refund: &RefundRequest, approver: &str) -> String {
    format!(
        "cargo run --bin agentctl -- signal {run_id} approval '{}'",
        approve(refund, approver)
    )
}
