//! What a run spent (model asks and their tokens and cost, tool calls) and the budget that
//! bounds it.
//!
//! A run's [`Spend`] is stored with the run and written by each step's commit, as the total
//! through that step: the step adds what its journal entries spent, replayed ones included,
//! so a step taken up again after a crash counts each ask and call once, whatever was
//! executed before the crash. Cost is kept in millionths of the price table's currency, so
//! that sums are exact.

use serde::{Deserialize, Serialize};

/// What a run (or one step) spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Spend {
    /// Input (prompt) tokens the provider billed.
    pub input_tokens: u64,
    /// Output (completion) tokens the provider billed.
    pub output_tokens: u64,
    /// Cost in millionths of the price table's currency, where the answer was priced.
    pub cost_micros: u64,
    /// Questions put to the routing model (a re-ask after a rejected answer counts).
    pub asks: u64,
    /// Tool calls executed (a call served from the read cache or replayed from the journal
    /// is not a new one; retries of one call are one call).
    pub tool_calls: u64,
}

impl Spend {
    /// Input and output tokens together: what a `tokens` budget bounds.
    #[must_use]
    pub const fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Both spends added.
    #[must_use]
    pub const fn plus(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cost_micros: self.cost_micros.saturating_add(other.cost_micros),
            asks: self.asks.saturating_add(other.asks),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
        }
    }

    /// Whether nothing was spent.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// What the runs of one agent created on one UTC day spent together
/// ([`HistoryStore::spend_by_day`](crate::store::HistoryStore::spend_by_day)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DaySpend {
    /// The agent.
    pub agent: String,
    /// The day's first millisecond, UTC.
    pub day: crate::store::Millis,
    /// Runs of the agent created that day.
    pub runs: u64,
    /// What they spent, each run's total so far.
    pub spend: Spend,
}

/// Milliseconds in a day: [`DaySpend::day`] is a multiple of it.
pub const DAY_MS: crate::store::Millis = 86_400_000;

/// `micros` millionths as a decimal amount, without trailing zeros: `0.03`, `2`, `0.000001`.
#[must_use]
pub fn format_cost(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// `3 asks, 2 tool calls, 450 tokens (300 in, 150 out), cost 0.03`: tokens and cost only
/// where some were billed or priced.
impl std::fmt::Display for Spend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} asks, {} tool calls", self.asks, self.tool_calls)?;
        if self.tokens() > 0 {
            write!(
                f,
                ", {} tokens ({} in, {} out)",
                self.tokens(),
                self.input_tokens,
                self.output_tokens
            )?;
        }
        if self.cost_micros > 0 {
            write!(f, ", cost {}", format_cost(self.cost_micros))?;
        }
        Ok(())
    }
}

/// `at most 400 tokens, cost 0.25, 5 asks, 10 tool calls`, or `no limit`.
impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut limits = Vec::new();
        if let Some(n) = self.tokens {
            limits.push(format!("{n} tokens"));
        }
        if let Some(n) = self.cost_micros {
            limits.push(format!("cost {}", format_cost(n)));
        }
        if let Some(n) = self.asks {
            limits.push(format!("{n} asks"));
        }
        if let Some(n) = self.tool_calls {
            limits.push(format!("{n} tool calls"));
        }
        if limits.is_empty() {
            f.write_str("no limit")
        } else {
            write!(f, "at most {}", limits.join(", "))
        }
    }
}

/// A cost as stored in a [`Spend`]: millionths of the currency, rounded to the nearest.
/// Negative, NaN and infinite amounts count as nothing.
#[must_use]
pub fn cost_micros(amount: f64) -> u64 {
    let micros = (amount * 1_000_000.0).round();
    if micros.is_finite() && micros > 0.0 {
        // Saturates at u64::MAX, which no real cost reaches.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let micros = micros as u64;
        micros
    } else {
        0
    }
}

/// Limits on what a run spends in all, or a state in one visit. `None`: no limit.
///
/// A limit is checked before each ask and each tool call: one that the spend so far has
/// reached refuses the next ask or call, and the step fails with the code `budget`, which
/// takes the state's `on_budget` edge (else its `on_error` edge, else fails the run). The
/// tokens and cost of an answer are known only once it came, so the ask that crosses a
/// token or cost limit completes, and the next one is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Input and output tokens together.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
    )]
    pub tokens: Option<u64>,
    /// Cost in millionths of the price table's currency.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
    )]
    pub cost_micros: Option<u64>,
    /// Questions put to the routing model.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
    )]
    pub asks: Option<u64>,
    /// Tool calls executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
    )]
    pub tool_calls: Option<u64>,
}

/// What a budget is checked before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spending {
    /// A question to the routing model.
    Ask,
    /// A tool call.
    ToolCall,
}

