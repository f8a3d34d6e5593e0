//! Configuration from environment variables (through a map: tests never touch the process
//! environment).

use std::collections::HashMap;
use std::time::Duration;

use agent_llm::{AnthropicConfig, ConfigError, OpenAiConfig, router_from_lookup};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn missing(err: ConfigError) -> &'static str {
    match err {
        ConfigError::Missing { name, .. } => name,
        other => panic!("expected a missing variable, got {other:?}"),
    }
}

#[test]
fn nothing_configured_means_no_router() {
    assert!(router_from_lookup(&env(&[])).unwrap().is_none());
    // A key lying around is not enough: the provider must be chosen explicitly.
    let lookup = env(&[("OPENAI_API_KEY", "sk-x"), ("ANTHROPIC_API_KEY", "sk-y")]);
    assert!(router_from_lookup(&lookup).unwrap().is_none());
    assert!(
        router_from_lookup(&env(&[("AGENT_LLM_PROVIDER", "  ")]))
            .unwrap()
            .is_none()
    );
}

#[test]
fn each_provider_is_built_from_its_variables() {
    let openai = env(&[
        ("AGENT_LLM_PROVIDER", "openai"),
        ("OPENAI_API_KEY", "sk-secret-value-1234"),
        ("OPENAI_MODEL", "gpt-4.1-mini"),
    ]);
    let router = router_from_lookup(&openai).unwrap().unwrap();
    let debug = format!("{router:?}");
    assert!(debug.contains("OpenAiRouter") && debug.contains("gpt-4.1-mini"));
    assert!(!debug.contains("sk-secret-value-1234"), "{debug}");

    let ollama = env(&[
        ("AGENT_LLM_PROVIDER", "Ollama"),
        ("OPENAI_MODEL", "llama3.1"),
    ]);
    let router = router_from_lookup(&ollama).unwrap().unwrap();
    assert!(format!("{router:?}").contains("localhost:11434"));

    let anthropic = env(&[
        ("AGENT_LLM_PROVIDER", "anthropic"),
        ("ANTHROPIC_API_KEY", "sk-ant-secret-5678"),
        ("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
    ]);
    let router = router_from_lookup(&anthropic).unwrap().unwrap();
    let debug = format!("{router:?}");
    assert!(debug.contains("AnthropicRouter"));
    assert!(!debug.contains("sk-ant-secret-5678"), "{debug}");
}

#[test]
fn missing_variables_are_named() {
    let err = router_from_lookup(&env(&[("AGENT_LLM_PROVIDER", "openai")])).unwrap_err();
    assert_eq!(missing(err), "OPENAI_MODEL");

    let err = router_from_lookup(&env(&[
        ("AGENT_LLM_PROVIDER", "openai"),
        ("OPENAI_MODEL", "gpt-4.1-mini"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("`OPENAI_API_KEY`"), "{err}");
    assert_eq!(missing(err), "OPENAI_API_KEY");

    // A compatible server needs no key.
    let config = OpenAiConfig::from_lookup(
        "https://api.openai.com/v1",
        &env(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
            ("OPENAI_MODEL", "qwen"),
        ]),
    )
    .unwrap();
    assert!(config.api_key.is_none());

    let err = AnthropicConfig::from_lookup(&env(&[("ANTHROPIC_MODEL", "m")])).unwrap_err();
    assert_eq!(missing(err), "ANTHROPIC_API_KEY");
    let err = AnthropicConfig::from_lookup(&env(&[("ANTHROPIC_API_KEY", "k")])).unwrap_err();
    assert_eq!(missing(err), "ANTHROPIC_MODEL");
    // Empty counts as unset.
    let err =
        AnthropicConfig::from_lookup(&env(&[("ANTHROPIC_API_KEY", ""), ("ANTHROPIC_MODEL", "m")]))
            .unwrap_err();
    assert_eq!(missing(err), "ANTHROPIC_API_KEY");
}

#[test]
fn unusable_values_are_reported_without_echoing_them() {
    let err = router_from_lookup(&env(&[("AGENT_LLM_PROVIDER", "gemini")])).unwrap_err();
    assert!(matches!(err, ConfigError::UnknownProvider(ref p) if p == "gemini"));

    let err = AnthropicConfig::from_lookup(&env(&[
        ("ANTHROPIC_API_KEY", "k"),
        ("ANTHROPIC_MODEL", "m"),
        ("AGENT_LLM_MAX_TOKENS", "lots"),
    ]))
    .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                name: "AGENT_LLM_MAX_TOKENS",
                ..
            }
        ),
        "{err:?}"
    );

    let err = OpenAiConfig::from_lookup(
        "https://api.openai.com/v1",
        &env(&[
            ("OPENAI_BASE_URL", "ftp://user:hunter2@example.invalid"),
            ("OPENAI_MODEL", "m"),
        ]),
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::BaseUrl(_)));
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn shared_settings_apply() {
    let config = AnthropicConfig::from_lookup(&env(&[
        ("ANTHROPIC_API_KEY", "k"),
        ("ANTHROPIC_MODEL", "m"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
        ("AGENT_LLM_MAX_TOKENS", "300"),
        ("AGENT_LLM_TIMEOUT_SECS", "7"),
        ("AGENT_LLM_MAX_RETRIES", "0"),
    ]))
    .unwrap();
    assert_eq!(config.max_tokens, 300);
    assert_eq!(config.http.timeout, Duration::from_secs(7));
    assert_eq!(config.http.max_retries, 0);
    assert_eq!(config.base_url, "http://127.0.0.1:9/");
    assert!(!format!("{config:?}").contains("\"k\""));
}
