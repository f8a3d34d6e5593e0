//! The validation every answer passes before anything runs: names byte for byte, arguments
//! parsed with duplicate keys refused, bounded in size and depth, and checked against the
//! option's advertised schema; each refusal with its stable [`RejectionCode`].

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Decision, OptionKind, RawChoice, RouteOption, RouterReply, ToolCall};

/// Why an answer (or an ask) did not give a decision. Stored by its string form, which is
/// stable: new codes may be added, existing ones never change meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RejectionCode {
    /// No option was chosen.
    #[serde(rename = "decision.none")]
    NoChoice,
    /// More than one option was chosen.
    #[serde(rename = "decision.several")]
    Several,
    /// The model refused.
    #[serde(rename = "decision.refused")]
    Refused,
    /// The answer was cut short (token limit).
    #[serde(rename = "decision.truncated")]
    Truncated,
    /// The chosen name is not an offered option.
    #[serde(rename = "decision.unknown_option")]
    UnknownOption,
    /// The arguments are not JSON.
    #[serde(rename = "decision.invalid_json")]
    InvalidJson,
    /// An object in the answer (arguments or the provider's envelope) repeats a key.
    #[serde(rename = "decision.duplicate_key")]
    DuplicateKey,
    /// The arguments are larger than [`MAX_ARGUMENT_BYTES`].
    #[serde(rename = "decision.too_large")]
    TooLarge,
    /// The arguments nest deeper than [`MAX_ARGUMENT_DEPTH`].
    #[serde(rename = "decision.too_deep")]
    TooDeep,
    /// The arguments break the schema the option was offered with.
    #[serde(rename = "decision.schema_violation")]
    SchemaViolation,
    /// The arguments fit the schema but not the input type.
    #[serde(rename = "decision.invalid_arguments")]
    InvalidArguments,
    /// The ask took longer than the decision timeout.
    #[serde(rename = "ask.timeout")]
    AskTimeout,
    /// The provider could not be reached, or stayed overloaded through its retries.
    #[serde(rename = "ask.unavailable")]
    AskUnavailable,
    /// The provider answered 429 for a model whose asks are rate limited
    /// ([`RateLimit::asks`](crate::store::RateLimit::asks)): the limit is paused for every
    /// worker and the ask is made again at its turn, without counting against
    /// `max_reasks` (the run waits, visibly, as long as the provider asks).
    #[serde(rename = "ask.rate_limited")]
    AskRateLimited,
    /// The provider refused the credentials.
    #[serde(rename = "ask.auth")]
    AskAuth,
    /// The provider answered with an error that will not pass.
    #[serde(rename = "ask.failed")]
    AskFailed,
    /// A successful status whose body is not the provider's shape (HTML, empty, not JSON).
    #[serde(rename = "ask.malformed")]
    AskMalformed,
    /// The answer contradicts itself ([`Conflict`](super::Conflict)): two end reasons, a part that started
    /// twice or went on after it ended.
    #[serde(rename = "decision.contradictory")]
    Contradictory,
    /// The answer ended unfinished for a reason that is neither a truncation nor a refusal.
    #[serde(rename = "decision.unfinished")]
    Unfinished,
    /// The answer carries a configured secret (plainly or encoded: JSON escapes, base64,
    /// hex, percent-encoding): refused as an attempt to send it out, nothing runs.
    #[serde(rename = "decision.exfiltration")]
    Exfiltration,
}

impl RejectionCode {
    /// Every code, in declaration order.
    pub const ALL: [Self; 20] = [
        Self::NoChoice,
        Self::Several,
        Self::Refused,
        Self::Truncated,
        Self::UnknownOption,
        Self::InvalidJson,
        Self::DuplicateKey,
        Self::TooLarge,
        Self::TooDeep,
        Self::SchemaViolation,
        Self::InvalidArguments,
        Self::AskTimeout,
        Self::AskUnavailable,
        Self::AskRateLimited,
        Self::AskAuth,
        Self::AskFailed,
        Self::AskMalformed,
        Self::Contradictory,
        Self::Unfinished,
        Self::Exfiltration,
    ];

