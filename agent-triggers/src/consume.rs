//! The consume loop every broker shares: pull while there is room, decide, then
//! acknowledge, dead-letter or leave the message for redelivery; report the state.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use agent_core::store::{RunFilter, RunStatus};
use tokio::sync::watch;

use crate::trigger::{Decision, Message, Rejection, Trigger};

/// Where a trigger is, as its consumer last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerState {
    /// Reaching the broker (or subscribing) for the first time, or again after a loss.
    Connecting,
    /// Pulling and deciding on messages.
    Consuming,
    /// Not pulling: the agent has `in_flight` runs in flight, the bound is `bound`.
    Paused {
        /// Runs of the agent running, waiting or compensating.
        in_flight: u64,
        /// The configured bound.
        bound: u32,
    },
    /// The broker is out of reach since `since`; the consumer tries again with backoff.
    Disconnected {
        /// When it was first seen out of reach.
        since: SystemTime,
        /// The last error.
        error: String,
    },
    /// The store failed since `since` (messages stay unacknowledged, and are decided on
    /// again once it answers).
    StoreUnavailable {
        /// When it first failed.
        since: SystemTime,
        /// The last error.
        error: String,
    },
}

/// A broker failure, as a [`Broker`] reports it to the loop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// Connecting or subscribing has not finished yet: not an error worth reporting as a
    /// disconnection.
    #[error("connecting: {0}")]
    Connecting(String),
    /// The broker is out of reach or refused an operation.
    #[error("{0}")]
    Lost(String),
}

/// A message source as the consume loop sees it: NATS JetStream (module `nats`), MQTT
/// (module `mqtt`), or a stand-in in tests. A source reconnects by itself; the loop
/// calls [`receive`](Self::receive) again after a [`BrokerError`], with backoff.
pub trait Broker: Send {
    /// A delivered message and what acknowledging it needs.
    type Delivery: Send;

    /// Up to `max` messages; may return none after a short wait.
    fn receive(
        &mut self,
        max: usize,
    ) -> impl Future<Output = Result<Vec<Self::Delivery>, BrokerError>> + Send;

    /// The message inside a delivery.
    fn message<'a>(&self, delivery: &'a Self::Delivery) -> Message<'a>;

    /// Acknowledge: the broker will not deliver it again.
    fn ack(
        &mut self,
        delivery: &Self::Delivery,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Publish the message with the rejection to the dead-letter destination; the loop
    /// acknowledges it after this returns `Ok`.
    fn dead_letter(
        &mut self,
        trigger: &str,
        delivery: &Self::Delivery,
        rejection: &Rejection,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;
}

/// Decides whether the consumer dies just before acknowledging a message: the fault tests
/// use it to show that a message whose run committed but whose ack was lost is redelivered
/// and starts no second run. Production code uses [`NoAckFaults`].
pub trait AckFaults: Send + Sync + fmt::Debug {
    /// `true` to stop the consumer here, the message unacknowledged.
    fn crash_before_ack(&self, decision: &Decision) -> bool;
}

/// Never crashes.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAckFaults;

impl AckFaults for NoAckFaults {
    fn crash_before_ack(&self, _: &Decision) -> bool {
        false
    }
}

/// Why a consumer stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// An [`AckFaults`] hook stopped it before an acknowledgement (tests only).
    #[error("trigger `{0}` crashed before acknowledging a message (fault injected)")]
    Crashed(String),
}

/// Counters of what a trigger decided since it started.
#[derive(Debug, Default)]
pub struct TriggerStats {
    started: AtomicU64,
    signalled: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
}

impl TriggerStats {
    /// Runs started.
    #[must_use]
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Signals sent.
    #[must_use]
    pub fn signalled(&self) -> u64 {
        self.signalled.load(Ordering::Relaxed)
    }

