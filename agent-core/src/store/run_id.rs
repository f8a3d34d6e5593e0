//! Run ids that no two processes can both make.

/// A new run id, `PREFIX-` followed by a UUID v7 in 32 hex digits
/// (`checkout-0195e4b2c6a07d3e8f1b2a3c4d5e6f70`).
///
/// A UUID v7 starts with the time in milliseconds, so ids made later sort later (as the
/// `PREFIX-{millis}` ids they replace did), and carries 74 random bits after it, so two
/// processes starting runs in the same millisecond still get different ids. Use it for runs
/// that are new; a run that must be created once per business event (an order, a ticket)
/// is better named after that event, since creating a run is idempotent by id.
///
/// ```
/// let a = durable_agents::store::new_run_id("checkout");
/// let b = durable_agents::store::new_run_id("checkout");
/// assert!(a.starts_with("checkout-") && a.len() == "checkout-".len() + 32);
/// assert_ne!(a, b);
/// ```
#[must_use]
pub fn new_run_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::new_run_id;

    #[test]
    fn ids_made_at_once_differ_and_sort_by_time() {
        let ids: Vec<String> = (0..10_000).map(|_| new_run_id("r")).collect();
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
        // `Uuid::now_v7` counts within a millisecond, so even these sort in creation order.
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
