//! The flow-control role of the in-memory store: the buckets under the store's one lock.

use std::time::Duration;

use async_trait::async_trait;

use super::MemoryStore;
use crate::store::{Bucket, LimitState, LimitStore, Millis, RateLimit, StoreError};

#[async_trait]
impl LimitStore for MemoryStore {
    async fn define_limit(&self, limit: &RateLimit, now: Millis) -> Result<(), StoreError> {
        limit.validate()?;
        let full = Bucket::full(limit, now);
        let mut g = self.lock();
        let bucket = g.limits.entry(limit.name()).or_insert(full);
        bucket.rate = full.rate;
        bucket.burst = full.burst;
        bucket.level = bucket.level.min(full.burst);
        Ok(())
    }

    async fn take_capacity(
        &self,
        name: &str,
        amount: u64,
        now: Millis,
    ) -> Result<Option<Duration>, StoreError> {
        let mut g = self.lock();
        Ok(g.limits.get_mut(name).map(|bucket| {
            #[allow(clippy::cast_precision_loss)] // whole units far below 2^52
            let amount = amount as f64;
            *bucket = bucket.take(amount, now);
            bucket.wait_at(now)
        }))
    }

    async fn pause_limit(&self, name: &str, wait: Duration, now: Millis) -> Result<(), StoreError> {
        if let Some(bucket) = self.lock().limits.get_mut(name) {
            *bucket = bucket.pause(wait, now);
        }
        Ok(())
    }

    async fn limits(&self, now: Millis) -> Result<Vec<LimitState>, StoreError> {
        Ok((self.lock().limits.iter())
            .map(|(name, bucket)| LimitState::of(name.clone(), bucket, now))
            .collect())
    }
}
