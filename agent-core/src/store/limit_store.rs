//! The store's flow-control role ([`LimitStore`]): rate limits shared by every worker.

use std::time::Duration;

use async_trait::async_trait;

use super::{LimitState, Millis, RateLimit, StoreError};

/// Where rate limits are kept, as token buckets ([`Bucket`](super::Bucket)) every worker
/// process of the store draws from. Each change to a bucket is one atomic write (a row
/// update on the SQL stores), so that workers taking at once never grant more than the
/// limit between them.
///
/// Times are the caller's clock (`now`), as for schedules: the workers of one store are
/// expected to keep their clocks in step (NTP), and a skew shifts when units come, never
/// how many.
#[async_trait]
pub trait LimitStore: Send + Sync + std::fmt::Debug {
    /// Declare `limit`, or change the rate and burst of the one of its name. A new limit
    /// starts full; a changed one keeps what it held (capped at the new burst), so that
    /// workers declaring the same limits as they start do not refill it.
    async fn define_limit(&self, limit: &RateLimit, now: Millis) -> Result<(), StoreError>;

    /// Take `amount` units (asks, tokens, calls) of limit `name` at `now`: always granted, perhaps ahead; how long the
    /// taker waits before what it took is there (zero when it is there now). `None` when
    /// no limit of that name is declared: nothing is limited.
    async fn take_capacity(
        &self,
        name: &str,
        amount: u64,
        now: Millis,
    ) -> Result<Option<Duration>, StoreError>;

    /// Grant nothing of limit `name` for `wait` from `now` (a provider's 429 and its
    /// `Retry-After`), for every worker; a longer wait already there stands. Nothing
    /// happens when no limit of that name is declared.
    async fn pause_limit(&self, name: &str, wait: Duration, now: Millis) -> Result<(), StoreError>;

    /// Every declared limit, by name, as it stands at `now`.
    async fn limits(&self, now: Millis) -> Result<Vec<LimitState>, StoreError>;
}
