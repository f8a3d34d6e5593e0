//! The schemas shown to the model and the validator its answers are checked against: one
//! document for both.
//!
//! A tool's input schema is generated once per process from its type (draft 2020-12), with
//! every object closed (`additionalProperties: false`, nested objects and enum variants'
//! objects included) unless the type says otherwise, and compiled once with the
//! `jsonschema` crate. An answer must satisfy that schema (types, ranges, lengths,
//! patterns, enum values, required and unknown fields) *before* it is deserialized into the
//! typed input; serde alone drops unknown nested fields and reads a struct from an array.
//!
//! A type opts out of closing one of its objects by setting `additionalProperties` itself
//! (`#[schemars(extend("additionalProperties" = true))]`): a schema that says anything about
//! additional properties is left as it is.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Value, json};

/// A schema and its compiled validator.
pub struct CompiledSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// A schema the validator cannot compile (not a valid draft 2020-12 schema, or one that
/// refers to a document it would have to fetch).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON schema: {0}")]
pub struct SchemaError(pub String);

/// At most this many violations are reported for one answer.
const MAX_VIOLATIONS: usize = 5;

impl CompiledSchema {
    /// Compile `schema`. Remote and file `$ref`s are not resolved (the crate is built without
    /// resolvers): an answer is only ever checked against the document the model was shown.
    ///
    /// # Errors
    /// [`SchemaError`] when `schema` is not a schema the validator accepts.
    pub fn compile(schema: Value) -> Result<Self, SchemaError> {
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&schema)
            .map_err(|e| SchemaError(e.to_string()))?;
        Ok(Self { schema, validator })
    }

    /// The schema, as sent to the model.
    #[must_use]
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Whether `value` satisfies the schema.
    #[must_use]
    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// Check `value` against the schema.
    ///
    /// # Errors
    /// The first violations, each with its location in `value` (`/items/0/qty`) and the
    /// keyword broken, without repeating the offending value.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let mut out = Vec::new();
        for e in self.validator.iter_errors(value).take(MAX_VIOLATIONS) {
            let at = e.instance_path().as_str().to_owned();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            out.push(format!("at `{at}`: {}", e.masked()));
        }
        Err(out.join("; "))
    }
}

/// Closes every object schema that lists `properties` and says nothing about additional
/// ones. Applied once, by the generator, to the root and to every subschema and definition.
#[derive(Clone, Copy, Debug)]
pub struct CloseObjects;

impl Transform for CloseObjects {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        if let Some(map) = schema.as_object_mut()
            && map.contains_key("properties")
            && !map.contains_key("additionalProperties")
            && !map.contains_key("unevaluatedProperties")
        {
            map.insert("additionalProperties".to_owned(), Value::Bool(false));
        }
        transform_subschemas(self, schema);
    }
}

/// The input schema of `T` as the model sees it: draft 2020-12, objects closed.
#[must_use]
pub fn schema_for<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with_transform(CloseObjects)
        .into_generator()
        .into_root_schema_for::<T>();
    schema.to_value()
}

/// The schema of `T` and its validator, built once per process and shared.
///
/// # Panics
/// Never for schemas schemars generates; a hand-written `JsonSchema` impl producing an
/// invalid schema falls back to a validator that accepts nothing, so no answer passes.
#[must_use]
pub fn compiled_for<T: JsonSchema + 'static>() -> Arc<CompiledSchema> {
    static BY_TYPE: OnceLock<Mutex<HashMap<TypeId, Arc<CompiledSchema>>>> = OnceLock::new();
    let cache = BY_TYPE.get_or_init(Mutex::default);
    if let Some(hit) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&TypeId::of::<T>())
    {
        return Arc::clone(hit);
    }
    let schema = schema_for::<T>();
    let compiled = Arc::new(CompiledSchema::compile(schema.clone()).unwrap_or_else(|e| {
        tracing::error!(error = %e, "input schema does not compile; every answer is refused");
        reject_all(schema)
    }));
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(TypeId::of::<T>())
        .or_insert(compiled)
        .clone()
}

/// A validator for `schema` (shown to the model as it is) that accepts nothing.
fn reject_all(schema: Value) -> CompiledSchema {
    let validator = jsonschema::validator_for(&Value::Bool(false))
        .unwrap_or_else(|_| unreachable!("`false` is a valid schema"));
    CompiledSchema { schema, validator }
}