/// A budget refused where it is set: a limit that can never be met, or one past what the
/// stores count (they sum spends as signed 64-bit integers).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBudget {
    /// A limit of zero.
    #[error("budget `{0}` must be greater than zero: a limit of zero can never be met")]
    Zero(&'static str),
    /// A limit above [`MAX_LIMIT`].
    #[error("budget `{0}` is at most {MAX_LIMIT}")]
    TooLarge(&'static str),
}

/// The largest limit a budget takes: what a signed 64-bit sum in SQL holds.
pub const MAX_LIMIT: u64 = i64::MAX as u64;

impl Budget {
    /// No limits.
    pub const UNLIMITED: Self = Self {
        tokens: None,
        cost_micros: None,
        asks: None,
        tool_calls: None,
    };

    /// Refuse limits of zero (no run could ever ask or call within them) and above
    /// [`MAX_LIMIT`].
    ///
    /// # Errors
    /// The first limit refused.
    pub fn validate(&self) -> Result<(), InvalidBudget> {
        for (name, limit) in [
            ("tokens", self.tokens),
            ("cost_micros", self.cost_micros),
            ("asks", self.asks),
            ("tool_calls", self.tool_calls),
        ] {
            match limit {
                Some(0) => return Err(InvalidBudget::Zero(name)),
                Some(n) if n > MAX_LIMIT => return Err(InvalidBudget::TooLarge(name)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether no limit is set.
    #[must_use]
    pub fn is_unlimited(&self) -> bool {
        *self == Self::UNLIMITED
    }

    /// Why `next` may not happen after `spent`, or `None` when it may. `what` names the
    /// budget in the message ("the run's budget", "state `Triage`'s budget per visit").
    #[must_use]
    pub fn refuses(&self, spent: &Spend, next: Spending, what: &str) -> Option<String> {
        let reached = |limit: Option<u64>, used: u64, unit: &str| {
            limit
                .filter(|&max| used >= max)
                .map(|max| format!("{what} of {max} {unit} is spent ({used} used)"))
        };
        let count = match next {
            Spending::Ask => reached(self.asks, spent.asks, "model asks"),
            Spending::ToolCall => reached(self.tool_calls, spent.tool_calls, "tool calls"),
        };
        count
            .or_else(|| reached(self.tokens, spent.tokens(), "tokens"))
            .or_else(|| reached(self.cost_micros, spent.cost_micros, "millionths of cost"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_refuses_once_the_spend_reaches_it() {
        let budget = Budget {
            asks: Some(2),
            tokens: Some(100),
            ..Budget::UNLIMITED
        };
        let mut spent = Spend {
            asks: 1,
            input_tokens: 60,
            ..Spend::default()
        };
        assert_eq!(budget.refuses(&spent, Spending::Ask, "b"), None);
        assert_eq!(budget.refuses(&spent, Spending::ToolCall, "b"), None);
        spent.output_tokens = 40;
        let why = budget.refuses(&spent, Spending::ToolCall, "the run's budget");
        assert_eq!(
            why.as_deref(),
            Some("the run's budget of 100 tokens is spent (100 used)")
        );
        spent.output_tokens = 0;
        spent.asks = 2;
        assert!(budget.refuses(&spent, Spending::Ask, "b").is_some());
        assert_eq!(budget.refuses(&spent, Spending::ToolCall, "b"), None);
    }

    #[test]
    fn zero_limits_are_refused_and_costs_round_to_millionths() {
        let zero = Budget {
            tool_calls: Some(0),
            ..Budget::UNLIMITED
        };
        assert_eq!(zero.validate(), Err(InvalidBudget::Zero("tool_calls")));
        let huge = Budget {
            tokens: Some(MAX_LIMIT + 1),
            ..Budget::UNLIMITED
        };
        assert_eq!(huge.validate(), Err(InvalidBudget::TooLarge("tokens")));
        assert!(Budget::UNLIMITED.validate().is_ok());
        assert_eq!(cost_micros(0.5), 500_000);
        assert_eq!(cost_micros(0.000_000_4), 0);
        assert_eq!(cost_micros(-1.0), 0);
        assert_eq!(cost_micros(f64::NAN), 0);
        assert_eq!(format_cost(30_000), "0.03");
        assert_eq!(format_cost(2_000_000), "2");
        assert_eq!(format_cost(1), "0.000001");
        let budget = Budget {
            tokens: Some(400),
            cost_micros: Some(250_000),
            ..Budget::UNLIMITED
        };
        assert_eq!(budget.to_string(), "at most 400 tokens, cost 0.25");
        assert_eq!(Budget::UNLIMITED.to_string(), "no limit");
        let spent = Spend {
            asks: 2,
            tool_calls: 5,
            ..Spend::default()
        };
        assert_eq!(spent.to_string(), "2 asks, 5 tool calls");
        let priced = Spend {
            input_tokens: 300,
            output_tokens: 150,
            cost_micros: 30_000,
            ..spent
        };
        assert_eq!(
            priced.to_string(),
            "2 asks, 5 tool calls, 450 tokens (300 in, 150 out), cost 0.03"
        );
    }

    #[test]
    fn a_budget_reads_only_its_own_fields() {
        let parsed: Budget = serde_json::from_str(r#"{"tokens": 5}"#).unwrap();
        assert_eq!(parsed.tokens, Some(5));
        assert!(serde_json::from_str::<Budget>(r#"{"token": 5}"#).is_err());
    }
}
