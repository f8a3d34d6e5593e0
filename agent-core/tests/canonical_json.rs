//! `canonical_json` feeds every stored hash (input hashes, the transition chain): its bytes
//! must not change. Pinned by an example and by a property against its first definition.

use durable_agents::store::canonical_json;
use proptest::prelude::*;
use serde_json::{Value, json};

/// The first definition, kept as the reference the current one must match byte for byte.
fn reference(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&map[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[\"\\\\\\n\\t\\u{0}-\\u{1f}é😀 a-z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn same_bytes_as_the_first_definition(v in json_value()) {
        prop_assert_eq!(canonical_json(&v), reference(&v));
    }
}

#[test]
fn keys_sorted_at_every_depth_no_whitespace() {
    let v = json!({ "b": 1, "a": [true, null, "x\"y\u{e9}\n"], "c": { "z": 1.5, "y": -2 } });
    assert_eq!(
        canonical_json(&v),
        r#"{"a":[true,null,"x\"yé\n"],"b":1,"c":{"y":-2,"z":1.5}}"#
    );
}
