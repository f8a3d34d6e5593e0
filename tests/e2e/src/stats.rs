//! Percentiles for the reports.

use std::fmt;

/// Nearest-rank summary of a sample of durations in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Sample size.
    pub n: usize,
    /// Median.
    pub p50: i64,
    /// 99th percentile.
    pub p99: i64,
    /// Maximum.
    pub max: i64,
}

impl Summary {
    /// Summarize `values` (any order).
    #[must_use]
    pub fn of(values: &[i64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let rank = |p: f64| {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i]
        };
        Self {
            n: v.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: v[v.len() - 1],
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} p50={} ms p99={} ms max={} ms",
            self.n, self.p50, self.p99, self.max
        )
    }
}
