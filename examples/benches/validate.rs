//! What checking an answer costs per decision: `router::validate` on the checkout agent's
//! `Review` options (two transitions and `SearchProducts`), against deserializing the same
//! arguments into the typed input alone, measured in the same run. Validators are compiled
//! once (the first decision); the figures are for every decision after it.
//!
//! ```sh
//! cargo bench -p examples --bench validate
//! ```

use std::hint::black_box;
use std::time::Instant;

use durable_agents::router::{OptionKind, RouteOption, ScriptedRouter, validate};
use durable_agents::schema::{closed_empty_object, schema_for};
use examples::checkout::{ChargePaymentInput, SearchProductsInput};
use serde_json::Value;

const ROUNDS: usize = 5;
const PER_ROUND: u32 = 50_000;

fn options() -> Vec<RouteOption> {
    let transition = |name: &str| RouteOption {
        kind: OptionKind::Transition,
        name: name.to_owned(),
        description: String::new(),
        schema: Some(closed_empty_object()),
    };
    vec![
        transition("Reserving"),
        transition("Browsing"),
        RouteOption {
            kind: OptionKind::Tool,
            name: "SearchProducts".to_owned(),
            description: String::new(),
            schema: Some(schema_for::<SearchProductsInput>()),
        },
        RouteOption {
            kind: OptionKind::Tool,
            name: "ChargePayment".to_owned(),
            description: String::new(),
            schema: Some(schema_for::<ChargePaymentInput>()),
        },
    ]
}

fn typed(tool: &str, input: &Value) -> Result<(), String> {
    match tool {
        "SearchProducts" => {
            serde_json::from_value::<SearchProductsInput>(input.clone()).map(|_| ())
        }
        _ => serde_json::from_value::<ChargePaymentInput>(input.clone()).map(|_| ()),
    }
    .map_err(|e| e.to_string())
}

/// Nanoseconds per call of `f`, the best of the rounds.
fn per_call(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..PER_ROUND {
            f();
        }
        best = best.min(started.elapsed().as_secs_f64() * 1e9 / f64::from(PER_ROUND));
    }
    best
}

fn main() {
    let options = options();
    let cases = [
        ("SearchProducts", r#"{"query":"lamp"}"#),
        (
            "ChargePayment",
            r#"{"user":"ada","card":"4242","cents":1299}"#,
        ),
        ("Reserving", "{}"),
    ];
    println!("answer                  validate µs   deserialize µs   ratio");
    for (name, args) in cases {
        let reply = ScriptedRouter::choose(name, args);
        assert!(validate(&options, &reply, &typed).is_ok());
        let full = per_call(|| {
            black_box(validate(black_box(&options), black_box(&reply), &typed).is_ok());
        });
        let alone = per_call(|| match name {
            "SearchProducts" => {
                black_box(serde_json::from_str::<SearchProductsInput>(black_box(args)).is_ok());
            }
            "ChargePayment" => {
                black_box(serde_json::from_str::<ChargePaymentInput>(black_box(args)).is_ok());
            }
            _ => {
                black_box(serde_json::from_str::<Value>(black_box(args)).is_ok());
            }
        });
        println!(
            "{name:<22} {:>11.2} {:>16.2} {:>7.1}x",
            full / 1000.0,
            alone / 1000.0,
            full / alone
        );
    }
}
