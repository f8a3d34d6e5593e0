//! Secrets: one redactor for every byte that leaves the process, and sealing for every
//! secret value that must be stored.
//!
//! - [`Redactor`] hides configured secrets (plainly, JSON-escaped, percent-encoded, in hex
//!   or base64, whole or in pieces, in values and in object keys) and the values of
//!   sensitive field names. Everything stored that is never executed again (raw model
//!   output, error messages), logged, fed back to the model, sent to followers (the event
//!   stream and the live token bus, through [`StreamRedactor`]) or exported passes it.
//! - [`SealKeys`] and [`SealPolicy`] store what a resumed run executes again (tool inputs and
//!   outputs, the model's decisions) with its secret parts encrypted instead of replaced,
//!   so that replay opens them and executes exactly what was first executed.
//! - [`Secret<T>`] marks a field of a tool's input, a transition's argument or a signal's
//!   payload as secret: it is sealed whatever its name.

mod envelope;
mod redactor;
mod seal;

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use envelope::{SEALED, holds_sealed, sealed_text, show_sealed, shown};
pub use redactor::{
    REDACTED, Redactor, SECRET_PIECE, STREAM_HOLD_BACK, StreamRedactor, redact_fields,
    redact_secrets,
};
pub use seal::{
    SEAL_KEYS_ENV, SEALED_KEYWORD, SealError, SealKeys, SealPolicy, marked_fields, new_key_spec,
};

/// The field names whose values are secret by default ([`RunnerConfig::redact_fields`]),
/// matched case-insensitively at any depth.
///
/// [`RunnerConfig::redact_fields`]: crate::runner::RunnerConfig::redact_fields
pub const DEFAULT_SENSITIVE_FIELDS: [&str; 6] = [
    "api_key",
    "apikey",
    "authorization",
    "password",
    "secret",
    "token",
];

/// Seal a signal's payload as a runner does, for a sender outside one (the HTTP API,
/// `agentctl signal`): the values of [`DEFAULT_SENSITIVE_FIELDS`] and of the fields the
/// payload type declared in `graph` marks secret, with `keys`.
///
/// # Errors
/// [`SealError::NoKey`] when the payload holds a secret and `keys` is empty.
pub fn seal_signal_payload(
    payload: &mut serde_json::Value,
    graph: Option<&crate::graph::GraphDescription>,
    name: &str,
    keys: &SealKeys,
) -> Result<(), SealError> {
    let marked = graph
        .and_then(|g| g.signal_payload_schema(name))
        .map_or_else(Vec::new, marked_fields);
    let redactor = Redactor::default().with_fields(&DEFAULT_SENSITIVE_FIELDS);
    SealPolicy {
        redactor: &redactor,
        marked: &marked,
        stable: false,
    }
    .seal(payload, keys, &format!("the payload of signal `{name}`"))
    .map(|_| ())
}

/// A value that is secret: stored sealed by the runner whatever its field's name, shown as
/// `Secret([secret])` by `Debug`. Serialized as the value itself (the model sees its schema,
/// marked [`SEALED_KEYWORD`]; the journal sees it sealed).
///
/// ```
/// use durable_agents::secrets::Secret;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Login {
///     user: String,
///     pin: Secret<String>,
/// }
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Secret<T>(pub T);

impl<T> Secret<T> {
    /// The value.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([secret])")
    }
}

impl<T: Serialize> Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Secret)
    }
}

impl<T: JsonSchema> JsonSchema for Secret<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut schema = T::json_schema(generator);
        schema.insert(SEALED_KEYWORD.to_owned(), serde_json::Value::Bool(true));
        schema
    }
}