    /// Messages whose run existed already, or whose signal was stored already.
    #[must_use]
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Messages sent to the dead-letter destination.
    #[must_use]
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

/// What to watch a consumer by: its state and its counters. Cloning shares them.
#[derive(Clone, Debug)]
pub struct TriggerMonitor {
    state: watch::Receiver<TriggerState>,
    stats: Arc<TriggerStats>,
}

impl TriggerMonitor {
    /// The state now.
    #[must_use]
    pub fn state(&self) -> TriggerState {
        self.state.borrow().clone()
    }

    /// A receiver to wait on for changes of state.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<TriggerState> {
        self.state.clone()
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> &TriggerStats {
        &self.stats
    }
}

/// A trigger ready to consume: the loop's state and counters, watched through
/// [`monitor`](Self::monitor).
#[derive(Debug)]
pub struct Consumer {
    trigger: Trigger,
    state: watch::Sender<TriggerState>,
    stats: Arc<TriggerStats>,
    faults: Arc<dyn AckFaults>,
}

impl Consumer {
    /// A consumer for `trigger`, in state [`TriggerState::Connecting`].
    #[must_use]
    pub fn new(trigger: Trigger) -> Self {
        Self {
            trigger,
            state: watch::Sender::new(TriggerState::Connecting),
            stats: Arc::default(),
            faults: Arc::new(NoAckFaults),
        }
    }

    /// Inject crashes before acknowledgements (fault tests).
    #[must_use]
    pub fn with_ack_faults(mut self, faults: Arc<dyn AckFaults>) -> Self {
        self.faults = faults;
        self
    }

    /// Its state and counters, to read while it runs.
    #[must_use]
    pub fn monitor(&self) -> TriggerMonitor {
        TriggerMonitor {
            state: self.state.subscribe(),
            stats: Arc::clone(&self.stats),
        }
    }

    /// Consume `broker` until the task is dropped: pull while the agent has room, decide
    /// on each message, acknowledge it once its run is committed (or its rejection
    /// published to the dead-letter destination). A message whose decision failed (the
    /// store) is not acknowledged and is decided on again; a lost broker is reached again
    /// with backoff. Nothing is acknowledged that was not committed.
    ///
    /// # Errors
    /// [`ConsumeError::Crashed`] when an [`AckFaults`] hook stops it; it runs otherwise.
    pub async fn consume<B: Broker>(&self, mut broker: B) -> Result<(), ConsumeError> {
        let mut backoff = Backoff::new(self.trigger.max_backoff);
        loop {
            let Some(room) = self.room().await else {
                tokio::time::sleep(self.trigger.backpressure_poll).await;
                continue;
            };
            let deliveries = match broker.receive(room.min(self.trigger.batch.get())).await {
                Ok(deliveries) => deliveries,
                Err(e) => {
                    self.lost(&e);
                    tokio::time::sleep(backoff.next()).await;
                    continue;
                }
            };
            backoff.reset();
            self.set(TriggerState::Consuming);
            for delivery in deliveries {
                if !self.handle(&mut broker, &delivery, &mut backoff).await? {
                    // The broker went away mid-batch: the rest is redelivered.
                    break;
                }
            }
        }
    }

    /// How many messages may be pulled now, or `None` (and the state says why) when the
    /// agent is at its bound or the store cannot count.
    async fn room(&self) -> Option<usize> {
        let Some(bound) = self.trigger.max_in_flight else {
            return Some(usize::MAX);
        };
        let filter = RunFilter {
            agent: Some(self.trigger.agent().to_owned()),
            statuses: vec![
                RunStatus::Running,
                RunStatus::Waiting,
                RunStatus::Compensating,
            ],
            ..RunFilter::default()
        };
        let in_flight = match self.trigger.store.count_runs(&filter).await {
            Ok(counts) => counts.iter().map(|(_, n)| n).sum::<u64>(),
            Err(e) => {
                self.store_failed(&e.to_string());
                return None;
            }
        };
        let bound_wide = u64::from(bound.get());
        if in_flight >= bound_wide {
            self.set(TriggerState::Paused {
                in_flight,
                bound: bound.get(),
            });
            return None;
        }
        Some(usize::try_from(bound_wide - in_flight).unwrap_or(usize::MAX))
    }

