//! Property: for every tool input of the example agents, an answer passes the validator
//! built from the schema the model is shown iff it deserializes into the input type and
//! satisfies what the schema says beyond the type (a closed object: no unknown field, an
//! object and not an array).
//!
//! Answers are generated near the schema: each field present with the right type, with a
//! wrong one, or missing; unknown fields added; arrays and scalars in place of the object.

use durable_agents::schema::{compiled_for, schema_for};
use examples::checkout::{
    AddToCartInput, ChargePaymentInput, RecommendInput, ReleaseInventoryInput,
    ReserveInventoryInput, SearchProductsInput, SendReceiptInput,
};
use examples::triage::{OrderId, RefundRequest, Reply};
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The JSON types the example inputs' fields have.
#[derive(Clone, Copy, Debug)]
enum Field {
    Str,
    U64,
    Strings,
}

fn any_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(|n| json!(n)),
        (i64::MIN..0).prop_map(|n| json!(n)),
        // Fractional only: `1.0` is an integer to JSON Schema and a float to serde.
        (-1.0e6..1.0e6f64).prop_map(|f| json!(f.trunc() + 0.5)),
        "[a-z]{0,6}".prop_map(Value::String),
        proptest::collection::vec("[a-z]{0,3}".prop_map(Value::String), 0..3)
            .prop_map(Value::Array),
        Just(json!({})),
        Just(json!({"x": 1})),
    ]
}

fn right(field: Field) -> BoxedStrategy<Value> {
    match field {
        Field::Str => "[a-z0-9]{0,8}".prop_map(Value::String).boxed(),
        Field::U64 => any::<u64>().prop_map(|n| json!(n)).boxed(),
        Field::Strings => proptest::collection::vec("[a-z]{0,4}".prop_map(Value::String), 0..4)
            .prop_map(Value::Array)
            .boxed(),
    }
}

/// Values near an object with `fields`.
fn near(fields: &'static [(&'static str, Field)]) -> impl Strategy<Value = Value> {
    let each: Vec<BoxedStrategy<Option<Value>>> = fields
        .iter()
        .map(|(_, f)| {
            prop_oneof![
                8 => right(*f).prop_map(Some),
                1 => any_value().prop_map(Some),
                1 => Just(None),
            ]
            .boxed()
        })
        .collect();
    let extra = proptest::option::weighted(
        0.15,
        (
            prop_oneof![
                "[a-z_]{1,8}",
                proptest::sample::select(vec!["admin", "amount"]).prop_map(str::to_owned)
            ],
            any_value(),
        ),
    );
    let object = (each, extra).prop_map(move |(values, extra)| {
        let mut map = Map::new();
        for ((name, _), v) in fields.iter().zip(values) {
            if let Some(v) = v {
                map.insert((*name).to_owned(), v);
            }
        }
        if let Some((k, v)) = extra {
            map.entry(k).or_insert(v);
        }
        Value::Object(map)
    });
    prop_oneof![
        10 => object,
        // An array in place of the object: serde reads a struct from it by position.
        1 => proptest::collection::vec(any_value(), 0..4).prop_map(Value::Array),
        1 => any_value(),
    ]
}

/// What the schema requires beyond the type: an object with no unknown field.
fn closed(value: &Value, fields: &[(&str, Field)]) -> bool {
    value
        .as_object()
        .is_some_and(|m| m.keys().all(|k| fields.iter().any(|(f, _)| f == k)))
}

fn check<T: DeserializeOwned + JsonSchema + 'static>(
    value: &Value,
    fields: &[(&str, Field)],
) -> Result<(), TestCaseError> {
    let compiled = compiled_for::<T>();
    // What the model sees is the document enforced.
    prop_assert_eq!(compiled.schema(), &schema_for::<T>());
    let valid = compiled.is_valid(value);
    let typed = serde_json::from_value::<T>(value.clone()).is_ok();
    prop_assert_eq!(
        valid,
        typed && closed(value, fields),
        "{} on {}: validator {}, deserializes {}",
        std::any::type_name::<T>(),
        value,
        valid,
        typed
    );
    Ok(())
}

macro_rules! property {
    ($test:ident, $ty:ty, $fields:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
            #[test]
            fn $test(value in near($fields)) {
                check::<$ty>(&value, $fields)?;
            }
        }
    };
}

property!(query, SearchProductsInput, &[("query", Field::Str)]);
property!(
    cart_change,
    AddToCartInput,
    &[("user", Field::Str), ("sku", Field::Str)]
);
property!(
    recommend_for,
    RecommendInput,
    &[("cart", Field::Strings), ("exclude", Field::Strings)]
);
property!(
    reserve_request,
    ReserveInventoryInput,
    &[("sku", Field::Str)]
);
property!(
    reservation,
    ReleaseInventoryInput,
    &[("reservation_id", Field::Str)]
);
property!(
    charge_request,
    ChargePaymentInput,
    &[
        ("user", Field::Str),
        ("card", Field::Str),
        ("cents", Field::U64)
    ]
);
property!(
    receipt_request,
    SendReceiptInput,
    &[("user", Field::Str), ("payment_id", Field::Str)]
);
property!(order_id, OrderId, &[("order_id", Field::Str)]);
property!(
    refund_request,
    RefundRequest,
    &[
        ("run_id", Field::Str),
        ("order_id", Field::Str),
        ("amount_cents", Field::U64)
    ]
);
property!(
    reply,
    Reply,
    &[("customer", Field::Str), ("text", Field::Str)]
);

/// The cases the issue names, on the example schemas: an unknown field, an array in place
/// of the object, an amount that is not a whole number.
#[test]
fn the_named_hostile_inputs_are_refused() {
    let refund = compiled_for::<RefundRequest>();
    let ok = json!({"run_id": "r", "order_id": "o", "amount_cents": 100});
    assert!(refund.is_valid(&ok));
    assert!(
        !refund
            .is_valid(&json!({"run_id": "r", "order_id": "o", "amount_cents": 100, "admin": true}))
    );
    assert!(!refund.is_valid(&json!(["r", "o", 100])));
    assert!(!refund.is_valid(&json!({"run_id": "r", "order_id": "o", "amount_cents": -5})));
    // serde alone accepts the first two.
    assert!(serde_json::from_value::<RefundRequest>(json!(["r", "o", 100])).is_ok());
}
