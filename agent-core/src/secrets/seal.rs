//! Sealing: secret values stored encrypted, so that what a resumed run executes is byte for
//! byte what the first execution executed, and no secret is stored in plaintext.
//!
//! A sealed value is the JSON object `{"$sealed": "v1:<key id>:<base64url(nonce ‖ ciphertext)>"}`
//! in place of the value: XChaCha20-Poly1305 (the `chacha20poly1305` crate, `RustCrypto`),
//! a random 192-bit nonce per value (safe to draw at random however many workers seal with
//! one key), the key id and format version bound as associated data. The key id says which
//! key opens it, so keys rotate: a new key seals, the old ones stay configured to open what
//! they sealed. A value sealed with a key that is not configured fails with
//! [`SealError::MissingKey`], naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde_json::{Map, Value};

use super::Redactor;
use super::envelope::{SEALED, sealed_text};

/// The environment variable [`SealKeys::from_env`] reads.
pub const SEAL_KEYS_ENV: &str = "DURABLE_AGENTS_SEAL_KEYS";

/// The schema keyword that marks a field secret: `#[schemars(extend("x-sealed" = true))]`
/// on a field of a tool's input, a transition's argument or a signal's payload type, or
/// the field's type being [`Secret<T>`](super::Secret).
pub const SEALED_KEYWORD: &str = "x-sealed";

const FORMAT: &str = "v1";
const NONCE_LEN: usize = 24;

/// Why a value could not be sealed or opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// A value must be stored sealed and no key is configured.
    #[error(
        "{what} holds a secret that must be stored sealed, and no sealing key is configured: \
         set `RunnerConfig::seal_keys` (for example from `{SEAL_KEYS_ENV}`; \
         `agentctl seal-key` makes one)"
    )]
    NoKey {
        /// What was to be stored.
        what: String,
    },
    /// A stored value was sealed with a key this process does not have.
    #[error(
        "a stored value was sealed with key `{id}`, which is not configured: add it to \
         `RunnerConfig::seal_keys` (a key retired from sealing stays configured to open \
         what it sealed)"
    )]
    MissingKey {
        /// The key id the value names.
        id: String,
    },
    /// A sealed value that does not open with its key: altered, or not ours.
    #[error("a sealed value does not open: {0}")]
    Corrupt(String),
    /// A key specification that does not parse.
    #[error("sealing keys: {0}")]
    BadKeys(String),
}

impl SealError {
    /// The stable code a run fails or is held with.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::NoKey { .. } => "seal.no_key",
            Self::MissingKey { .. } => "seal.key_missing",
            Self::Corrupt(_) => "seal.corrupt",
            Self::BadKeys(_) => "seal.bad_keys",
        }
    }
}

/// The keys values are sealed and opened with: one active key seals, every configured key
/// opens what it sealed. `Debug` shows key ids only.
#[derive(Clone, Default)]
pub struct SealKeys {
    active: Option<String>,
    keys: Arc<BTreeMap<String, Key>>,
}

