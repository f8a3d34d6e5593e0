//! Property: whatever a router answers, an accepted decision names an offered option of the
//! right kind, with arguments that are exactly what the model wrote and that fit.
//!
//! Replies mix offered names, lookalikes (case, whitespace, Cyrillic and fullwidth letters,
//! zero-width characters), names legal elsewhere and junk, with random JSON or junk
//! arguments, refusals and truncations.

use durable_agents::router::{
    Decision, OptionKind, RawChoice, RouteOption, RouterReply, validate, validate_answer,
};
use proptest::prelude::*;
use serde_json::Value;

/// Names an agent might use; the ones not offered in a case are "legal elsewhere".
const POOL: &[&str] = &[
    "Payment",
    "Browsing",
    "Review",
    "Done",
    "Failed",
    "ReserveInventory",
    "ReleaseInventory",
    "ChargePayment",
    "search_products",
    "get_cart",
];

fn kind() -> impl Strategy<Value = OptionKind> {
    prop_oneof![Just(OptionKind::Transition), Just(OptionKind::Tool)]
}

fn options() -> impl Strategy<Value = Vec<RouteOption>> {
    let name = prop_oneof![
        3 => proptest::sample::select(POOL).prop_map(str::to_owned),
        1 => "[A-Za-z][A-Za-z0-9_]{0,12}",
    ];
    proptest::collection::vec((kind(), name), 1..6).prop_map(|raw| {
        let mut seen = std::collections::HashSet::new();
        raw.into_iter()
            .filter(|(_, n)| seen.insert(n.clone()))
            .map(|(kind, name)| RouteOption {
                kind,
                schema: (kind == OptionKind::Tool).then(|| serde_json::json!({"type": "object"})),
                name,
                description: String::new(),
            })
            .collect()
    })
}

/// A name that looks like `name` but is not it.
fn lookalike(name: &str, how: u8, at: usize) -> String {
    let confusable = |c: char| match c {
        'a' => '\u{430}',
        'e' => '\u{435}',
        'o' => '\u{43e}',
        'p' => '\u{440}',
        'c' => '\u{441}',
        'P' => '\u{420}',
        'C' => '\u{421}',
        'R' => '\u{211c}',
        'y' => '\u{443}',
        other if other.is_ascii_alphabetic() => {
            // Fullwidth form of any other ASCII letter.
            char::from_u32(other as u32 - 0x21 + 0xff01).unwrap_or('\u{ff1f}')
        }
        _ => '\u{ff3f}',
    };
    let chars: Vec<char> = name.chars().collect();
    let i = at % chars.len().max(1);
    match how % 8 {
        0 => {
            name.to_lowercase()
                + if name.chars().all(|c| !c.is_uppercase()) {
                    "_"
                } else {
                    ""
                }
        }
        1 => format!("{name} "),
        2 => format!(" {name}"),
        3 => format!("{name}\u{200b}"),
        4 => {
            let mut out: String = chars[..i].iter().collect();
            out.push('\u{200d}');
            out.extend(&chars[i..]);
            out
        }
        5 => chars
            .iter()
            .enumerate()
            .map(|(j, c)| if j == i { confusable(*c) } else { *c })
            .collect(),
        6 => {
            name.to_uppercase()
                + if name.chars().all(|c| !c.is_lowercase()) {
                    "X"
                } else {
                    ""
                }
        }
        _ => format!("{name}\t"),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => json_value().prop_map(|v| v.to_string()),
        1 => Just(String::new()),
        1 => "\\PC{0,40}",
        1 => json_value().prop_map(|v| {
            // Truncated JSON.
            let s = v.to_string();
            let mut end = s.len() / 2;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_owned()
        }),
        1 => (1usize..80).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d))),
    ]
}

/// A reply whose names come from the offered options, lookalikes, elsewhere and junk.
fn reply_for(options: Vec<RouteOption>) -> impl Strategy<Value = (Vec<RouteOption>, RouterReply)> {
    let names: Vec<String> = options.iter().map(|o| o.name.clone()).collect();
    let name = prop_oneof![
        4 => proptest::sample::select(names.clone()),
        3 => (proptest::sample::select(names), any::<u8>(), any::<usize>())
            .prop_map(|(n, how, at)| lookalike(&n, how, at)),
        2 => proptest::sample::select(POOL).prop_map(str::to_owned),
        1 => "\\PC{0,16}",
    ];
    let choice = (name, arguments())
        .prop_map(|(name, arguments)| RawChoice { name, arguments })
        .boxed();
    let choices = prop_oneof![
        1 => Just(vec![]),
        6 => choice.clone().prop_map(|c| vec![c]),
        1 => proptest::collection::vec(choice, 2..4),
    ];
    let refusal = proptest::option::weighted(0.1, "\\PC{0,20}");
    let truncated = proptest::bool::weighted(0.1);
    (Just(options), choices, refusal, truncated).prop_map(
        |(options, choices, refusal, truncated)| {
            (
                options,
                RouterReply {
                    choices,
                    raw_output: String::new(),
                    model: "proptest".into(),
                    input_tokens: None,
                    output_tokens: None,
                    refusal,
                    truncated,
                    end_reason: None,
                    conflicts: Vec::new(),
                    cost: None,
                },
            )
        },
    )
}

