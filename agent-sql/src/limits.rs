//! The flow-control role ([`LimitStore`](agent_core::store::LimitStore)) written once over
//! the SQL stores: one row per rate limit, its bucket changed by one `UPDATE` each time, so
//! that the row's lock orders the workers that take at once. The statements compute what
//! [`Bucket`] computes; a store names its statement texts and invokes
//! [`impl_sql_limits!`](crate::impl_sql_limits).

use std::time::Duration;

use agent_core::store::{Bucket, LimitState, Millis, RateLimit, StoreError};

use crate::reads::{Arg, SqlReads};
use crate::rows::SqlRow;
use crate::to_i64;

/// The statements of the flow-control role, in a dialect. A limit's rate is `amount` per
/// `period_ms`; its `level` at `at` is what it held then, below zero when taken ahead.
pub trait SqlLimits: SqlReads {
    /// Declare limit `$1` of `$2` units per `$3` ms, burst `$4`, at `$5`: a new one full,
    /// a known one keeping its level (capped at the burst).
    const DEFINE_LIMIT: &'static str;
    /// Take `$2` units of limit `$1` at `$3`: the row after it, in the columns of
    /// [`LimitRow`](crate::rows::LimitRow).
    const TAKE_CAPACITY: &'static str;
    /// Hold limit `$1` empty for `$2` ms from `$3`, unless it is emptier.
    const PAUSE_LIMIT: &'static str;
    /// Every limit, by name, in the columns of [`LimitRow`](crate::rows::LimitRow).
    const LIMITS: &'static str;
}

fn bucket(row: &impl SqlRow) -> Result<(String, Bucket), StoreError> {
    let row = row
        .limit_row()
        .map_err(|e| StoreError::backend(format!("a rate limit row does not read: {e}")))?;
    Ok((
        row.name,
        Bucket {
            rate: row.rate,
            burst: row.burst,
            level: row.level,
            at: row.at,
        },
    ))
}

/// `LimitStore::define_limit`.
///
/// # Errors
/// [`StoreError::InvalidRateLimit`] for a limit that can never be met; the store's error.
pub async fn define_limit<S: SqlLimits>(
    store: &S,
    limit: &RateLimit,
    now: Millis,
) -> Result<(), StoreError> {
    limit.validate()?;
    let name = limit.name();
    let args = [
        Arg::Text(&name),
        Arg::Int(to_i64(limit.amount)),
        Arg::Int(to_i64(limit.period_ms)),
        Arg::Int(to_i64(limit.burst)),
        Arg::Int(now),
    ];
    store.fetch(S::DEFINE_LIMIT, &args).await?;
    Ok(())
}

/// `LimitStore::take_capacity`. Amounts are whole units (asks, tokens, calls).
///
/// # Errors
/// The store's error.
pub async fn take_capacity<S: SqlLimits>(
    store: &S,
    name: &str,
    amount: u64,
    now: Millis,
) -> Result<Option<Duration>, StoreError> {
    let args = [Arg::Text(name), Arg::Int(to_i64(amount)), Arg::Int(now)];
    let rows = store.fetch(S::TAKE_CAPACITY, &args).await?;
    rows.first()
        .map(|row| bucket(row).map(|(_, b)| b.wait_at(now)))
        .transpose()
}

/// `LimitStore::pause_limit`.
///
/// # Errors
/// The store's error.
pub async fn pause_limit<S: SqlLimits>(
    store: &S,
    name: &str,
    wait: Duration,
    now: Millis,
) -> Result<(), StoreError> {
    let wait = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    let args = [Arg::Text(name), Arg::Int(wait), Arg::Int(now)];
    store.fetch(S::PAUSE_LIMIT, &args).await?;
    Ok(())
}

/// `LimitStore::limits`.
///
/// # Errors
/// The store's error.
pub async fn limits<S: SqlLimits>(store: &S, now: Millis) -> Result<Vec<LimitState>, StoreError> {
    let rows = store.fetch(S::LIMITS, &[]).await?;
    rows.iter()
        .map(|row| bucket(row).map(|(name, b)| LimitState::of(name, &b, now)))
        .collect()
}

/// `impl SqlLimits` from the store's statement module `$sql`, and `impl LimitStore` over
/// [`crate::limits`]'s functions.
///
/// ```text
/// agent_sql::impl_sql_limits!(PgStore, limit_sql);
/// ```
#[macro_export]
macro_rules! impl_sql_limits {
    ($store:ty, $sql:ident) => {
        impl $crate::limits::SqlLimits for $store {
            const DEFINE_LIMIT: &'static str = $sql::DEFINE_LIMIT;
            const TAKE_CAPACITY: &'static str = $sql::TAKE_CAPACITY;
            const PAUSE_LIMIT: &'static str = $sql::PAUSE_LIMIT;
            const LIMITS: &'static str = $sql::LIMITS;
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::LimitStore for $store {
            async fn define_limit(
                &self,
                limit: &$crate::__private::RateLimit,
                now: $crate::__private::Millis,
            ) -> Result<(), $crate::__private::StoreError> {
                $crate::limits::define_limit(self, limit, now).await
            }

            async fn take_capacity(
                &self,
                name: &str,
                amount: u64,
                now: $crate::__private::Millis,
            ) -> Result<Option<::std::time::Duration>, $crate::__private::StoreError> {
                $crate::limits::take_capacity(self, name, amount, now).await
            }

            async fn pause_limit(
                &self,
                name: &str,
                wait: ::std::time::Duration,
                now: $crate::__private::Millis,
            ) -> Result<(), $crate::__private::StoreError> {
                $crate::limits::pause_limit(self, name, wait, now).await
            }

            async fn limits(
                &self,
                now: $crate::__private::Millis,
            ) -> Result<Vec<$crate::__private::LimitState>, $crate::__private::StoreError> {
                $crate::limits::limits(self, now).await
            }
        }
    };
}
