//! `attempts` tells the truth after a kill: a call with effects is journaled before each
//! attempt starts, so a worker killed during the call leaves a journal that counts every
//! request that may have reached the service.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{EntryKind, Store};
use durable_agents::tool::{RetryPolicy, ToolPolicy, kind};
use durable_agents::{Agent, Ctx, Execute, StepResult, Tool, ToolBox, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An amount to charge.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Amount {
    /// In cents.
    pub cents: u64,
}

/// A charge that fails the first request, hangs on the second (the worker is killed
/// there) and succeeds after.
#[derive(Clone, Debug, Default)]
pub struct Charge {
    requests: Arc<AtomicU32>,
}

impl Tool for Charge {
    const NAME: &'static str = "Charge";
    type Kind = kind::Write;
    type Input = Amount;
    type Output = String;
    fn policy() -> ToolPolicy {
        ToolPolicy {
            timeout: Duration::from_mins(1),
            retry: RetryPolicy {
                max_attempts: 5,
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(1),
                multiplier: 1.0,
                jitter: false,
            },
            cache: false,
            journal_with_commit: false,
        }
    }
}

impl Execute for Charge {
    async fn execute(&self, input: Amount, _: &ToolContext) -> Result<String, ToolError> {
        match self.requests.fetch_add(1, Ordering::SeqCst) + 1 {
            1 => Err(ToolError::retryable("503")),
            2 => std::future::pending().await,
            _ => Ok(format!("charged {}", input.cents)),
        }
    }
}

/// Pay, then done.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(write(Charge)))]
pub enum Pay {
    #[agent(initial, tools(Charge), to(Done))]
    Start { cents: u64 },
    #[agent(terminal)]
    Done,
}

/// The handlers.
#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl PayHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, pay::Start>,
        pay::Start { cents }: pay::Start,
    ) -> StepResult<pay::Start> {
        ctx.call::<Charge>(Amount { cents }).await?;
        Ok(ctx.to(pay::Done))
    }
}

#[tokio::test]
async fn a_kill_during_a_call_leaves_every_attempt_counted() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let charge = Charge::default();
    let requests = Arc::clone(&charge.requests);
    let config = RunnerConfig {
        lease_ttl: Duration::from_millis(300),
        ..RunnerConfig::default()
    };
    let runner =
        Runner::<Pay, _>::builder(Arc::clone(&store), Handlers, ToolBox::new().with(charge))
            .config(config)
            .build()
            .unwrap();
    runner.start("r1", Pay::Start { cents: 100 }).await.unwrap();
    // The kill: the worker's future is dropped while the second request is in flight.
    let killed = tokio::time::timeout(Duration::from_millis(500), runner.run("r1")).await;
    assert!(killed.is_err(), "the second request hangs until the kill");
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    let journal = store.journal("r1", None).await.unwrap();
    let call = journal.iter().find(|e| e.kind == EntryKind::Tool).unwrap();
    assert_eq!(
        call.attempts, 2,
        "two requests reached the service before the kill"
    );
    // Resumed once the lease expired: the third request succeeds, and the count goes on.
    tokio::time::sleep(Duration::from_millis(400)).await;
    runner.run("r1").await.unwrap();
    assert_eq!(requests.load(Ordering::SeqCst), 3);
    let journal = store.journal("r1", None).await.unwrap();
    let call = journal.iter().find(|e| e.kind == EntryKind::Tool).unwrap();
    assert_eq!(call.attempts, 3);
}