/// A tool input type: an object whose values are not strings longer than 8 characters.
fn check_input(_tool: &str, input: &Value) -> Result<(), String> {
    match input {
        Value::Object(m) if m.values().all(|v| v.as_str().is_none_or(|s| s.len() <= 8)) => Ok(()),
        Value::Object(_) => Err("a string field is too long".into()),
        _ => Err("expected an object".into()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_accepted_decision_is_an_offered_option_of_the_right_kind(
        (options, reply) in options().prop_flat_map(reply_for)
    ) {
        let outcome = validate(&options, &reply, &check_input);
        let Ok(decision) = outcome else {
            // Rejected: fine, nothing runs. But a lookalike or junk name must never be
            // accepted, so rejection is the only outcome for those below.
            return Ok(());
        };
        prop_assert!(reply.refusal.is_none(), "accepted a refusal");
        prop_assert!(!reply.truncated, "accepted a truncated answer");
        prop_assert_eq!(reply.choices.len(), 1, "accepted several or no choices");
        let choice = &reply.choices[0];
        // Empty arguments read as the empty object, for tools and transitions alike.
        let parsed: Value = if choice.arguments.trim().is_empty() {
            Value::Object(serde_json::Map::new())
        } else {
            serde_json::from_str(&choice.arguments).expect("accepted arguments parse")
        };
        match decision {
            Decision::Transition { to, arguments } => {
                prop_assert_eq!(&to, &choice.name);
                prop_assert!(
                    options.iter().any(|o| o.kind == OptionKind::Transition && o.name == to),
                    "`{}` is not an offered transition", to
                );
                // Transitions are offered with the closed empty object: nothing else passes.
                prop_assert_eq!(&arguments, &serde_json::json!({}));
                prop_assert_eq!(arguments, parsed);
            }
            Decision::Tool { tool, input } => {
                prop_assert_eq!(&tool, &choice.name);
                prop_assert!(
                    options.iter().any(|o| o.kind == OptionKind::Tool && o.name == tool),
                    "`{}` is not an offered tool", tool
                );
                prop_assert!(check_input(&tool, &input).is_ok());
                prop_assert_eq!(input, parsed);
            }
            Decision::Tools { .. } => prop_assert!(false, "one call per answer accepted several"),
        }
    }

    /// With several calls allowed: an accepted answer of several choices is all offered
    /// tools, at most the limit, in the answer's order, each with exactly the arguments the
    /// model wrote and fitting its input; a single choice is decided as with one call.
    #[test]
    fn several_calls_are_accepted_only_when_each_one_would_be(
        (options, reply) in options().prop_flat_map(reply_for),
        limit in 1u32..4,
    ) {
        let Ok(decision) = validate_answer(&options, &reply, &check_input, &|s| s.to_owned(), limit) else {
            return Ok(());
        };
        prop_assert!(reply.refusal.is_none() && !reply.truncated);
        match decision {
            Decision::Tools { calls } => {
                prop_assert!(limit > 1 && calls.len() > 1);
                prop_assert!(calls.len() <= limit as usize);
                prop_assert_eq!(calls.len(), reply.choices.len());
                for (call, choice) in calls.iter().zip(&reply.choices) {
                    prop_assert_eq!(&call.tool, &choice.name);
                    prop_assert!(
                        options.iter().any(|o| o.kind == OptionKind::Tool && o.name == call.tool),
                        "`{}` is not an offered tool", call.tool
                    );
                    prop_assert!(check_input(&call.tool, &call.input).is_ok());
                    // Each call, alone, is what a one-call answer would decide.
                    let alone = RouterReply { choices: vec![choice.clone()], ..reply.clone() };
                    let single = validate(&options, &alone, &check_input);
                    prop_assert!(matches!(single, Ok(Decision::Tool { .. })), "{:?}", single);
                }
            }
            single => {
                prop_assert_eq!(reply.choices.len(), 1);
                prop_assert_eq!(Ok(single), validate(&options, &reply, &check_input));
            }
        }
    }

    #[test]
    fn a_name_not_offered_exactly_is_always_rejected_as_unknown(
        (options, reply) in options().prop_flat_map(reply_for)
    ) {
        // Only the single, unrefused, complete answers decide on the name.
        if reply.refusal.is_some() || reply.truncated || reply.choices.len() != 1 {
            return Ok(());
        }
        let name = &reply.choices[0].name;
        if options.iter().any(|o| &o.name == name) {
            return Ok(());
        }
        let rejection = validate(&options, &reply, &check_input).unwrap_err();
        prop_assert_eq!(rejection.code, "decision.unknown_option");
    }
}

#[test]
fn lookalikes_differ_from_their_originals() {
    for name in POOL {
        for how in 0..8 {
            for at in 0..name.len() {
                let l = lookalike(name, how, at);
                assert_ne!(&l, name, "lookalike {how} at {at} of {name}");
            }
        }
    }
}
