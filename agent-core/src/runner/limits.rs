//! Rate limits at the step: before each new ask and each tool call, the step takes its turn
//! under the limits that apply ([`LimitStore`](crate::store::LimitStore)), shared by every
//! worker of the store.
//!
//! A turn that comes within [`capacity_wait_in_place`](super::RunnerConfig) is waited for
//! in the worker. A later one hands the run back until then
//! ([`RunStore::defer_run`](crate::store::RunStore::defer_run)): the step stops without
//! committing, the run holds no worker, and whoever claims it at its turn replays the
//! step's journal up to the ask or call and makes it without taking again (the turn was
//! taken before the run was handed back). Only the claim right after the hand-back does: the
//! stored wait names the epoch of the lease that handed the run back, and a later claim (its
//! predecessor crashed, perhaps after asking under the turn) takes a turn of its own. A crash
//! between the take and the hand-back, or after it, wastes one turn; none is used twice.
//!
//! A step woken from a wait (a signal, a timer) keeps its worker and waits in place: its
//! run's `wake_at` and `waiting_for` say what it waits for, and handing it back would lose
//! that.

use std::time::Duration;

use tracing::warn;

use super::Inner;
use super::cx::StepCx;
use crate::agent::StepError;
use crate::store::{LimitScope, Millis, RateLimit, RunStatus, StoreError, WaitingFor, now_ms};

/// What a step is about to do, for the limits that apply to it.
pub(crate) enum Turn<'a> {
    /// Ask the model a router names ([`Router::limit_key`](crate::router::Router::limit_key)).
    Ask(&'a str),
    /// Call the tool of this name.
    Call(&'a str),
}

impl Inner {
    /// The configured limits that apply to `turn`, by stored name, with what each takes:
    /// an ask takes one ask and waits while its model's tokens are over (takes 0).
    fn limits_of(&self, turn: &Turn<'_>) -> Vec<(String, u64)> {
        (self.config.rate_limits.iter())
            .filter_map(|limit| {
                let amount = match (&limit.scope, turn) {
                    (LimitScope::Asks(m), Turn::Ask(key)) if m == key => 1,
                    (LimitScope::Tokens(m), Turn::Ask(key)) if m == key => 0,
                    (LimitScope::ToolCalls(t), Turn::Call(tool)) if t == tool => 1,
                    _ => return None,
                };
                Some((limit.name(), amount))
            })
            .collect()
    }

    /// Declare the configured limits in the store, once per runner.
    async fn declare_limits(&self) -> Result<(), StoreError> {
        self.limits_declared
            .get_or_try_init(|| async {
                let now = now_ms();
                for limit in &self.config.rate_limits {
                    self.store.define_limit(limit, now).await?;
                }
                Ok::<_, StoreError>(())
            })
            .await
            .map(|&()| ())
    }

    /// The configured limit of `scope`'s name, if any.
    fn limit_named(&self, scope: &LimitScope) -> Option<String> {
        (self.config.rate_limits.iter())
            .find(|l| l.scope == *scope)
            .map(RateLimit::name)
    }

    /// Whether the asks to the model `key` are rate limited.
    pub(crate) fn limits_asks_of(&self, key: &str) -> bool {
        self.limit_named(&LimitScope::Asks(key.to_owned()))
            .is_some()
    }

    /// Charge `tokens` to the token limit of the model `key`, after its answer: the asks
    /// after it wait while the tokens are over. A failure is logged, not fatal: the answer
    /// is journaled, and a missed charge only lets the next ask come sooner.
    pub(crate) async fn charge_tokens(&self, key: &str, tokens: u64) {
        let Some(name) = self.limit_named(&LimitScope::Tokens(key.to_owned())) else {
            return;
        };
        let charged = async {
            self.declare_limits().await?;
            (self.store.take_capacity(&name, tokens, now_ms()).await).map(|_| ())
        };
        if let Err(e) = charged.await {
            warn!(error = %e, limit = %name, "could not charge an answer's tokens");
        }
    }

    /// Pause the ask limit of the model `key` for `wait`, for every worker (the provider
    /// answered 429 and asked to wait that long). A failure is logged: the re-ask then
    /// comes at the limit's pace, and a 429 again pauses it.
    pub(crate) async fn pause_asks(&self, key: &str, wait: Duration) {
        let Some(name) = self.limit_named(&LimitScope::Asks(key.to_owned())) else {
            return;
        };
        let paused = async {
            self.declare_limits().await?;
            self.store.pause_limit(&name, wait, now_ms()).await
        };
        if let Err(e) = paused.await {
            warn!(error = %e, limit = %name, "could not pause a rate limit");
        }
    }
}

impl StepCx<'_> {
    /// Take the step's turn under the rate limits that apply to `turn`, and wait for it:
    /// in the worker when it is close, else by handing the run back until then (the step
    /// stops with an error its handler cannot swallow, and ends as deferred).
    ///
    /// # Errors
    /// [`StepError::Interrupted`] when the run was handed back, or when the store failed
    /// (the step then stops without committing, as on any store error).
    pub(crate) async fn take_turn(&self, turn: Turn<'_>) -> Result<(), StepError> {
        let limits = self.inner.limits_of(&turn);
        if limits.is_empty() {
            return Ok(());
        }
        // The run was handed back for this turn, which it took then: it is its turn now.
        if self.take_reserved(limits.iter().map(|(name, _)| name.as_str())) {
            return Ok(());
        }
        let store_error = |e: StoreError| {
            let why = format!("the store failed taking a turn under the rate limits: {e}");
            self.set_fatal(e.into());
            StepError::Interrupted(why)
        };
        self.inner.declare_limits().await.map_err(store_error)?;
        let now = now_ms();
        let mut longest: Option<(Duration, &str)> = None;
        for (name, amount) in &limits {
            let wait = (self.inner.store.take_capacity(name, *amount, now))
                .await
                .map_err(store_error)?
                .unwrap_or_default();
            crate::metrics::capacity_wait(&self.inner.graph.agent, name, wait);
            if longest.is_none_or(|(w, _)| wait > w) {
                longest = Some((wait, name));
            }
        }
        let Some((wait, name)) = longest else {
            return Ok(());
        };
        if wait.is_zero() {
            return Ok(());
        }
        if wait <= self.inner.config.capacity_wait_in_place || self.run.status != RunStatus::Running
        {
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        let until: Millis = now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX));
        self.defer_until(until, WaitingFor::capacity(name, self.lease().epoch));
        Err(StepError::Interrupted(format!(
            "waiting {} ms for room under the rate limit `{name}`",
            wait.as_millis()
        )))
    }
}