/// Distinct schemas compiled from options before the cache is emptied (schemas of tools
/// registered at run time could otherwise grow it without bound).
const MAX_CACHED_SCHEMAS: usize = 1024;

/// The compiled validator of an arbitrary schema (an option's advertised schema), cached by
/// the schema's canonical text so a schema is compiled once per process, not per decision.
///
/// # Errors
/// [`SchemaError`] when `schema` does not compile.
pub fn compiled(schema: &Value) -> Result<Arc<CompiledSchema>, SchemaError> {
    static BY_TEXT: OnceLock<Mutex<HashMap<String, Arc<CompiledSchema>>>> = OnceLock::new();
    let cache = BY_TEXT.get_or_init(Mutex::default);
    let key = crate::store::canonical_json(schema);
    if let Some(hit) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(Arc::clone(hit));
    }
    let compiled = Arc::new(CompiledSchema::compile(schema.clone())?);
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= MAX_CACHED_SCHEMAS {
        cache.clear();
    }
    Ok(cache.entry(key).or_insert(compiled).clone())
}

/// The schema of a transition without arguments: the closed empty object.
#[must_use]
pub fn closed_empty_object() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Line {
        sku: String,
        #[schemars(range(min = 1, max = 1000))]
        qty: u32,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Pay {
        Card { last4: String },
        Invoice { days: u8 },
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Order {
        #[schemars(length(min = 1, max = 8), regex(pattern = r"^[a-z]+$"))]
        user: String,
        lines: Vec<Line>,
        pay: Pay,
        #[schemars(extend("additionalProperties" = true))]
        meta: std::collections::BTreeMap<String, String>,
    }

    fn order() -> Value {
        json!({
            "user": "ann",
            "lines": [{"sku": "a", "qty": 2}],
            "pay": {"kind": "card", "last4": "4242"},
            "meta": {}
        })
    }

    fn with(pointer: &str, value: Value) -> Value {
        let mut v = order();
        *v.pointer_mut(pointer).unwrap() = value;
        v
    }

    #[test]
    fn generated_schemas_close_every_object() {
        let c = compiled_for::<Order>();
        assert!(c.check(&order()).is_ok(), "{:?}", c.check(&order()));
        let mut top = order();
        top["admin"] = json!(true);
        let mut nested = order();
        nested["lines"][0]["discount"] = json!(100);
        let mut variant = order();
        variant["pay"]["cvv"] = json!("123");
        for bad in [top, nested, variant] {
            let err = c.check(&bad).unwrap_err();
            // An enum's variant fails as "none of `oneOf`"; an object as additional properties.
            assert!(
                err.contains("Additional properties") || err.contains("oneOf"),
                "{err}"
            );
        }
        // The opt-out stays open.
        assert!(c.check(&with("/meta", json!({"any": "thing"}))).is_ok());
    }

    #[test]
    fn advertised_limits_are_enforced() {
        let c = compiled_for::<Order>();
        for bad in [
            with("/lines/0/qty", json!(999_999)),
            with("/lines/0/qty", json!(0)),
            with("/user", json!("")),
            with("/user", json!("abcdefghi")),
            with("/user", json!("Ann")),
            with("/pay/kind", json!("crypto")),
            with("/lines/0", json!(["a", 2])),
            json!(["ann", [], {"kind": "card", "last4": "1"}, {}]),
        ] {
            assert!(c.check(&bad).is_err(), "accepted {bad}");
        }
        let err = c.check(&with("/lines/0/qty", json!(999_999))).unwrap_err();
        assert!(err.starts_with("at `/lines/0/qty`: "), "{err}");
        assert!(!err.contains("999999"), "the value is not repeated: {err}");
    }

    #[test]
    fn the_cache_returns_one_validator_per_type() {
        assert!(Arc::ptr_eq(
            &compiled_for::<Order>(),
            &compiled_for::<Order>()
        ));
        let s = closed_empty_object();
        let a = compiled(&s).unwrap();
        assert!(Arc::ptr_eq(&a, &compiled(&s).unwrap()));
        assert!(a.is_valid(&json!({})));
        assert!(!a.is_valid(&json!({"x": 1})));
        assert!(!a.is_valid(&json!([])));
    }
}