impl fmt::Debug for SealKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealKeys")
            .field("active", &self.active)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SealKeys {
    /// No key: nothing can be sealed or opened.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any key is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the key that seals.
    #[must_use]
    pub fn active(&self) -> Option<&str> {
        self.active.as_deref()
    }

    /// These keys and `key` under `id`, which seals from now on (the others still open).
    ///
    /// # Errors
    /// [`SealError::BadKeys`] for an id that is empty or holds `:` or `,`.
    pub fn with_active(mut self, id: &str, key: [u8; 32]) -> Result<Self, SealError> {
        check_id(id)?;
        Arc::make_mut(&mut self.keys).insert(id.to_owned(), key.into());
        self.active = Some(id.to_owned());
        Ok(self)
    }

    /// These keys and `key` under `id`, only to open what it sealed (a retired key).
    ///
    /// # Errors
    /// As [`Self::with_active`].
    pub fn with_retired(mut self, id: &str, key: [u8; 32]) -> Result<Self, SealError> {
        check_id(id)?;
        Arc::make_mut(&mut self.keys).insert(id.to_owned(), key.into());
        if self.active.is_none() {
            self.active = Some(id.to_owned());
        }
        Ok(self)
    }

    /// A new random key under `id`, active: for tests, and to make a key to keep.
    #[must_use]
    pub fn generate(id: &str) -> Self {
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        let mut keys = BTreeMap::new();
        keys.insert(id.to_owned(), key);
        Self {
            active: Some(id.to_owned()),
            keys: Arc::new(keys),
        }
    }

    /// Keys written as `id=base64key,id=base64key`: the first seals, all open (32-byte
    /// keys, standard or URL-safe base64, padded or not).
    ///
    /// # Errors
    /// [`SealError::BadKeys`] naming the entry that does not parse (never the key).
    pub fn parse(spec: &str) -> Result<Self, SealError> {
        let mut keys = Self::new();
        for (i, entry) in spec.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let (id, b64) = entry.split_once('=').ok_or_else(|| {
                SealError::BadKeys(format!("entry {} is not `id=base64key`", i + 1))
            })?;
            let bytes = decode_key(b64.trim()).ok_or_else(|| {
                SealError::BadKeys(format!(
                    "the key of `{}` is not 32 bytes of base64",
                    id.trim()
                ))
            })?;
            keys = if keys.active.is_none() {
                keys.with_active(id.trim(), bytes)?
            } else {
                keys.with_retired(id.trim(), bytes)?
            };
        }
        Ok(keys)
    }

    /// The keys in [`SEAL_KEYS_ENV`], or none when it is unset or empty.
    ///
    /// # Errors
    /// As [`Self::parse`].
    pub fn from_env() -> Result<Self, SealError> {
        match std::env::var(SEAL_KEYS_ENV) {
            Ok(spec) => Self::parse(&spec),
            Err(_) => Ok(Self::new()),
        }
    }

    /// `value`, sealed with the active key and a random nonce.
    ///
    /// # Errors
    /// [`SealError::NoKey`] when no key is configured (`what` says what was to be stored).
    pub fn seal(&self, value: &Value, what: &str) -> Result<Value, SealError> {
        self.seal_with(value, what, false)
    }

    /// `value`, sealed with the active key and a nonce derived from the key and the value:
    /// the same value seals to the same text (for states, whose unchanged fields must not
    /// change at every commit and every diff). Reveals that two such values are equal,
    /// nothing else.
    ///
    /// # Errors
    /// As [`Self::seal`].
    pub fn seal_stable(&self, value: &Value, what: &str) -> Result<Value, SealError> {
        self.seal_with(value, what, true)
    }

    fn seal_with(&self, value: &Value, what: &str, stable: bool) -> Result<Value, SealError> {
        let (Some(id), Some(key)) = (
            self.active.as_deref(),
            self.active.as_deref().and_then(|id| self.keys.get(id)),
        ) else {
            return Err(SealError::NoKey {
                what: what.to_owned(),
            });
        };
        let cipher = XChaCha20Poly1305::new(key);
        let plain = serde_json::to_vec(value).map_err(|e| SealError::Corrupt(e.to_string()))?;
        let nonce = if stable {
            // A keyed hash of the value: distinct values get distinct nonces (but for a
            // SHA-256 collision), and the key never meets the cipher's key stream directly.
            use sha2::Digest as _;
            let digest = sha2::Sha256::new()
                .chain_update(b"durable-agents stable nonce v1")
                .chain_update(key.as_slice())
                .chain_update(&plain)
                .finalize();
            *XNonce::from_slice(&digest[..NONCE_LEN])
        } else {
            XChaCha20Poly1305::generate_nonce(&mut OsRng)
        };
        let aad = associated(id);
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: &plain,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt("encryption failed".into()))?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let mut envelope = Map::new();
        envelope.insert(
            SEALED.to_owned(),
            Value::String(format!("{FORMAT}:{id}:{text}")),
        );
        Ok(Value::Object(envelope))
    }

    /// The value a sealed envelope's text (`v1:<id>:<data>`) holds.
    ///
    /// # Errors
    /// [`SealError::MissingKey`] for a key not configured, [`SealError::Corrupt`] for a
    /// value that does not open.
    pub fn open(&self, sealed: &str) -> Result<Value, SealError> {
        let mut parts = sealed.splitn(3, ':');
        let (Some(FORMAT), Some(id), Some(data)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::Corrupt("not a `v1` sealed value".into()));
        };
        let key = self
            .keys
            .get(id)
            .ok_or_else(|| SealError::MissingKey { id: id.to_owned() })?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(data)
            .map_err(|_| SealError::Corrupt("not base64".into()))?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Corrupt("too short".into()));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let aad = associated(id);
        let plain = XChaCha20Poly1305::new(key)
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt(format!("it does not authenticate with key `{id}`")))?;
        serde_json::from_slice(&plain).map_err(|e| SealError::Corrupt(e.to_string()))
    }

    /// Open, in place, every sealed value in `value`.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_all(&self, value: &mut Value) -> Result<(), SealError> {
        if let Some(text) = sealed_text(value) {
            let opened = self.open(text)?;
            *value = opened;
            return Ok(());
        }
        match value {
            Value::Array(items) => items.iter_mut().try_for_each(|v| self.open_all(v)),
            Value::Object(map) => map.values_mut().try_for_each(|v| self.open_all(v)),
            _ => Ok(()),
        }
    }
}

