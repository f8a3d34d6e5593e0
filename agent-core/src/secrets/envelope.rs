//! What a sealed value looks like, and how people see one: the envelope both the sealing
//! and the redactor recognize, below them both.

use serde_json::Value;

/// The field of a sealed value's envelope.
pub const SEALED: &str = "$sealed";

/// The text of a sealed envelope, if `value` is one.
#[must_use]
pub fn sealed_text(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get(SEALED).and_then(Value::as_str),
        _ => None,
    }
}

/// Whether `value` holds a sealed envelope anywhere.
#[must_use]
pub fn holds_sealed(value: &Value) -> bool {
    sealed_text(value).is_some()
        || match value {
            Value::Array(items) => items.iter().any(holds_sealed),
            Value::Object(map) => map.values().any(holds_sealed),
            _ => false,
        }
}

/// `value` with every sealed envelope shown as `"[sealed:<key id>]"`: for people and for
/// the model, never for replay.
pub fn show_sealed(value: &mut Value) {
    if let Some(text) = sealed_text(value) {
        let id = text.split(':').nth(1).unwrap_or("?");
        *value = Value::String(format!("[sealed:{id}]"));
        return;
    }
    match value {
        Value::Array(items) => items.iter_mut().for_each(show_sealed),
        Value::Object(map) => map.values_mut().for_each(show_sealed),
        _ => {}
    }
}

/// `value` as people see it: every sealed envelope shown as `"[sealed:<key id>]"`, without
/// a copy when it holds none.
#[must_use]
pub fn shown(value: &Value) -> std::borrow::Cow<'_, Value> {
    if holds_sealed(value) {
        let mut copy = value.clone();
        show_sealed(&mut copy);
        std::borrow::Cow::Owned(copy)
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}
