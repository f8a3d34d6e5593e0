//! Rate limits shared by every worker of a store: what one is ([`RateLimit`]), what it
//! holds ([`LimitState`]), and the one piece of arithmetic every store applies
//! ([`Bucket`]).
//!
//! A limit is a token bucket kept in the store, so that every worker process draws from the
//! same one. Taking never fails: it reserves, and says how long the taker waits before what
//! it took is there. A worker that must wait longer than a moment hands its run back until
//! then ([`RunStore::defer_run`](crate::store::RunStore::defer_run)), so a run waiting for
//! capacity holds no worker, and each waiting run is taken up once, at its turn, rather
//! than every waiting run at each refill.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Millis;

/// The longest limit name a store keeps, in bytes.
pub const MAX_LIMIT_NAME_BYTES: usize = 200;

/// What a rate limit applies to, and so its stored name: the asks to a model, the tokens
/// they use, or the calls of a tool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum LimitScope {
    /// Asks to the model a router names ([`Router::limit_key`](crate::router::Router::limit_key),
    /// `openai/gpt-4o` for example): one unit per ask.
    Asks(String),
    /// Tokens (prompt and completion) of the asks to that model, counted when each answer
    /// comes: an ask waits while the tokens of the answers before it are over the limit.
    Tokens(String),
    /// Calls of the tool of this name: one unit per call executed (replays are free).
    ToolCalls(String),
}

impl LimitScope {
    /// The name the store keeps the limit under: `asks:<model>`, `tokens:<model>` or
    /// `tool:<tool>`.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Asks(model) => format!("asks:{model}"),
            Self::Tokens(model) => format!("tokens:{model}"),
            Self::ToolCalls(tool) => format!("tool:{tool}"),
        }
    }
}

/// A rate limit: `amount` units per `period`, with at most `burst` taken at once after a
/// quiet spell. Over any window of time `w`, at most `burst + amount · w / period` units are
/// granted, to every worker together; the default burst of 1 spaces the units evenly, so
/// that a provider counting per minute never sees more than its limit plus one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    /// What it limits.
    pub scope: LimitScope,
    /// Units per period, at least 1.
    pub amount: u64,
    /// The period, in milliseconds, at least 1.
    pub period_ms: u64,
    /// Units that may be granted at once, at least 1.
    pub burst: u64,
}

/// A rate limit that can never be met, refused where it is declared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRateLimit {
    /// A zero amount, period or burst.
    #[error("the rate limit `{name}` has a {what} of zero: it could never grant anything")]
    Zero {
        /// The limit's name.
        name: String,
        /// `amount`, `period` or `burst`.
        what: &'static str,
    },
    /// An empty name, or one past [`MAX_LIMIT_NAME_BYTES`].
    #[error("the rate limit name `{name}` is empty or longer than {MAX_LIMIT_NAME_BYTES} bytes")]
    Name {
        /// The name as given.
        name: String,
    },
}

impl RateLimit {
    /// `amount` asks to `model` per `period`.
    ///
    /// # Errors
    /// [`InvalidRateLimit`] for a zero amount or period, or a model key that is empty or
    /// too long.
    pub fn asks(
        model: impl Into<String>,
        amount: u64,
        period: Duration,
    ) -> Result<Self, InvalidRateLimit> {
        Self::new(LimitScope::Asks(model.into()), amount, period)
    }

    /// `amount` tokens of answers from `model` per `period`.
    ///
    /// # Errors
    /// As [`asks`](Self::asks).
    pub fn tokens(
        model: impl Into<String>,
        amount: u64,
        period: Duration,
    ) -> Result<Self, InvalidRateLimit> {
        Self::new(LimitScope::Tokens(model.into()), amount, period)
    }

    /// `amount` calls of `tool` per `period`.
    ///
    /// # Errors
    /// As [`asks`](Self::asks).
    pub fn tool_calls(
        tool: impl Into<String>,
        amount: u64,
        period: Duration,
    ) -> Result<Self, InvalidRateLimit> {
        Self::new(LimitScope::ToolCalls(tool.into()), amount, period)
    }

    /// A limit of `scope`, with a burst of 1.
    ///
    /// # Errors
    /// As [`asks`](Self::asks).
    pub fn new(scope: LimitScope, amount: u64, period: Duration) -> Result<Self, InvalidRateLimit> {
        let limit = Self {
            scope,
            amount,
            period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
            burst: 1,
        };
        limit.validate()?;
        Ok(limit)
    }

    /// The same limit with `burst` units grantable at once.
    ///
    /// # Errors
    /// [`InvalidRateLimit::Zero`] for a burst of zero.
    pub fn with_burst(mut self, burst: u64) -> Result<Self, InvalidRateLimit> {
        self.burst = burst;
        self.validate()?;
        Ok(self)
    }

    /// Refuse a limit that can never be met: a zero amount, period or burst, or a name
    /// the store cannot keep.
    ///
    /// # Errors
    /// The first [`InvalidRateLimit`] found.
    pub fn validate(&self) -> Result<(), InvalidRateLimit> {
        let name = self.scope.name();
        let key_len = name.len() - name.find(':').map_or(0, |i| i + 1);
        if key_len == 0 || name.len() > MAX_LIMIT_NAME_BYTES {
            return Err(InvalidRateLimit::Name { name });
        }
        for (what, value) in [
            ("amount", self.amount),
            ("period", self.period_ms),
            ("burst", self.burst),
        ] {
            if value == 0 {
                return Err(InvalidRateLimit::Zero { name, what });
            }
        }
        Ok(())
    }

    /// The name the store keeps it under ([`LimitScope::name`]).
    #[must_use]
    pub fn name(&self) -> String {
        self.scope.name()
    }

