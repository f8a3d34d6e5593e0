//! Durable timers: a state that waits for a time before its handler runs.
//!
//! A state declares its timer in the grammar, so the graph, its exports, the inspector and
//! the compile-time checks know it:
//!
//! - `timer_ms = N`: a fixed delay, counted from the commit that enters the state;
//! - `timer = field`: the time held in the state's field `field`, which the handler that
//!   moved into the state computed: a [`Deadline`] or a [`SystemTime`] (a time of day, a
//!   deadline), or a [`Duration`] (a delay counted from entering); an `Option` of one of
//!   them, where `None` is no timer.
//!
//! Alone, the timer is what the state waits for: the run is stored `waiting` for
//! [`WaitingFor::Timer`](crate::store::WaitingFor::Timer) with its due time, holds no
//! worker, and becomes claimable at that time on every store; the handler runs once,
//! after it. With `wait = "signal"` it is the wait's deadline instead of
//! `wait_timeout_ms`: whichever comes first wakes the handler, which tells them apart by
//! its [`Wake`](crate::Wake).
//!
//! The due time is stored with the run, so a timer survives restarts and fires once: the
//! step it wakes commits the run out of the state, or is re-run from its journal after a
//! crash, as every step is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::store::{Millis, now_ms};

/// A point in time, as stored: milliseconds since the Unix epoch (serialized as that
/// number). The type to give a state's `timer = field` for a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Deadline(Millis);

impl Deadline {
    /// The deadline `millis` milliseconds after the Unix epoch.
    #[must_use]
    pub const fn from_unix_millis(millis: Millis) -> Self {
        Self(millis)
    }

    /// `delay` from now.
    #[must_use]
    pub fn after(delay: Duration) -> Self {
        Self(now_ms().saturating_add(millis_of(delay)))
    }

    /// The deadline at `time` (before the epoch reads as the epoch).
    #[must_use]
    pub fn at(time: SystemTime) -> Self {
        Self(time.duration_since(UNIX_EPOCH).map_or(0, millis_of))
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn unix_millis(self) -> Millis {
        self.0
    }
}

/// When a timer is due, as a state's field gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// This long after the state is entered.
    After(Duration),
    /// At this time.
    At(Deadline),
}

impl Due {
    /// The due time, for a state entered at `entered`.
    #[must_use]
    pub fn at(self, entered: Millis) -> Millis {
        match self {
            Self::After(delay) => entered.saturating_add(millis_of(delay)),
            Self::At(deadline) => deadline.unix_millis(),
        }
    }
}

/// A type a state's `timer = field` can name: it says when the timer is due.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a timer: `timer = field` names a time or a delay",
    label = "the timer's field",
    note = "give the field a `durable_agents::timer::Deadline` (or `std::time::SystemTime`) for a time, a `std::time::Duration` for a delay from entering the state, or an `Option` of one of them"
)]
pub trait TimerField {
    /// When the timer is due; `None` is no timer.
    fn due(&self) -> Option<Due>;
}

impl TimerField for Deadline {
    fn due(&self) -> Option<Due> {
        Some(Due::At(*self))
    }
}

impl TimerField for SystemTime {
    fn due(&self) -> Option<Due> {
        Some(Due::At(Deadline::at(*self)))
    }
}

impl TimerField for Duration {
    fn due(&self) -> Option<Due> {
        Some(Due::After(*self))
    }
}

impl<T: TimerField> TimerField for Option<T> {
    fn due(&self) -> Option<Due> {
        self.as_ref().and_then(TimerField::due)
    }
}

fn millis_of(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_counts_from_entering_and_a_deadline_is_absolute() {
        let entered = 1_000_000;
        assert_eq!(
            Duration::from_secs(3).due().map(|d| d.at(entered)),
            Some(1_003_000)
        );
        let deadline = Deadline::from_unix_millis(5);
        assert_eq!(deadline.due().map(|d| d.at(entered)), Some(5));
        assert_eq!(None::<Deadline>.due(), None);
        assert_eq!(
            Some(Duration::from_millis(7)).due().map(|d| d.at(0)),
            Some(7)
        );
        // A delay too long to count saturates, never wraps into the past.
        assert!(Duration::MAX.due().unwrap().at(entered) > entered);
    }

    #[test]
    fn a_deadline_serializes_as_milliseconds() {
        let d = Deadline::at(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        assert_eq!(serde_json::to_string(&d).unwrap(), "1700000000123");
        assert_eq!(
            serde_json::from_str::<Deadline>("42")
                .unwrap()
                .unix_millis(),
            42
        );
        assert_eq!(
            Deadline::at(UNIX_EPOCH - Duration::from_secs(1)).unix_millis(),
            0
        );
    }
}
