//! Reading a chat completion: its tool calls (or decision text), end reason and usage.

use agent_core::ErrorClass;
use agent_core::router::{Conflict, RawChoice, RouterError, RouterReply};
use serde_json::Value;

use super::Decoding;
use crate::{Ending, ambiguous_envelope, malformed, read_unique};

/// Turn a chat completion body into a [`RouterReply`], faithfully: every tool call of every
/// choice becomes a [`RawChoice`] (arguments as the raw text the model wrote; an object, as
/// some servers send, is re-serialized), a `refusal` or `finish_reason: "content_filter"`
/// becomes [`RouterReply::refusal`], `finish_reason: "length"` sets
/// [`RouterReply::truncated`], `usage` gives the token counts. `fallback_model` names the
/// model when the body does not.
///
/// Nothing ambiguous is resolved here, it is recorded in [`RouterReply::conflicts`] for
/// [`validate_answer`](agent_core::router::validate_answer) to refuse: several choices
/// ([`Conflict::Messages`]), a repeated key anywhere in the body (then the reply carries only
/// that conflict and the body), a message giving its calls both as `tool_calls` and as the
/// legacy `function_call`, an end reason that is neither complete, truncated nor refused
/// ([`Conflict::Unfinished`]).
///
/// # Errors
/// A [`ErrorClass::Permanent`] [`RouterError`] when the body is not JSON, or not a JSON
/// object with a `choices` array (or carries an `error` object).
pub fn parse_response(body: &str, fallback_model: &str) -> Result<RouterReply, RouterError> {
    reduce(body, fallback_model, Decoding::Tools)
}

/// [`parse_response`] for [`Decoding::JsonSchema`]: besides the tool calls a server may send
/// all the same, each choice's text is read as the decision, a JSON object
/// `{"option": …, "arguments": …}`. A key repeated in it (at any depth) is
/// [`Conflict::DuplicateKey`] (location `decision text`); text that is not JSON or of another
/// shape gives no choice (validation refuses that as no decision); text and tool calls in the
/// same message are two decisions, [`Conflict::DuplicateKey`] (location `message`).
///
/// # Errors
/// As [`parse_response`].
pub fn parse_json_schema_response(
    body: &str,
    fallback_model: &str,
) -> Result<RouterReply, RouterError> {
    reduce(body, fallback_model, Decoding::JsonSchema)
}

/// The one reduction of a chat completion body, for both decodings.
pub(super) fn reduce(
    body: &str,
    fallback_model: &str,
    decoding: Decoding,
) -> Result<RouterReply, RouterError> {
    let fail = |what: &str| malformed("openai", what, body);
    let root = match read_unique("openai", "envelope", body)? {
        Ok(root) => root,
        Err(conflict) => return Ok(ambiguous_envelope(body, fallback_model, conflict)),
    };
    if !root.is_object() {
        return Err(fail("response is not a JSON object"));
    }
    if let Some(error) = root.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .unwrap_or("unknown error");
        return Err(RouterError::new(
            ErrorClass::Permanent,
            format!("openai: error in response: {message}"),
        ));
    }
    let choices = root
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("response has no `choices` array"))?;
    let mut reply = RouterReply {
        model: root
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(fallback_model)
            .to_owned(),
        raw_output: body.to_owned(),
        ..RouterReply::default()
    };
    // Which of several candidate messages the model meant is not ours to guess (`n > 1`, or
    // a server that adds one): every call of every one is kept, and the answer refused.
    if choices.len() > 1 {
        reply.conflicts.push(Conflict::Messages {
            count: choices.len(),
        });
    }
    for choice in choices {
        let message = choice.get("message");
        let calls = message
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for call in calls {
            let function = call.get("function").unwrap_or(&Value::Null);
            reply.choices.push(raw_call(function));
        }
        // The legacy single `function_call`, still sent by some compatible servers. Both
        // forms in one message are the calls said twice: which is meant is a guess.
        if let Some(function) = message
            .and_then(|m| m.get("function_call"))
            .filter(|f| f.is_object())
        {
            reply.choices.push(raw_call(function));
            if !calls.is_empty() {
                reply.conflicts.push(Conflict::DuplicateKey {
                    location: "message".into(),
                    detail: "the calls are given twice, as `tool_calls` and as the legacy \
                             `function_call`"
                        .into(),
                });
            }
        }
        if decoding == Decoding::JsonSchema {
            let text = message
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !text.trim().is_empty() {
                if !calls.is_empty() || message.is_some_and(|m| m["function_call"].is_object()) {
                    reply.conflicts.push(Conflict::DuplicateKey {
                        location: "message".into(),
                        detail: "the decision is given twice, as text and as tool calls".into(),
                    });
                }
                decision_text(text, &mut reply);
            }
        }
        if reply.refusal.is_none()
            && let Some(refusal) = message
                .and_then(|m| m.get("refusal"))
                .and_then(Value::as_str)
        {
            reply.refusal = Some(refusal.to_owned());
        }
        match choice.get("finish_reason") {
            None | Some(Value::Null) => {}
            Some(reason) => {
                let reason = reason
                    .as_str()
                    .map_or_else(|| reason.to_string(), str::to_owned);
                end(&mut reply, &reason);
            }
        }
    }
    let usage = root.get("usage");
    reply.input_tokens = usage
        .and_then(|u| u.get("prompt_tokens"))
        .and_then(Value::as_u64);
    reply.output_tokens = usage
        .and_then(|u| u.get("completion_tokens"))
        .and_then(Value::as_u64);
    Ok(reply)
}

/// Record one `finish_reason` by the one table ([`Ending::openai`]).
fn end(reply: &mut RouterReply, reason: &str) {
    match &reply.end_reason {
        None => reply.end_reason = Some(reason.to_owned()),
        // Several choices ending differently: already refused as several messages, and
        // recorded so the journal shows both.
        Some(first) if first != reason => reply.conflicts.push(Conflict::EndReasons {
            first: first.clone(),
            then: reason.to_owned(),
        }),
        Some(_) => {}
    }
    match Ending::openai(reason) {
        Ending::Complete => {}
        Ending::Truncated => reply.truncated = true,
        Ending::Refused => {
            if reply.refusal.is_none() {
                reply.refusal = Some("the provider's content filter stopped the answer".into());
            }
        }
        Ending::Unfinished => reply.conflicts.push(Conflict::Unfinished {
            reason: reason.to_owned(),
        }),
    }
}

/// The decision text of the JSON-schema mode: one choice when it is exactly
/// `{"option": <string>, "arguments": <any>}`, a conflict when a key repeats, else nothing.
fn decision_text(text: &str, reply: &mut RouterReply) {
    let answer = match read_unique("openai", "decision text", text) {
        Ok(Ok(answer)) => answer,
        Ok(Err(conflict)) => {
            reply.conflicts.push(conflict);
            return;
        }
        // Free text: no decision, which validation refuses as such.
        Err(_) => return,
    };
    let option = answer.get("option").and_then(Value::as_str);
    let arguments = answer.get("arguments");
    let only_those = answer.as_object().is_some_and(|o| o.len() == 2);
    if let (Some(option), Some(arguments), true) = (option, arguments, only_those) {
        reply.choices.push(RawChoice {
            name: option.to_owned(),
            arguments: arguments.to_string(),
        });
    }
}

fn raw_call(function: &Value) -> RawChoice {
    RawChoice {
        name: function
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        arguments: match function.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        },
    }
}