/// What decides which parts of a value are stored sealed: sensitive field names (the
/// redactor's, plus the names a type marks secret), and any string or key showing a
/// configured secret.
#[derive(Clone, Debug)]
pub struct SealPolicy<'a> {
    /// Field names and configured secrets.
    pub redactor: &'a Redactor,
    /// Field names marked secret in the value's type ([`marked_fields`]).
    pub marked: &'a [String],
    /// Seal with [`SealKeys::seal_stable`] (states) rather than a random nonce.
    pub stable: bool,
}

impl SealPolicy<'_> {
    /// Seal, in place, every part of `value` the policy names: the value of a sensitive or
    /// marked field, a string showing a configured secret, an object one of whose keys
    /// shows one (whole), and any object that already looks like a sealed envelope (so
    /// that opening is never fooled by one). Returns whether anything was sealed.
    ///
    /// # Errors
    /// [`SealError::NoKey`] when something must be sealed and `keys` is empty; `value` may
    /// then be partly sealed and must not be stored.
    pub fn seal(&self, value: &mut Value, keys: &SealKeys, what: &str) -> Result<bool, SealError> {
        let must = match &*value {
            Value::String(s) => self.redactor.contains_secret(s),
            Value::Object(map) => {
                sealed_text(value).is_some() || map.keys().any(|k| self.redactor.contains_secret(k))
            }
            _ => false,
        };
        let seal = |v: &Value, what: &str| {
            if self.stable {
                keys.seal_stable(v, what)
            } else {
                keys.seal(v, what)
            }
        };
        if must {
            *value = seal(value, what)?;
            return Ok(true);
        }
        let mut any = false;
        match value {
            Value::Array(items) => {
                for v in items {
                    any |= self.seal(v, keys, what)?;
                }
            }
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if self.redactor.is_sensitive_field(k)
                        || self.marked.iter().any(|m| m.eq_ignore_ascii_case(k))
                    {
                        if !v.is_null() {
                            *v = seal(v, &format!("{what} (field `{k}`)"))?;
                            any = true;
                        }
                    } else {
                        any |= self.seal(v, keys, what)?;
                    }
                }
            }
            _ => {}
        }
        Ok(any)
    }
}