    /// Decide on one delivery and settle it with the broker. `Ok(false)` when the broker
    /// went away (the delivery stays unacknowledged).
    async fn handle<B: Broker>(
        &self,
        broker: &mut B,
        delivery: &B::Delivery,
        backoff: &mut Backoff,
    ) -> Result<bool, ConsumeError> {
        let decision = loop {
            match self.trigger.decide(&broker.message(delivery)).await {
                Ok(decision) => break decision,
                // Retried here rather than left to redelivery: MQTT redelivers only after
                // a reconnection, and the store being down is no reason to drop the broker.
                Err(e) => {
                    self.store_failed(&e.source.to_string());
                    tokio::time::sleep(backoff.next()).await;
                }
            }
        };
        backoff.reset();
        self.set(TriggerState::Consuming);
        if self.faults.crash_before_ack(&decision) {
            return Err(ConsumeError::Crashed(self.trigger.name.clone()));
        }
        let origin = broker.message(delivery).origin.to_owned();
        let settled = match &decision {
            Decision::Started(run) => {
                self.stats.started.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(trigger = %self.trigger.name, run = %run.id, %origin, "run started");
                broker.ack(delivery).await
            }
            Decision::Signalled {
                run_id,
                signal_id,
                duplicate: false,
            } => {
                self.stats.signalled.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(trigger = %self.trigger.name, run = %run_id, signal_id, %origin, "run signalled");
                broker.ack(delivery).await
            }
            Decision::Signalled {
                run_id,
                signal_id,
                duplicate: true,
            } => {
                self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(trigger = %self.trigger.name, run = %run_id, signal_id, %origin, "duplicate message, signalled before");
                broker.ack(delivery).await
            }
            Decision::Duplicate(run) => {
                self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(trigger = %self.trigger.name, run = %run.id, %origin, "duplicate message");
                broker.ack(delivery).await
            }
            Decision::Rejected(rejection) => {
                tracing::warn!(
                    trigger = %self.trigger.name, %origin, %rejection,
                    "message rejected, sent to the dead-letter destination"
                );
                match broker
                    .dead_letter(&self.trigger.name, delivery, rejection)
                    .await
                {
                    Ok(()) => {
                        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                        broker.ack(delivery).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match settled {
            Ok(()) => Ok(true),
            Err(e) => {
                // Not acknowledged: the broker delivers it again, and the run found
                // then is the one created now.
                self.lost(&e);
                Ok(false)
            }
        }
    }

    fn lost(&self, error: &BrokerError) {
        match error {
            BrokerError::Connecting(_) => self.set(TriggerState::Connecting),
            BrokerError::Lost(error) => self.failing(error, true),
        }
    }

    fn store_failed(&self, error: &str) {
        self.failing(error, false);
    }

    /// Enter `Disconnected` (or `StoreUnavailable`), keeping the time the failure started
    /// when it goes on.
    fn failing(&self, error: &str, disconnected: bool) {
        let since = match (&*self.state.borrow(), disconnected) {
            (TriggerState::Disconnected { since, .. }, true)
            | (TriggerState::StoreUnavailable { since, .. }, false) => *since,
            _ => SystemTime::now(),
        };
        tracing::warn!(trigger = %self.trigger.name, %error, "trigger failing");
        let error = error.to_owned();
        self.set(if disconnected {
            TriggerState::Disconnected { since, error }
        } else {
            TriggerState::StoreUnavailable { since, error }
        });
    }

    fn set(&self, state: TriggerState) {
        self.state.send_if_modified(|now| {
            let changed = *now != state;
            *now = state;
            changed
        });
    }
}

/// Waits that double from 100 ms up to a bound, back to the start after a success.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);

    pub(crate) fn new(max: Duration) -> Self {
        Self {
            next: Self::FIRST.min(max),
            max,
        }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST.min(self.max);
    }
}
