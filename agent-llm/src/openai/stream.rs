//! A streamed chat completion reassembled from its chunks into the shape of a whole one.

use std::collections::BTreeMap;

use agent_core::events::TokenSink;
use agent_core::router::{Conflict, RouterError};
use serde_json::{Map, Value, json};

use crate::http::{StreamFlow, Transport};
use crate::{malformed, read_unique};

/// A streamed chat completion being reassembled from its `chat.completion.chunk`s.
#[derive(Debug)]
pub(super) struct ChunkStream {
    tokens: TokenSink,
    /// Publish argument fragments as deltas too (decisions), not only text.
    arguments: bool,
    /// `id`, `created`, `model`, `system_fingerprint`, ... of the first chunk.
    head: Map<String, Value>,
    choices: BTreeMap<u64, ChoiceAcc>,
    usage: Option<Value>,
    /// What the chunks contradict each other in (an end reason that changes, a call whose
    /// id changes, deltas after a choice ended, a chunk with a repeated key): the
    /// reassembled body cannot show it, so it is carried into the reply beside it.
    conflicts: Vec<Conflict>,
}

#[derive(Debug, Default)]
struct ChoiceAcc {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u64, CallAcc>,
    function_call: Option<CallAcc>,
    finish_reason: Option<Value>,
}

#[derive(Debug, Default)]
struct CallAcc {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl CallAcc {
    /// Add a `function` delta: fragments of the name and of the arguments, concatenated.
    fn add<'v>(&mut self, function: &'v Value) -> Option<&'v str> {
        if let Some(name) = function.get("name").and_then(Value::as_str) {
            self.name.push_str(name);
        }
        let fragment = function.get("arguments").and_then(Value::as_str)?;
        self.arguments.push_str(fragment);
        Some(fragment)
    }

    fn to_json(&self) -> Value {
        json!({"name": self.name, "arguments": self.arguments})
    }
}

impl ChunkStream {
    pub(super) fn new(tokens: TokenSink, arguments: bool) -> Self {
        Self {
            tokens,
            arguments,
            head: Map::new(),
            choices: BTreeMap::new(),
            usage: None,
            conflicts: Vec::new(),
        }
    }

    /// One event of the stream: a chunk, an error, or `[DONE]`.
    pub(super) fn event(
        &mut self,
        transport: &Transport,
        event: &str,
        data: &str,
    ) -> Result<StreamFlow, RouterError> {
        if data.trim() == "[DONE]" {
            return Ok(StreamFlow::Done);
        }
        if event == "error" {
            return Err(transport.stream_error_event(data));
        }
        let chunk = match read_unique("openai", "stream event", data) {
            Ok(Ok(chunk)) => chunk,
            // Unreadable as the provider meant it: recorded, and the stream is read no
            // further (the answer is refused whatever follows).
            Ok(Err(conflict)) => {
                self.conflicts.push(conflict);
                return Ok(StreamFlow::Done);
            }
            Err(e) => return Err(transport.redact_error(e)),
        };
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(transport.stream_error_event(data));
        }
        let Some(root) = chunk.as_object() else {
            return Err(transport.redact_error(malformed(
                "openai",
                "a stream chunk is not a JSON object",
                data,
            )));
        };
        for (key, value) in root {
            if !matches!(key.as_str(), "choices" | "usage" | "object") {
                self.head
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        if let Some(usage) = root.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        for choice in root
            .get("choices")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let choice_index = index;
            let acc = self.choices.entry(index).or_default();
            // A delta in the chunk that ends the choice is part of it; one in a later chunk
            // is not (which text or call was meant is a guess).
            let ended = acc.finish_reason.is_some();
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                match &acc.finish_reason {
                    // The first one stays in the reassembled body; the change is recorded.
                    Some(first) if first != reason => {
                        self.conflicts.push(Conflict::EndReasons {
                            first: end_text(first),
                            then: end_text(reason),
                        });
                    }
                    Some(_) => {}
                    None => acc.finish_reason = Some(reason.clone()),
                }
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if ended && carries_content(delta) {
                let what = format!("choice {index}");
                if !self
                    .conflicts
                    .contains(&Conflict::AfterEnd { what: what.clone() })
                {
                    self.conflicts.push(Conflict::AfterEnd { what });
                }
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                acc.content.get_or_insert_default().push_str(text);
                self.tokens.token(text);
            }
            if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
                acc.refusal.get_or_insert_default().push_str(text);
                self.tokens.token(text);
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                // Servers that omit `index` start a call with its `id`.
                let count = acc.tool_calls.len() as u64;
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(
                    if call.get("id").is_some_and(|id| !id.is_null()) {
                        count
                    } else {
                        count.saturating_sub(1)
                    },
                );
                let slot = acc.tool_calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    match &slot.id {
                        // Another call in the same slot: the first id stays, the restart is
                        // recorded (its fragments would otherwise be glued to the first's).
                        Some(first) if first != id => {
                            self.conflicts.push(Conflict::Restarted {
                                what: format!("tool call {index} of choice {choice_index}"),
                            });
                        }
                        Some(_) => {}
                        None => slot.id = Some(id.to_owned()),
                    }
                }
                if let Some(fragment) = call.get("function").and_then(|f| slot.add(f))
                    && self.arguments
                {
                    self.tokens.token(fragment);
                }
            }
            if let Some(function) = delta.get("function_call").filter(|f| f.is_object())
                && let Some(fragment) = acc.function_call.get_or_insert_default().add(function)
                && self.arguments
            {
                self.tokens.token(fragment);
            }
        }
        Ok(StreamFlow::More)
    }

    /// The `chat.completion` the chunks add up to, and the conflicts found on the way.
    pub(super) fn into_body(self) -> (Value, Vec<Conflict>) {
        let mut root = self.head;
        root.insert("object".into(), json!("chat.completion"));
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, c)| {
                let mut message = json!({
                    "role": "assistant",
                    "content": c.content,
                    "refusal": c.refusal,
                });
                if !c.tool_calls.is_empty() {
                    message["tool_calls"] = c
                        .tool_calls
                        .values()
                        .map(|call| {
                            json!({"id": call.id, "type": "function", "function": call.to_json()})
                        })
                        .collect();
                }
                if let Some(f) = &c.function_call {
                    message["function_call"] = f.to_json();
                }
                json!({"index": index, "message": message, "finish_reason": c.finish_reason})
            })
            .collect();
        root.insert("choices".into(), Value::Array(choices));
        root.insert("usage".into(), self.usage.unwrap_or(Value::Null));
        (Value::Object(root), self.conflicts)
    }
}

/// An end reason as text (a string as it is, anything else as JSON).
fn end_text(reason: &Value) -> String {
    reason
        .as_str()
        .map_or_else(|| reason.to_string(), str::to_owned)
}

/// Whether a delta carries any of the answer: text, a refusal, a call or a fragment of one.
fn carries_content(delta: &Value) -> bool {
    let text = |field: &str| {
        delta
            .get(field)
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
    };
    text("content")
        || text("refusal")
        || delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty())
        || delta.get("function_call").is_some_and(Value::is_object)
}