impl SealPolicy<'_> {
    /// The values [`Self::seal`] would seal for their field's name, as text: every string,
    /// number and boolean under a sensitive or marked field (to hide them from text that
    /// quotes the value they came in, such as a model's raw answer).
    #[must_use]
    pub fn secret_values(&self, value: &Value) -> Vec<String> {
        fn leaves(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
                Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
                Value::Bool(_) | Value::Null => {}
            }
        }
        let mut out = Vec::new();
        match value {
            Value::Array(items) => {
                for v in items {
                    out.extend(self.secret_values(v));
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    if self.redactor.is_sensitive_field(k)
                        || self.marked.iter().any(|m| m.eq_ignore_ascii_case(k))
                    {
                        leaves(v, &mut out);
                    } else {
                        out.extend(self.secret_values(v));
                    }
                }
            }
            _ => {}
        }
        out
    }
}

/// The names of the properties a JSON Schema marks secret ([`SEALED_KEYWORD`]), at any
/// depth (through `properties`, `items`, `anyOf`/`oneOf`/`allOf`, `additionalProperties`
/// and `$ref`s into `$defs`). A name marked anywhere in a type is sealed anywhere in its
/// values: more is sealed, never less.
#[must_use]
pub fn marked_fields(schema: &Value) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut seen = std::collections::BTreeSet::new();
    collect_marked(schema, schema, &mut out, &mut seen);
    out.into_iter().collect()
}

fn collect_marked(
    root: &Value,
    node: &Value,
    out: &mut std::collections::BTreeSet<String>,
    seen: &mut std::collections::BTreeSet<String>,
) {
    let Some(map) = node.as_object() else { return };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str)
        && seen.insert(reference.to_owned())
        && let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
    {
        collect_marked(root, target, out, seen);
    }
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            if is_marked(root, sub) {
                out.insert(name.clone());
            }
            collect_marked(root, sub, out, seen);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = map.get(key) {
            collect_marked(root, sub, out, seen);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        for sub in map.get(key).and_then(Value::as_array).into_iter().flatten() {
            collect_marked(root, sub, out, seen);
        }
    }
}

/// Whether a property's schema marks it secret (itself, or the definition it refers to).
fn is_marked(root: &Value, sub: &Value) -> bool {
    if sub.get(SEALED_KEYWORD).and_then(Value::as_bool) == Some(true) {
        return true;
    }
    sub.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| root.pointer(p))
        .and_then(|t| t.get(SEALED_KEYWORD))
        .and_then(Value::as_bool)
        == Some(true)
}

fn associated(id: &str) -> String {
    format!("durable-agents sealed {FORMAT}:{id}")
}