    /// The stored form (`decision.schema_violation`, `ask.timeout`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoChoice => "decision.none",
            Self::Several => "decision.several",
            Self::Refused => "decision.refused",
            Self::Truncated => "decision.truncated",
            Self::UnknownOption => "decision.unknown_option",
            Self::InvalidJson => "decision.invalid_json",
            Self::DuplicateKey => "decision.duplicate_key",
            Self::TooLarge => "decision.too_large",
            Self::TooDeep => "decision.too_deep",
            Self::SchemaViolation => "decision.schema_violation",
            Self::InvalidArguments => "decision.invalid_arguments",
            Self::AskTimeout => "ask.timeout",
            Self::AskUnavailable => "ask.unavailable",
            Self::AskRateLimited => "ask.rate_limited",
            Self::AskAuth => "ask.auth",
            Self::AskFailed => "ask.failed",
            Self::AskMalformed => "ask.malformed",
            Self::Contradictory => "decision.contradictory",
            Self::Unfinished => "decision.unfinished",
            Self::Exfiltration => "decision.exfiltration",
        }
    }

    /// The code with this stored form.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether the ask itself failed (no answer to judge), as opposed to an answer rejected.
    /// A failed ask is not fed back to the model: there was nothing it said to correct.
    #[must_use]
    pub const fn is_ask_failure(self) -> bool {
        matches!(
            self,
            Self::AskTimeout
                | Self::AskUnavailable
                | Self::AskRateLimited
                | Self::AskAuth
                | Self::AskFailed
                | Self::AskMalformed
        )
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for RejectionCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Why an answer was rejected; journaled with its code and fed back on the re-ask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Rejection {
    /// Stable code.
    pub code: RejectionCode,
    /// What was wrong, for the model and the operator.
    pub message: String,
}

impl Rejection {
    /// A rejection.
    pub fn new(code: RejectionCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Largest arguments accepted, in bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024;
/// Deepest nesting of arguments accepted.
pub const MAX_ARGUMENT_DEPTH: usize = 32;

/// Validate a reply against the options offered. Equivalent to [`validate_redacted`] with
/// no redaction.
///
/// # Errors
/// A [`Rejection`] saying what is wrong; nothing may execute.
pub fn validate(
    options: &[RouteOption],
    reply: &RouterReply,
    check_input: &dyn Fn(&str, &Value) -> Result<(), String>,
) -> Result<Decision, Rejection> {
    validate_redacted(options, reply, check_input, &|s| s.to_owned())
}

/// Validate a reply against the options offered, in this order:
///
/// 1. the reply: no [`Conflict`](super::Conflict) (two end reasons, several candidate messages, a repeated
///    key, a part restarted or continued after its end, an unfinished end), no refusal, not
///    truncated, no choice carrying a secret `redact` would change (a configured secret,
///    plain or encoded: [`RejectionCode::Exfiltration`]), exactly one choice;
/// 2. the name: exactly an offered option (no case folding, trimming or Unicode
///    normalization, so `chargePayment`, `Payment `, a Cyrillic `Р` are unknown options);
/// 3. the arguments' text: at most [`MAX_ARGUMENT_BYTES`], nesting at most
///    [`MAX_ARGUMENT_DEPTH`], JSON with no repeated key in any object (empty text reads as
///    `{}`);
/// 4. the option's advertised schema ([`RouteOption::schema`], the very document sent to the
///    model), with a JSON Schema validator compiled once per schema per process: types,
///    ranges, lengths, patterns, enum values, required and unknown fields at every depth;
///    an option offered without a schema takes the closed empty object;
/// 5. for tools, `check_input(tool, input)`: the input's type (the runner deserializes into
///    it with [`crate::DynTool::check_typed`]).
///
/// Every piece of the answer quoted in a rejection's message passes through `redact`
/// before it is shortened, so a secret is never cut into pieces that escape redaction.
///
/// # Errors
/// A [`Rejection`] saying what is wrong; nothing may execute.
pub fn validate_redacted(
    options: &[RouteOption],
    reply: &RouterReply,
    check_input: &dyn Fn(&str, &Value) -> Result<(), String>,
    redact: &dyn Fn(&str) -> String,
) -> Result<Decision, Rejection> {
    validate_answer(options, reply, check_input, redact, 1)
}

/// [`validate_redacted`] for a state whose answers may call up to `tools_per_answer` tools
/// at once: an answer of several choices is accepted when they are all tools, at most
/// `tools_per_answer` of them, and each passes every check a single choice passes; one
/// choice that does not rejects the whole answer (nothing runs), with the rejection of the
/// first that fails.
///
/// # Errors
/// A [`Rejection`] saying what is wrong; nothing may execute.
pub fn validate_answer(
    options: &[RouteOption],
    reply: &RouterReply,
    check_input: &dyn Fn(&str, &Value) -> Result<(), String>,
    redact: &dyn Fn(&str) -> String,
    tools_per_answer: u32,
) -> Result<Decision, Rejection> {
    let quote = |s: &str, max: usize| truncate(&redact(s), max);
    if let Some(conflict) = reply.conflicts.first() {
        return Err(Rejection::new(
            conflict.code(),
            quote(&conflict.to_string(), 300),
        ));
    }
    if let Some(refusal) = &reply.refusal {
        return Err(Rejection::new(
            RejectionCode::Refused,
            format!("the model refused: {}", quote(refusal, 200)),
        ));
    }
    if reply.truncated {
        return Err(Rejection::new(
            RejectionCode::Truncated,
            "the answer was cut short; answer with one option only",
        ));
    }
    // The one redactor defines what a secret looks like, in every encoding it knows: a
    // choice it would change carries one, and nothing that carries one may run.
    if let Some(choice) = (reply.choices.iter())
        .find(|c| redact(&c.name) != c.name || redact(&c.arguments) != c.arguments)
    {
        return Err(Rejection::new(
            RejectionCode::Exfiltration,
            format!(
                "the call of `{}` carries a secret; nothing that carries one runs",
                quote(&choice.name, 80)
            ),
        ));
    }
    let choice = match reply.choices.as_slice() {
        [] => {
            return Err(Rejection::new(
                RejectionCode::NoChoice,
                "no option was chosen; call exactly one of the offered options",
            ));
        }
        [one] => one,
        many => return validate_calls(options, many, check_input, &quote, tools_per_answer),
    };
    validate_choice(options, choice, check_input, &quote)
}

/// Several choices: all tools, at most `max` of them, each one valid.
fn validate_calls(
    options: &[RouteOption],
    many: &[RawChoice],
    check_input: &dyn Fn(&str, &Value) -> Result<(), String>,
    quote: &dyn Fn(&str, usize) -> String,
    max: u32,
) -> Result<Decision, Rejection> {
    let n = many.len();
    if max <= 1 {
        return Err(Rejection::new(
            RejectionCode::Several,
            format!("{n} options were chosen; choose exactly one"),
        ));
    }
    if u32::try_from(n).map_or(true, |n| n > max) {
        return Err(Rejection::new(
            RejectionCode::Several,
            format!("{n} tools were called; call at most {max} at once"),
        ));
    }
    let mut calls = Vec::with_capacity(n);
    for choice in many {
        match validate_choice(options, choice, check_input, quote)? {
            Decision::Tool { tool, input } => calls.push(ToolCall { tool, input }),
            _ => {
                return Err(Rejection::new(
                    RejectionCode::Several,
                    format!(
                        "`{}` is a transition, chosen together with other options; choose one \
                         transition alone, or only tools",
                        quote(&choice.name, 80)
                    ),
                ));
            }
        }
    }
    Ok(Decision::Tools { calls })
}

/// One choice: an offered option, with arguments that fit it.
fn validate_choice(
    options: &[RouteOption],
    choice: &RawChoice,
    check_input: &dyn Fn(&str, &Value) -> Result<(), String>,
    quote: &dyn Fn(&str, usize) -> String,
) -> Result<Decision, Rejection> {
    let Some(option) = options.iter().find(|o| o.name == choice.name) else {
        let offered: Vec<&str> = options.iter().map(|o| o.name.as_str()).collect();
        return Err(Rejection::new(
            RejectionCode::UnknownOption,
            format!(
                "`{}` is not an option in this state; the options are: {}",
                quote(&choice.name, 80),
                offered.join(", ")
            ),
        ));
    };
    let arguments = parse_arguments(&choice.arguments)?;
    let schema = option.schema.as_ref().map_or_else(
        || std::borrow::Cow::Owned(crate::schema::closed_empty_object()),
        std::borrow::Cow::Borrowed,
    );
    let compiled = crate::schema::compiled(&schema).map_err(|e| {
        Rejection::new(
            RejectionCode::SchemaViolation,
            format!("option `{}` was offered with {e}", option.name),
        )
    })?;
    compiled.check(&arguments).map_err(|e| {
        // A transition that declares no argument is offered with the closed empty object.
        let hint = if option.kind == OptionKind::Transition
            && *schema == crate::schema::closed_empty_object()
        {
            format!(
                "; `{}` takes no arguments: call it with `{{}}`",
                option.name
            )
        } else {
            String::new()
        };
        Rejection::new(
            RejectionCode::SchemaViolation,
            format!(
                "arguments of `{}` break its schema: {}{hint}",
                option.name,
                quote(&e, 400)
            ),
        )
    })?;
    match option.kind {
        OptionKind::Transition => Ok(Decision::Transition {
            to: option.name.clone(),
            arguments,
        }),
        OptionKind::Tool => {
            check_input(&option.name, &arguments).map_err(|e| {
                Rejection::new(
                    RejectionCode::InvalidArguments,
                    format!(
                        "arguments of `{}` do not match its input: {}",
                        option.name,
                        quote(&e, 300)
                    ),
                )
            })?;
            Ok(Decision::Tool {
                tool: option.name.clone(),
                input: arguments,
            })
        }
    }
}

/// The second half of checking a transition the model chose in `state`: its arguments,
/// which [`validate_answer`] checked against the schema offered, must also deserialize into
/// the transition's declared type (`to(Payment(args = PayArgs))`), as a tool's input must
/// into its input type. Any other decision, and a transition that declares no argument,
/// passes as it is.
///
/// # Errors
/// A [`Rejection`] with [`RejectionCode::InvalidArguments`]; nothing may execute.
pub fn check_transition_arguments(
    state: &crate::graph::StateDescription,
    decision: Decision,
    redact: &dyn Fn(&str) -> String,
) -> Result<Decision, Rejection> {
    if let Decision::Transition { to, arguments } = &decision
        && let Some(declared) = state.arguments_of(to)
        && let Err(e) = declared.check_typed(arguments)
    {
        return Err(Rejection::new(
            RejectionCode::InvalidArguments,
            format!(
                "arguments of `{to}` do not match its argument `{}`: {}",
                declared.type_name,
                truncate(&redact(&e), 300)
            ),
        ));
    }
    Ok(decision)
}

fn parse_arguments(raw: &str) -> Result<Value, Rejection> {
    if raw.len() > MAX_ARGUMENT_BYTES {
        return Err(Rejection::new(
            RejectionCode::TooLarge,
            format!(
                "arguments are {} bytes; the limit is {MAX_ARGUMENT_BYTES}",
                raw.len()
            ),
        ));
    }
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    // Check depth on the raw text before parsing, so hostile nesting never reaches the parser.
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                depth += 1;
                if depth > MAX_ARGUMENT_DEPTH {
                    return Err(Rejection::new(
                        RejectionCode::TooDeep,
                        format!("arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"),
                    ));
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    crate::json::from_str_unique(raw).map_err(|e| match e {
        crate::json::JsonError::DuplicateKey { .. } => Rejection::new(
            RejectionCode::DuplicateKey,
            format!("arguments repeat a key: {e}; give each key once"),
        ),
        crate::json::JsonError::Syntax(_) => Rejection::new(
            RejectionCode::InvalidJson,
            format!("arguments are not valid JSON: {e}"),
        ),
    })
}

/// At most `max` bytes of `s`, cut at a character boundary, with `…` when cut. Callers
/// redact first: a secret cut in two no longer matches the redactor.
#[must_use]
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
