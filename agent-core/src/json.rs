//! JSON parsing that refuses duplicate object keys.
//!
//! `serde_json` keeps the last of two equal keys, so `{"amount": 1, "amount": 999}` reads
//! as 999 while a log of the raw text shows both: what was checked and what was stored
//! disagree. Everything a model answers (the provider's envelope and the arguments inside
//! it) is parsed here instead, and a duplicate at any depth is an error of its own.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a text is not a JSON document with unique keys.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// An object has the same key twice.
    #[error("duplicate key `{key}` in an object at line {line}, column {column}")]
    DuplicateKey {
        /// The repeated key (as decoded).
        key: String,
        /// Where the second occurrence ends.
        line: usize,
        /// Where the second occurrence ends.
        column: usize,
    },
    /// Not JSON at all (syntax, end of input, trailing text, nesting past 128 levels).
    #[error("{0}")]
    Syntax(String),
}

/// Parse `text` as one JSON value, refusing a repeated key in any object.
///
/// # Errors
/// [`JsonError::DuplicateKey`] for a repeated key, [`JsonError::Syntax`] for anything that
/// is not one JSON value.
pub fn from_str_unique(text: &str) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = UniqueSeed
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| {
        let message = e.to_string();
        match (e.classify(), message.strip_prefix(DUPLICATE)) {
            // The only data error this seed raises is the duplicate key.
            (serde_json::error::Category::Data, Some(rest)) => {
                let key = rest.rsplit_once(" at line ").map_or(rest, |(k, _)| k);
                JsonError::DuplicateKey {
                    key: key.to_owned(),
                    line: e.line(),
                    column: e.column(),
                }
            }
            _ => JsonError::Syntax(message),
        }
    })
}

const DUPLICATE: &str = "duplicate key: ";

#[derive(Clone, Copy)]
struct UniqueSeed;

impl<'de> DeserializeSeed<'de> for UniqueSeed {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        UniqueSeed.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(UniqueSeed)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("{DUPLICATE}{key}")));
            }
            let value = map.next_value_seed(UniqueSeed)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_like_serde_json_without_duplicates() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true], "b": {"c": {}}}"#;
        assert_eq!(
            from_str_unique(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert_eq!(from_str_unique("7").unwrap(), json!(7));
    }

    #[test]
    fn refuses_duplicates_at_any_depth() {
        let top = from_str_unique(r#"{"amount_cents": 100, "amount_cents": 999999}"#);
        assert!(
            matches!(&top, Err(JsonError::DuplicateKey { key, .. }) if key == "amount_cents"),
            "{top:?}"
        );
        let nested = from_str_unique(r#"{"a": [{"b": 1, "c": 2, "b": 3}]}"#);
        assert!(
            matches!(&nested, Err(JsonError::DuplicateKey { key, .. }) if key == "b"),
            "{nested:?}"
        );
        // Equal after decoding escapes is equal.
        let escaped = from_str_unique(r#"{"name": 1, "n\u0061me": 2}"#);
        assert!(
            matches!(&escaped, Err(JsonError::DuplicateKey { key, .. }) if key == "name"),
            "{escaped:?}"
        );
    }

    #[test]
    fn syntax_errors_are_not_duplicates() {
        assert!(matches!(from_str_unique("{"), Err(JsonError::Syntax(_))));
        assert!(matches!(from_str_unique("{} x"), Err(JsonError::Syntax(_))));
        assert!(matches!(from_str_unique(""), Err(JsonError::Syntax(_))));
    }
}