    /// Units per millisecond.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // limits are far below 2^52
    pub fn rate(&self) -> f64 {
        self.amount as f64 / self.period_ms as f64
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {} ms (burst {}) for {}",
            self.amount,
            self.period_ms,
            self.burst,
            self.name()
        )
    }
}

/// A token bucket as a store keeps it: its refill `rate` (units per millisecond), its
/// `burst` (the most it holds), and its `level` at time `at`. The level goes below zero when
/// units are reserved ahead: a taker waits until the refill brings it back to zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Units per millisecond.
    pub rate: f64,
    /// The most the bucket holds.
    pub burst: f64,
    /// Units held at `at` (negative: reserved ahead).
    pub level: f64,
    /// When `level` was computed.
    pub at: Millis,
}

impl Bucket {
    /// A full bucket of `limit` at `now`.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // limits are far below 2^52
    pub fn full(limit: &RateLimit, now: Millis) -> Self {
        Self {
            rate: limit.rate(),
            burst: limit.burst as f64,
            level: limit.burst as f64,
            at: now,
        }
    }

    /// The level at `now`, refilled since `at` up to the burst.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // milliseconds of elapsed time
    pub fn level_at(&self, now: Millis) -> f64 {
        let elapsed = (now - self.at).max(0) as f64;
        (self.level + elapsed * self.rate).min(self.burst)
    }

    /// Take `amount` at `now` (always granted, perhaps ahead): the bucket after it. The
    /// statements of the SQL stores compute the same in SQL.
    #[must_use]
    pub fn take(self, amount: f64, now: Millis) -> Self {
        Self {
            level: self.level_at(now) - amount,
            at: self.at.max(now),
            ..self
        }
    }

    /// Grant nothing for `wait` from `now` on (a provider said so): the bucket after it.
    /// Never shortens a longer wait already there.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // milliseconds
    pub fn pause(self, wait: Duration, now: Millis) -> Self {
        let debt = -(wait.as_millis() as f64) * self.rate;
        Self {
            level: self.level_at(now).min(debt),
            at: self.at.max(now),
            ..self
        }
    }

    /// How long from `now` until the level is back at zero: what the last taker waits.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped below
    pub fn wait_at(&self, now: Millis) -> Duration {
        let level = self.level_at(now);
        if level >= 0.0 || self.rate <= 0.0 {
            return Duration::ZERO;
        }
        let ms = (-level / self.rate).ceil().clamp(0.0, 1e15);
        Duration::from_millis(ms as u64)
    }
}

/// A limit as stored, read back ([`LimitStore::limits`](crate::store::LimitStore::limits)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitState {
    /// The limit's name (`asks:<model>`, `tokens:<model>`, `tool:<tool>`).
    pub name: String,
    /// Units per millisecond.
    pub rate: f64,
    /// The most granted at once.
    pub burst: f64,
    /// What it holds now (negative: reserved ahead, or paused).
    pub level: f64,
    /// How long a taker would wait now.
    pub wait_ms: u64,
}

impl LimitState {
    /// The state of `name` held in `bucket`, at `now`.
    #[must_use]
    pub fn of(name: String, bucket: &Bucket, now: Millis) -> Self {
        Self {
            name,
            rate: bucket.rate,
            burst: bucket.burst,
            level: bucket.level_at(now),
            wait_ms: u64::try_from(bucket.wait_at(now).as_millis()).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(amount: u64, period_ms: u64) -> RateLimit {
        RateLimit::tool_calls("Search", amount, Duration::from_millis(period_ms)).unwrap()
    }

    #[test]
    fn takes_reserve_ahead_evenly() {
        // 10 per second, burst 1: the first take is now, each next one 100 ms later.
        let mut b = Bucket::full(&limit(10, 1000), 0);
        let mut waits = Vec::new();
        for _ in 0..4 {
            b = b.take(1.0, 0);
            waits.push(b.wait_at(0).as_millis());
        }
        assert_eq!(waits, [0, 100, 200, 300]);
        // Time passing pays the reservations back, never past the burst.
        assert_eq!(b.wait_at(300), Duration::ZERO);
        assert!((b.level_at(10_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_pause_extends_and_never_shortens() {
        let b = Bucket::full(&limit(10, 1000), 0).pause(Duration::from_secs(5), 0);
        assert_eq!(b.wait_at(0), Duration::from_secs(5));
        let shorter = b.pause(Duration::from_secs(1), 0);
        assert_eq!(shorter.wait_at(0), Duration::from_secs(5));
        // A take during the pause waits for the pause, then its own turn.
        assert_eq!(b.take(1.0, 1000).wait_at(1000).as_millis(), 4100);
    }

    #[test]
    fn limits_that_cannot_be_met_are_refused() {
        assert!(matches!(
            RateLimit::asks("m", 0, Duration::from_secs(1)),
            Err(InvalidRateLimit::Zero { what: "amount", .. })
        ));
        assert!(matches!(
            RateLimit::asks("m", 1, Duration::ZERO),
            Err(InvalidRateLimit::Zero { what: "period", .. })
        ));
        assert!(matches!(
            limit(1, 1).with_burst(0),
            Err(InvalidRateLimit::Zero { what: "burst", .. })
        ));
        assert!(matches!(
            RateLimit::asks("", 1, Duration::from_secs(1)),
            Err(InvalidRateLimit::Name { .. })
        ));
        assert!(matches!(
            RateLimit::tool_calls("x".repeat(300), 1, Duration::from_secs(1)),
            Err(InvalidRateLimit::Name { .. })
        ));
        assert_eq!(limit(5, 1000).name(), "tool:Search");
    }
}
