//! Why a step, a run or a tool call failed, as typed codes stored as their stable text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The stable code of a failure: what [`StepError::code`](crate::StepError::code) gives,
/// what a [`Failure`](crate::Failure) and a stored [`RunFailure`](super::RunFailure) carry.
///
/// Stored and serialized as its text (`tool.timeout`, `state.corrupt`, ...), so runs stored
/// before the code was typed read the same. A text the framework does not know (a code of
/// your own, or one a later version writes) reads as [`Other`](Self::Other); two codes are
/// equal when their texts are, so `FailureCode::Other("handler".into())` equals
/// [`Handler`](Self::Handler).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum FailureCode {
    /// A tool call failed after its retries (`tool.timeout`, `tool.permanent`, ...).
    Tool(ErrorClass),
    /// The handler gave up (`handler`).
    Handler,
    /// A budget was exceeded (`budget`).
    Budget,
    /// The router found no legal decision within its re-asks (`routing`).
    Routing,
    /// The router never answered within its re-asks (`router.unavailable`).
    RouterUnavailable,
    /// The runner stopped the step (`interrupted`).
    Interrupted,
    /// The stored state no longer deserializes (`state.corrupt`).
    StateCorrupt,
    /// The agent's graph changed incompatibly with the run (`graph.incompatible`).
    GraphIncompatible,
    /// The run's stored versions do not replay (`history.inconsistent`).
    HistoryInconsistent,
    /// The run was claimed again and again without progress (`crash_loop`).
    CrashLoop,
    /// A compensation failed (`compensation.failed`).
    CompensationFailed,
    /// An operator cancelled the run (`cancelled`).
    Cancelled,
    /// An operator terminated the run (`terminated`).
    Terminated,
    /// The store could not read the run's row (`row.unreadable`).
    RowUnreadable,
    /// An imported tool's input schema changed since the run called it
    /// (`tool.schema_changed`).
    ToolSchemaChanged,
    /// The run's state does not map to the agent's new version (`migration.failed`).
    MigrationFailed,
    /// The run waits for a signal its mapped state does not wait for
    /// (`migration.skips_signal`).
    MigrationSkipsSignal,
    /// No key is configured to seal a sealed field (`seal.no_key`).
    SealNoKey,
    /// The key a value was sealed with is not configured (`seal.key_missing`).
    SealKeyMissing,
    /// A sealed value does not open (`seal.corrupt`).
    SealCorrupt,
    /// The configured keys do not read (`seal.bad_keys`).
    SealBadKeys,
    /// A code the framework does not know: one of your own, or one a later version wrote.
    Other(String),
}

impl FailureCode {
    const KNOWN: [Self; 20] = [
        Self::Handler,
        Self::Budget,
        Self::Routing,
        Self::RouterUnavailable,
        Self::Interrupted,
        Self::StateCorrupt,
        Self::GraphIncompatible,
        Self::HistoryInconsistent,
        Self::CrashLoop,
        Self::CompensationFailed,
        Self::Cancelled,
        Self::Terminated,
        Self::RowUnreadable,
        Self::ToolSchemaChanged,
        Self::MigrationFailed,
        Self::MigrationSkipsSignal,
        Self::SealNoKey,
        Self::SealKeyMissing,
        Self::SealCorrupt,
        Self::SealBadKeys,
    ];

    const CLASSES: [ErrorClass; 6] = [
        ErrorClass::Retryable,
        ErrorClass::Permanent,
        ErrorClass::Timeout,
        ErrorClass::RateLimited,
        ErrorClass::Auth,
        ErrorClass::Disabled,
    ];

    /// The code's stable text, as stored.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Tool(class) => class.code(),
            Self::Handler => "handler",
            Self::Budget => "budget",
            Self::Routing => "routing",
            Self::RouterUnavailable => "router.unavailable",
            Self::Interrupted => "interrupted",
            Self::StateCorrupt => "state.corrupt",
            Self::GraphIncompatible => "graph.incompatible",
            Self::HistoryInconsistent => "history.inconsistent",
            Self::CrashLoop => "crash_loop",
            Self::CompensationFailed => "compensation.failed",
            Self::Cancelled => "cancelled",
            Self::Terminated => "terminated",
            Self::RowUnreadable => "row.unreadable",
            Self::ToolSchemaChanged => "tool.schema_changed",
            Self::MigrationFailed => "migration.failed",
            Self::MigrationSkipsSignal => "migration.skips_signal",
            Self::SealNoKey => "seal.no_key",
            Self::SealKeyMissing => "seal.key_missing",
            Self::SealCorrupt => "seal.corrupt",
            Self::SealBadKeys => "seal.bad_keys",
            Self::Other(code) => code,
        }
    }

    /// The code a text stands for: a known one, or [`Other`](Self::Other).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        if let Some(class) = Self::CLASSES.into_iter().find(|c| c.code() == text) {
            return Self::Tool(class);
        }
        Self::KNOWN
            .into_iter()
            .find(|c| c.as_str() == text)
            .unwrap_or_else(|| Self::Other(text.to_owned()))
    }
}

impl PartialEq for FailureCode {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for FailureCode {}

impl std::hash::Hash for FailureCode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for FailureCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FailureCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for FailureCode {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for FailureCode {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl From<ErrorClass> for FailureCode {
    fn from(class: ErrorClass) -> Self {
        Self::Tool(class)
    }
}

impl From<FailureCode> for String {
    fn from(code: FailureCode) -> Self {
        match code {
            FailureCode::Other(text) => text,
            known => known.as_str().to_owned(),
        }
    }
}

impl Serialize for FailureCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

/// Why a call failed; decides whether the runner retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorClass {
    /// A passing fault: retried.
    Retryable,
    /// Will fail again: not retried.
    Permanent,
    /// The attempt exceeded the tool's timeout: retried.
    Timeout,
    /// The service asked to slow down: retried after its `retry-after`.
    RateLimited,
    /// Credentials refused: not retried.
    Auth,
    /// The tool is switched off in the tool registry: not retried.
    Disabled,
}

impl ErrorClass {
    /// Whether another attempt may succeed.
    #[must_use]
    pub const fn is_retryable(self) -> bool {
        matches!(self, Self::Retryable | Self::Timeout | Self::RateLimited)
    }

    /// The stable error code stored in the journal (`tool.timeout`, ...).
    #[must_use]
    pub const fn code(self) -> &'static str {
        match self {
            Self::Retryable => "tool.retryable",
            Self::Permanent => "tool.permanent",
            Self::Timeout => "tool.timeout",
            Self::RateLimited => "tool.rate_limited",
            Self::Auth => "tool.auth",
            Self::Disabled => "tool.disabled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_text() {
        let all = FailureCode::KNOWN
            .into_iter()
            .chain(FailureCode::CLASSES.into_iter().map(FailureCode::Tool));
        for code in all {
            let text = serde_json::to_string(&code).unwrap();
            let back: FailureCode = serde_json::from_str(&text).unwrap();
            assert!(!matches!(back, FailureCode::Other(_)));
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&code));
            assert_eq!(back, code);
        }
    }

    #[test]
    fn an_unknown_text_is_kept_as_written() {
        let code = FailureCode::from("billing.declined");
        assert_eq!(code, FailureCode::Other("billing.declined".into()));
        assert_eq!(
            serde_json::to_string(&code).unwrap(),
            "\"billing.declined\""
        );
        assert_eq!(FailureCode::Other("handler".into()), FailureCode::Handler);
    }
}
