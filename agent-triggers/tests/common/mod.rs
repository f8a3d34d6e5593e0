//! What the trigger tests share: an order agent, waiting for a condition, and the real
//! brokers (`servers`).
// Each test binary uses what it needs of this module.
#![allow(dead_code)]

pub(crate) mod servers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_agents::prelude::*;
use durable_agents::store::HistoryStore;
use durable_agents::store::{RunFilter, RunRecord};

/// An agent started once per order message.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub(crate) enum Order {
    #[agent(initial, to(Done))]
    Received { order_id: String },
    #[agent(terminal)]
    Done { order_id: String },
}

pub(crate) struct Behaviour;

impl OrderHandlers for Behaviour {
    async fn received(
        &self,
        ctx: Ctx<'_, order::Received>,
        order::Received { order_id }: order::Received,
    ) -> StepResult<order::Received> {
        Ok(ctx.to(order::Done { order_id }))
    }
}

/// A runner of the order agent over `store`.
pub(crate) fn runner(store: Arc<dyn Store>) -> Arc<Runner<Order, Behaviour>> {
    Arc::new(
        Runner::<Order, _>::builder(store, Behaviour, durable_agents::tool::ToolBox::new())
            .build()
            .unwrap(),
    )
}

/// The body of an order message, as the agent's state.
pub(crate) fn order_state(order_id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "Received": { "order_id": order_id } })).unwrap()
}

/// Every run of the order agent.
pub(crate) async fn order_runs(store: &dyn HistoryStore) -> Vec<RunRecord> {
    store
        .list_runs(&RunFilter {
            agent: Some("Order".to_owned()),
            ..RunFilter::default()
        })
        .await
        .unwrap()
}

/// Poll `check` until it holds, for at most `within`; panic with `what` otherwise.
pub(crate) async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