fn check_id(id: &str) -> Result<(), SealError> {
    if id.is_empty() || id.contains([':', ',', '=']) || id.len() > 64 {
        return Err(SealError::BadKeys(format!(
            "key id `{}` must be 1 to 64 characters without `:`, `,` or `=`",
            id.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn decode_key(b64: &str) -> Option<[u8; 32]> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(b64).ok())
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
}

/// A new random key as the text [`SealKeys::parse`] reads (`id=base64key`).
#[must_use]
pub fn new_key_spec(id: &str) -> String {
    let key = XChaCha20Poly1305::generate_key(&mut OsRng);
    format!(
        "{id}={}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::secrets::{show_sealed, shown};

    #[test]
    fn sealed_values_open_to_exactly_what_was_sealed() {
        let keys = SealKeys::generate("k1");
        for v in [
            json!("sk-live"),
            json!({"a": [1, 2.5, null, "x"]}),
            json!(12),
        ] {
            let sealed = keys.seal(&v, "test").unwrap();
            let text = sealed_text(&sealed).unwrap();
            assert!(text.starts_with("v1:k1:"), "{text}");
            assert_eq!(keys.open(text).unwrap(), v);
        }
        // Two seals of one value differ (random nonces), both open.
        let a = keys.seal(&json!("x"), "t").unwrap();
        let b = keys.seal(&json!("x"), "t").unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn keys_rotate_and_a_missing_key_is_named() {
        let old = SealKeys::parse(&new_key_spec("old")).unwrap();
        let sealed = old.seal(&json!("secret"), "t").unwrap();
        let text = sealed_text(&sealed).unwrap().to_owned();
        // The new key seals; the old one, kept, still opens.
        let spec = format!("{},{}", new_key_spec("new"), {
            let s = new_key_spec("unused");
            s.replace("unused", "x")
        });
        let rotated = SealKeys::parse(&spec).unwrap();
        assert_eq!(rotated.active(), Some("new"));
        assert_eq!(
            rotated.open(&text).unwrap_err(),
            SealError::MissingKey { id: "old".into() }
        );
        assert!(
            rotated
                .open(&text)
                .unwrap_err()
                .to_string()
                .contains("`old`")
        );
        // A key under the same id but other bytes: it does not authenticate.
        let other = SealKeys::generate("old");
        assert_eq!(other.open(&text).unwrap_err().code(), "seal.corrupt");
        // A flipped byte does not open either.
        let mut tampered = text.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(old.open(&tampered).is_err());
        // Nothing configured: sealing says what to do.
        let e = SealKeys::new()
            .seal(&json!(1), "tool `Login`'s input")
            .unwrap_err();
        assert_eq!(e.code(), "seal.no_key");
        assert!(e.to_string().contains(SEAL_KEYS_ENV), "{e}");
        assert!(SealKeys::parse("k1=notbase64").is_err());
        assert!(SealKeys::parse("k:1=AAAA").is_err());
    }

    #[test]
    fn the_policy_seals_named_marked_and_secret_bearing_parts() {
        let keys = SealKeys::generate("k1");
        let redactor = Redactor::new(&["sk-canary-0123456789"]).with_fields(&["token"]);
        let marked = vec!["pin".to_owned()];
        let policy = SealPolicy {
            redactor: &redactor,
            marked: &marked,
            stable: false,
        };
        let original = json!({
            "user": "ann",
            "Token": "t-1",
            "pin": 1234,
            "note": "uses sk-canary-0123456789",
            "map": {"sk-canary-0123456789": 1},
            "forged": {"$sealed": "v1:k1:AAAA"},
            "list": [{"token": null}],
        });
        let mut v = original.clone();
        assert!(policy.seal(&mut v, &keys, "input").unwrap());
        assert_eq!(v["user"], json!("ann"));
        for field in ["Token", "pin", "note", "map", "forged"] {
            assert!(sealed_text(&v[field]).is_some(), "{field}: {v}");
        }
        assert_eq!(v["list"], json!([{"token": null}]));
        assert!(!v.to_string().contains("canary"));
        let mut opened = v.clone();
        keys.open_all(&mut opened).unwrap();
        assert_eq!(opened, original);
        let plain = json!({"user": "ann"});
        assert!(matches!(shown(&plain), std::borrow::Cow::Borrowed(_)));
        let display = shown(&v);
        assert_eq!(display["pin"], json!("[sealed:k1]"));
        assert!(!display.to_string().contains(SEALED), "{display}");
        let mut shown = v;
        show_sealed(&mut shown);
        assert_eq!(shown["pin"], json!("[sealed:k1]"));
    }

    #[test]
    fn marked_fields_are_found_through_refs() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "string", "x-sealed": true},
                "b": {"$ref": "#/$defs/Inner"},
                "c": {"$ref": "#/$defs/Secret"},
            },
            "$defs": {
                "Inner": {"type": "object", "properties": {"d": {"type": "string", "x-sealed": true}, "e": {}}},
                "Secret": {"type": "string", "x-sealed": true},
            }
        });
        assert_eq!(marked_fields(&schema), vec!["a", "c", "d"]);
    }
}
