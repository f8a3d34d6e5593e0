//! Arbitrary bytes as a provider's response body, through the provider's parser and then
//! `validate`. Neither may panic, and anything `validate` accepts must be an offered option
//! of the right kind whose tool input passed the input check.
//!
//! The first byte picks the provider (even: OpenAI, odd: Anthropic); the rest is the body.

#![no_main]

use agent_core::router::{Decision, OptionKind, RouteOption, validate};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn options() -> Vec<RouteOption> {
    let option = |kind, name: &str| RouteOption {
        kind,
        name: name.to_owned(),
        description: String::new(),
        schema: (kind == OptionKind::Tool).then(|| json!({"type": "object"})),
    };
    vec![
        option(OptionKind::Transition, "Payment"),
        option(OptionKind::Transition, "Browsing"),
        option(OptionKind::Tool, "ReserveInventory"),
    ]
}

fn check_input(tool: &str, input: &Value) -> Result<(), String> {
    if tool != "ReserveInventory" {
        return Err(format!("no tool `{tool}`"));
    }
    match input.get("sku") {
        Some(Value::String(_)) => Ok(()),
        _ => Err("missing field `sku`".into()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let body = String::from_utf8_lossy(body);
    let parsed = if selector % 2 == 0 {
        agent_llm::openai::parse_response(&body, "fuzz")
    } else {
        agent_llm::anthropic::parse_response(&body, "fuzz")
    };
    let Ok(reply) = parsed else {
        return;
    };
    // The whole body: the runner redacts it, then truncates it for the journal.
    assert_eq!(reply.raw_output.as_str(), &*body);
    let options = options();
    match validate(&options, &reply, &check_input) {
        Ok(Decision::Transition { to, arguments }) => {
            assert!(
                options
                    .iter()
                    .any(|o| o.kind == OptionKind::Transition && o.name == to)
            );
            assert!(arguments.is_object());
            assert_eq!(reply.choices.len(), 1);
            assert!(reply.refusal.is_none() && !reply.truncated);
        }
        Ok(Decision::Tool { tool, input }) => {
            assert!(
                options
                    .iter()
                    .any(|o| o.kind == OptionKind::Tool && o.name == tool)
            );
            assert!(check_input(&tool, &input).is_ok());
            assert_eq!(reply.choices.len(), 1);
            assert!(reply.refusal.is_none() && !reply.truncated);
        }
        Err(rejection) => assert!(rejection.code.as_str().starts_with("decision.")),
    }
});
