//! Redaction and sealing by the configuration's secrets and keys: the one boundary every
//! value passes before it is stored, journaled, traced or shown.

use serde_json::Value;

use super::{Inner, RunnerConfig};
use crate::secrets::{Redactor, SealKeys};

impl RunnerConfig {
    /// The one redactor of this configuration: [`secrets`](Self::secrets) in every
    /// encoding it knows, and the values of [`redact_fields`](Self::redact_fields).
    #[must_use]
    pub fn redactor(&self) -> Redactor {
        Redactor::new(&self.secrets).with_fields(&self.redact_fields)
    }

    /// Replace, in `value`, the values of the fields in [`redact_fields`](Self::redact_fields)
    /// and every occurrence of a [secret](Self::secrets) in its strings and keys.
    pub fn redact_value(&self, value: &mut Value) {
        self.redactor().value(value);
    }

    /// `text` with every occurrence of a [secret](Self::secrets) replaced by `"[redacted]"`,
    /// plainly or encoded ([`Redactor`]).
    #[must_use]
    pub fn redact_text(&self, text: &str) -> String {
        self.redactor().text(text)
    }

    /// `value` as it is stored where a resumed run executes it again: the parts the
    /// [`SealPolicy`](crate::secrets::SealPolicy) names (sensitive and `marked` fields,
    /// strings and keys holding a configured secret) sealed with the active key.
    ///
    /// # Errors
    /// [`SealError::NoKey`](crate::secrets::SealError) when something must be sealed and no
    /// key is configured; `what` names what was to be stored.
    pub fn seal_value(
        &self,
        value: &mut Value,
        marked: &[String],
        what: &str,
    ) -> Result<(), crate::secrets::SealError> {
        seal_with(
            &self.redactor(),
            &self.seal_keys,
            value,
            marked,
            what,
            false,
        )
    }

    /// A run's state as it is stored: the values of sensitive fields and strings holding a
    /// configured secret sealed, each the same text for the same value (an unchanged field
    /// stays the same from one commit to the next).
    ///
    /// # Errors
    /// [`SealError::NoKey`](crate::secrets::SealError) when the state holds a secret and no
    /// key is configured.
    pub fn seal_state(
        &self,
        state: &mut Value,
        name: &str,
    ) -> Result<(), crate::secrets::SealError> {
        let what = format!("state `{name}`");
        seal_with(&self.redactor(), &self.seal_keys, state, &[], &what, true)
    }

    /// A stored state, its sealed values opened (a copy only when it holds any).
    ///
    /// # Errors
    /// [`SealError::MissingKey`](crate::secrets::SealError) or `Corrupt`.
    pub fn open_state<'v>(
        &self,
        state: &'v Value,
    ) -> Result<std::borrow::Cow<'v, Value>, crate::secrets::SealError> {
        if !crate::secrets::holds_sealed(state) {
            return Ok(std::borrow::Cow::Borrowed(state));
        }
        let mut opened = state.clone();
        self.seal_keys.open_all(&mut opened)?;
        Ok(std::borrow::Cow::Owned(opened))
    }
}

/// Seal `value` by the policy of `redactor` (its field names and secrets) and `marked`.
fn seal_with(
    redactor: &Redactor,
    keys: &SealKeys,
    value: &mut Value,
    marked: &[String],
    what: &str,
    stable: bool,
) -> Result<(), crate::secrets::SealError> {
    crate::secrets::SealPolicy {
        redactor,
        marked,
        stable,
    }
    .seal(value, keys, what)
    .map(|_| ())
}

/// The configuration's redaction and sealing, with its redactor built once.
impl Inner {
    pub(crate) fn redact_text(&self, text: &str) -> String {
        self.redactor.text(text)
    }

    pub(crate) fn redact_value(&self, value: &mut Value) {
        self.redactor.value(value);
    }

    pub(crate) fn seal_value(
        &self,
        value: &mut Value,
        marked: &[String],
        what: &str,
    ) -> Result<(), crate::secrets::SealError> {
        seal_with(
            &self.redactor,
            &self.config.seal_keys,
            value,
            marked,
            what,
            false,
        )
    }

    pub(crate) fn seal_state(
        &self,
        state: &mut Value,
        name: &str,
    ) -> Result<(), crate::secrets::SealError> {
        let what = format!("state `{name}`");
        seal_with(
            &self.redactor,
            &self.config.seal_keys,
            state,
            &[],
            &what,
            true,
        )
    }
}
