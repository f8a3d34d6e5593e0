//! Constrained decoding: the strict subset of JSON Schema that `OpenAI`'s structured outputs
//! (`strict: true` function tools) and Anthropic's strict tool use accept, made from an
//! option's schema once per request body.
//!
//! The rules, as the providers document them: the root is an object; every object lists
//! all its properties in `required` and sets `additionalProperties: false`; a property that
//! was optional becomes required and nullable; `oneOf` is written `anyOf`; keywords outside
//! the subset are dropped (string lengths, patterns and formats, numeric bounds, array and
//! object size bounds, `uniqueItems`, `contains`, `patternProperties`, `propertyNames`,
//! `unevaluated*`, `default`, `examples`). An object open to additional properties (a map)
//! has no strict form: such an option is sent without `strict`.
//!
//! Dropping a keyword only loosens what the provider enforces while decoding; the runner
//! still checks every answer against the option's original schema, with every keyword.

use serde_json::{Map, Value, json};

/// Keywords outside the strict subset.
const DROPPED: &[&str] = &[
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "dependentRequired",
    "dependentSchemas",
    "default",
    "examples",
    "$schema",
];

/// Keywords whose value is one schema.
const ONE: &[&str] = &["items", "not", "if", "then", "else", "additionalItems"];
/// Keywords whose value is a list of schemas.
const MANY: &[&str] = &["anyOf", "allOf", "prefixItems"];
/// Keywords whose value is a map of schemas.
const MAP: &[&str] = &["properties", "$defs", "definitions"];

/// The strict form of `schema`, or `None` when it has none (the root is not an object
/// schema, or an object is open to additional properties).
#[must_use]
pub fn strict_schema(schema: &Value) -> Option<Value> {
    let root = schema.as_object()?;
    if root.get("type") != Some(&json!("object")) {
        return None;
    }
    let mut out = schema.clone();
    strict_in_place(&mut out).then_some(out)
}

fn strict_in_place(schema: &mut Value) -> bool {
    let Some(map) = schema.as_object_mut() else {
        // `true` / `false` schemas: `true` accepts anything, which strict mode cannot say.
        return schema == &Value::Bool(false);
    };
    for k in DROPPED {
        map.remove(*k);
    }
    if let Some(one_of) = map.remove("oneOf") {
        map.insert("anyOf".to_owned(), one_of);
    }
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.contains(&json!("object")),
        _ => false,
    } || map.contains_key("properties")
        || map.contains_key("additionalProperties");
    if is_object {
        match map.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return false,
        }
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
        map.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let required: Vec<String> = match map.get("required").and_then(Value::as_array) {
            Some(r) => r
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            None => Vec::new(),
        };
        let Some(props) = map.get_mut("properties").and_then(Value::as_object_mut) else {
            return false;
        };
        let names: Vec<String> = props.keys().cloned().collect();
        for name in &names {
            if !required.contains(name)
                && let Some(p) = props.get_mut(name)
            {
                nullable(p);
            }
        }
        map.insert(
            "required".to_owned(),
            Value::Array(names.into_iter().map(Value::String).collect()),
        );
    }
    let mut ok = true;
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        if ONE.contains(&key) {
            ok &= strict_in_place(value);
        } else if MANY.contains(&key) {
            for v in value.as_array_mut().into_iter().flatten() {
                ok &= strict_in_place(v);
            }
        } else if MAP.contains(&key) {
            for v in value.as_object_mut().into_iter().flat_map(Map::values_mut) {
                ok &= strict_in_place(v);
            }
        }
    }
    ok
}

/// Let `schema` also accept `null`.
fn nullable(schema: &mut Value) {
    let accepts_null =
        |t: &Value| *t == "null" || t.as_array().is_some_and(|a| a.contains(&json!("null")));
    if let Some(map) = schema.as_object_mut() {
        match map.get_mut("type") {
            Some(t) if accepts_null(t) => return,
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                map.insert("type".to_owned(), json!([t, "null"]));
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.push(Value::Null);
                }
                return;
            }
            Some(Value::Array(types)) => {
                types.push(json!("null"));
                return;
            }
            _ => {}
        }
    }
    let inner = std::mem::take(schema);
    *schema = json!({"anyOf": [inner, {"type": "null"}]});
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object in `schema` follows the strict rules: all properties required,
    /// `additionalProperties: false`, no dropped keyword, no `oneOf`.
    fn assert_strict(schema: &Value) {
        match schema {
            Value::Object(map) => {
                for k in DROPPED {
                    assert!(!map.contains_key(*k), "`{k}` left in {schema}");
                }
                assert!(!map.contains_key("oneOf"), "{schema}");
                if let Some(props) = map.get("properties").and_then(Value::as_object) {
                    assert_eq!(map["additionalProperties"], json!(false), "{schema}");
                    let required: Vec<&str> = map["required"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect();
                    for k in props.keys() {
                        assert!(
                            required.contains(&k.as_str()),
                            "`{k}` not required in {schema}"
                        );
                    }
                }
                map.values().for_each(assert_strict);
            }
            Value::Array(items) => items.iter().for_each(assert_strict),
            _ => {}
        }
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Line {
        #[schemars(length(min = 1, max = 8), regex(pattern = "^[a-z]+$"))]
        sku: String,
        #[schemars(range(min = 1, max = 10))]
        qty: u32,
        note: Option<String>,
        #[serde(default)]
        gift: bool,
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(tag = "kind")]
    #[allow(dead_code)]
    enum Pay {
        Card { last4: String },
        Credit,
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Order {
        lines: Vec<Line>,
        pay: Pay,
        coupon: Option<Line>,
    }

    #[test]
    fn generated_schemas_become_strict() {
        let original = agent_core::schema::schema_for::<Order>();
        let strict = strict_schema(&original).unwrap();
        assert_strict(&strict);
        // Optional fields are required and nullable; required ones keep their type.
        let line = &strict["$defs"]["Line"];
        assert_eq!(
            line["properties"]["gift"]["type"],
            json!(["boolean", "null"])
        );
        assert_eq!(line["properties"]["sku"]["type"], json!("string"));
        assert!(strict["properties"]["coupon"].to_string().contains("null"));
        // The original is untouched: the runner still enforces every keyword.
        assert!(original.to_string().contains("maxLength"));
        let compiled = agent_core::schema::CompiledSchema::compile(strict).unwrap();
        assert!(compiled.is_valid(&json!({
            "lines": [{"sku": "a", "qty": 1, "note": null, "gift": null}],
            "pay": {"kind": "Credit"},
            "coupon": null
        })));
    }

    #[test]
    fn the_closed_empty_object_is_strict_already() {
        let empty = agent_core::schema::closed_empty_object();
        let mut expected = empty.clone();
        expected["required"] = json!([]);
        assert_eq!(strict_schema(&empty), Some(expected));
    }

    #[test]
    fn open_objects_and_non_objects_have_no_strict_form() {
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(strict_schema(&map), None);
        let nested = json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": true}}});
        assert_eq!(strict_schema(&nested), None);
        assert_eq!(strict_schema(&json!({"type": "string"})), None);
        assert_eq!(strict_schema(&json!(true)), None);
    }
}
