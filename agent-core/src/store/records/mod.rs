//! The records a store keeps: runs, leases, journal entries, transitions, signals, and
//! the settings and reports of its operations.

mod claims;
mod journal;
mod limits;
mod operator;
mod runs;
mod spend;
mod transitions;

pub use super::failure_code::ErrorClass;

pub use claims::{ClaimReads, Claimed, Lease};
pub use journal::{
    CallStatus, EntryKind, JournalEntry, MAX_SIGNAL_KEY_BYTES, SignalReceipt, SignalRecord,
    ToolKind, check_signal_key, idempotency_key,
};
pub use limits::{
    Bucket, InvalidRateLimit, LimitScope, LimitState, MAX_LIMIT_NAME_BYTES, RateLimit,
};
pub use operator::{OperatorNote, PruneReport, RetentionPolicy, ToolSwitch};
pub use runs::{
    InspectedRun, LabelValueCount, Labels, NewRun, ROW_UNREADABLE, RunFailure, RunFilter, RunKey,
    RunRecord, RunStatus, SpawnedBy,
};
pub use spend::{
    Budget, DAY_MS, DaySpend, InvalidBudget, MAX_LIMIT, Spend, Spending, cost_micros, format_cost,
};
pub use transitions::{
    StateAtVersion, StepCommit, TransitionKind, TransitionRecord, VersionCount, VersionSpan,
};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current time in [`Millis`].
///
/// On a thread where a simulated clock is installed ([`simulated_clock`]), tokio's clock
/// (paused and advanced by the runtime in a simulation) instead of the system's.
#[must_use]
pub fn now_ms() -> Millis {
    if let Some(now) = simulated_clock::now() {
        return now;
    }
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The seam of the deterministic simulation (`agent-core/tests/simulation.rs`): the memory
/// store's leases and timestamps, and the runner's lease renewal, read [`now_ms`]; a
/// simulation installs this clock on its (single) runtime thread so that they read tokio's
/// paused clock, which the simulation advances, and every execution of a seed sees the
/// same times. Not for production code: nothing installs it there, and then [`now_ms`] is
/// the system's clock.
#[doc(hidden)]
pub mod simulated_clock {
    use std::cell::Cell;

    use super::Millis;

    thread_local! {
        /// tokio's instant at installation, and the time it stands for.
        static CLOCK: Cell<Option<(tokio::time::Instant, Millis)>> = const { Cell::new(None) };
    }

    /// Until the guard drops, [`now_ms`](super::now_ms) on this thread is `start` plus the
    /// time tokio's clock has advanced since this call.
    #[must_use]
    pub fn install(start: Millis) -> Guard {
        CLOCK.with(|c| c.set(Some((tokio::time::Instant::now(), start))));
        Guard(())
    }

    /// The simulated time, when a clock is installed on this thread.
    pub(super) fn now() -> Option<Millis> {
        CLOCK.with(Cell::get).map(|(anchor, start)| {
            let elapsed = i64::try_from(anchor.elapsed().as_millis()).unwrap_or(i64::MAX);
            start.saturating_add(elapsed)
        })
    }

    /// Uninstalls the simulated clock when dropped.
    #[derive(Debug)]
    pub struct Guard(());

    impl Drop for Guard {
        fn drop(&mut self) {
            CLOCK.with(|c| c.set(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CallStatus, EntryKind, RunStatus, TransitionKind};
    use crate::tool::ToolKind;

    /// The stored names are a storage format: they are the serde names, and they never change.
    #[test]
    fn stored_names_are_the_serde_names_and_stay_put() {
        fn pinned<T>(
            all: &[T],
            names: &[&str],
            as_str: fn(&T) -> &'static str,
            parse: fn(&str) -> Option<T>,
        ) where
            T: serde::Serialize + PartialEq + std::fmt::Debug,
        {
            for (value, name) in all.iter().zip(names) {
                assert_eq!(as_str(value), *name);
                assert_eq!(serde_json::to_value(value).unwrap(), *name);
                assert_eq!(parse(name).as_ref(), Some(value));
            }
            assert_eq!(all.len(), names.len());
        }
        pinned(
            &RunStatus::ALL,
            &[
                "running",
                "waiting",
                "completed",
                "compensating",
                "compensated",
                "failed",
                "quarantined",
                "dead_lettered",
                "cancelled",
                "terminated",
            ],
            |s| s.as_str(),
            RunStatus::parse,
        );
        pinned(
            &[
                EntryKind::Tool,
                EntryKind::Decision,
                EntryKind::Compensation,
            ],
            &["tool", "decision", "compensation"],
            |s| s.as_str(),
            EntryKind::parse,
        );
        pinned(
            &[
                CallStatus::Started,
                CallStatus::Succeeded,
                CallStatus::Failed,
            ],
            &["started", "succeeded", "failed"],
            |s| s.as_str(),
            CallStatus::parse,
        );
        pinned(
            &[
                TransitionKind::Start,
                TransitionKind::Step,
                TransitionKind::Error,
                TransitionKind::Status,
                TransitionKind::Cancel,
                TransitionKind::Terminate,
                TransitionKind::Repair,
                TransitionKind::Migrated,
                TransitionKind::SignalDropped,
                TransitionKind::Edited,
            ],
            &[
                "start",
                "step",
                "error",
                "status",
                "cancel",
                "terminate",
                "repair",
                "migrated",
                "signal_dropped",
                "edited",
            ],
            |s| s.as_str(),
            TransitionKind::parse,
        );
        pinned(
            &[ToolKind::Read, ToolKind::Write, ToolKind::Hybrid],
            &["read", "write", "hybrid"],
            |k| k.as_str(),
            |s| s.parse().ok(),
        );
        assert_eq!(ToolKind::Hybrid.to_string(), "hybrid");
        assert_eq!(RunStatus::parse("Running"), None);
        assert_eq!(RunStatus::DeadLettered.to_string(), "dead_lettered");
    }
}
