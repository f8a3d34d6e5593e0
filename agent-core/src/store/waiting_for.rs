//! What a waiting run waits for, typed, and stored as its stable text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `waiting_for` of a parent waiting until every child it started in the step is final.
pub const WAIT_ALL_CHILDREN: &str = "children:all";
/// `waiting_for` of a parent waiting until one child it started in the step completed, or
/// every one of them is final.
pub const WAIT_FIRST_CHILD: &str = "children:first";
/// `waiting_for` of a run in a state whose timer alone it waits for
/// ([`timer`](crate::timer)): it is due at its `wake_at`. (A state that waits for a signal
/// and a timer waits for the signal, with the timer as its `wake_at`.)
pub const WAIT_TIMER: &str = "timer:due";
/// The prefix of the `waiting_for` of a run handed back until a rate limit has room for it
/// ([`RunStore::defer_run`](super::RunStore::defer_run)): `capacity:`, the limit's name, `@`
/// and the epoch of the lease that handed it back. Such a run is not waiting (its status
/// stays running); it is due at its `wake_at`.
pub const WAIT_CAPACITY_PREFIX: &str = "capacity:";

/// What a waiting run waits for ([`RunRecord::waiting_for`](super::RunRecord::waiting_for)).
///
/// Stored and serialized as its text: a signal's name, [`WAIT_ALL_CHILDREN`] /
/// [`WAIT_FIRST_CHILD`] for a parent waiting for the children its step started, or
/// [`WAIT_TIMER`] for a run waiting for its state's timer, so runs
/// stored before it was typed read the same and the HTTP API's JSON does not change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WaitingFor {
    /// The signal of this name.
    Signal(String),
    /// Every child run the step started, until each is final (`children:all`).
    AllChildren,
    /// The first child run the step started to complete, or all of them final
    /// (`children:first`).
    FirstChild,
    /// The state's timer, due at the run's `wake_at` (`timer:due`).
    Timer,
    /// Room under a rate limit, reserved for the run at its `wake_at`: a running run
    /// handed back until then. Holds the stored text, `capacity:<limit name>@<epoch>`
    /// ([`WaitingFor::capacity`], [`WaitingFor::limit`], [`WaitingFor::handed_back_by`]).
    Capacity(String),
}

impl WaitingFor {
    /// A wait for the signal `name`.
    #[must_use]
    pub fn signal(name: impl Into<String>) -> Self {
        Self::Signal(name.into())
    }

    /// What the stored text means: the children and timer markers, else a signal's name.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        match text {
            WAIT_ALL_CHILDREN => Self::AllChildren,
            WAIT_FIRST_CHILD => Self::FirstChild,
            WAIT_TIMER => Self::Timer,
            text => match text.strip_prefix(WAIT_CAPACITY_PREFIX) {
                Some(_) => Self::Capacity(text.to_owned()),
                None => Self::Signal(text.to_owned()),
            },
        }
    }

    /// A wait for room under the rate limit `limit` (its stored name), the turn taken by the
    /// lease of `epoch` as it handed the run back.
    #[must_use]
    pub fn capacity(limit: &str, epoch: u64) -> Self {
        Self::Capacity(format!("{WAIT_CAPACITY_PREFIX}{limit}@{epoch}"))
    }

    /// The limit's name and the epoch of the lease that handed the run back (`None` in a
    /// text without one).
    fn capacity_parts(&self) -> Option<(&str, Option<u64>)> {
        let Self::Capacity(text) = self else {
            return None;
        };
        let rest = text.strip_prefix(WAIT_CAPACITY_PREFIX)?;
        Some(match rest.rsplit_once('@') {
            Some((name, epoch)) => match epoch.parse() {
                Ok(epoch) => (name, Some(epoch)),
                Err(_) => (rest, None),
            },
            None => (rest, None),
        })
    }

    /// The rate limit's name, for a wait for capacity.
    #[must_use]
    pub fn limit(&self) -> Option<&str> {
        self.capacity_parts().map(|(name, _)| name)
    }

    /// For a wait for capacity, the epoch of the lease that took the turn and handed the run
    /// back: the turn is the next claim's (epoch one more) alone, so that a claim after that
    /// one crashed does not ask again under it.
    #[must_use]
    pub fn handed_back_by(&self) -> Option<u64> {
        self.capacity_parts().and_then(|(_, epoch)| epoch)
    }

    /// The stored text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Signal(name) | Self::Capacity(name) => name,
            Self::AllChildren => WAIT_ALL_CHILDREN,
            Self::FirstChild => WAIT_FIRST_CHILD,
            Self::Timer => WAIT_TIMER,
        }
    }

    /// The signal's name, for a wait for a signal.
    #[must_use]
    pub fn signal_name(&self) -> Option<&str> {
        match self {
            Self::Signal(name) => Some(name),
            Self::AllChildren | Self::FirstChild | Self::Timer | Self::Capacity(_) => None,
        }
    }

    /// Whether it is a wait for children.
    #[must_use]
    pub fn is_children(&self) -> bool {
        matches!(self, Self::AllChildren | Self::FirstChild)
    }
}

impl fmt::Display for WaitingFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for WaitingFor {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl PartialEq<str> for WaitingFor {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for WaitingFor {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for WaitingFor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for WaitingFor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_the_stored_text() {
        for (text, typed) in [
            ("children:all", WaitingFor::AllChildren),
            ("children:first", WaitingFor::FirstChild),
            ("timer:due", WaitingFor::Timer),
            ("capacity:asks:m@7", WaitingFor::capacity("asks:m", 7)),
            ("approval", WaitingFor::signal("approval")),
        ] {
            assert_eq!(WaitingFor::parse(text), typed);
            assert_eq!(typed.as_str(), text);
            let json = serde_json::to_value(&typed).unwrap();
            assert_eq!(json, serde_json::json!(text));
            assert_eq!(serde_json::from_value::<WaitingFor>(json).unwrap(), typed);
        }
        let named = WaitingFor::capacity("asks:vertex/claude@20240229", 3);
        assert_eq!(named.limit(), Some("asks:vertex/claude@20240229"));
        assert_eq!(named.handed_back_by(), Some(3));
        // A text without the epoch names its limit and reserves no turn.
        let old = WaitingFor::parse("capacity:tool:search");
        assert_eq!(
            (old.limit(), old.handed_back_by()),
            (Some("tool:search"), None)
        );
        assert_eq!(WaitingFor::signal("go").signal_name(), Some("go"));
        assert!(WaitingFor::AllChildren.is_children());
        assert!(!WaitingFor::signal("children").is_children());
    }
}
