//! What the journal keeps of one ask ([`DecisionRecord`]), redacted before anything is
//! shortened.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Cost, Decision, Rejection, RouteRequest, RouterReply, truncate};

/// Raw output kept in the journal, at most this many bytes.
pub const MAX_JOURNALED_OUTPUT: usize = 4096;

/// What the journal keeps of one ask: journaled as a decision entry's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The names offered.
    pub options: Vec<String>,
    /// The validated decision, if accepted.
    pub decision: Option<Decision>,
    /// The rejection, if rejected.
    pub rejection: Option<Rejection>,
    /// The model.
    pub model: String,
    /// [`RouteRequest::prompt_hash`].
    pub prompt_hash: String,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// What the answer cost, when the router priced it ([`RouterReply::cost`]): counted in
    /// the run's spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Latency of the ask.
    pub latency_ms: u64,
    /// The raw output, redacted, then truncated to [`MAX_JOURNALED_OUTPUT`] bytes.
    pub raw_output: String,
}

impl DecisionRecord {
    /// Build the record of one ask. Every string in it (option names, model, the
    /// rejection's message, the decision's arguments, the raw output) passes through
    /// `redact` first; the raw output is truncated after.
    #[must_use]
    pub fn new(
        request: &RouteRequest,
        reply: &RouterReply,
        outcome: &Result<Decision, Rejection>,
        latency_ms: u64,
        redact: &dyn Fn(&str) -> String,
    ) -> Self {
        let mut decision = outcome.as_ref().ok().cloned();
        if let Some(
            Decision::Tool {
                tool: name,
                input: args,
            }
            | Decision::Transition {
                to: name,
                arguments: args,
            },
        ) = &mut decision
        {
            *name = redact(name);
            redact_strings(args, redact);
        }
        Self {
            options: request.options.iter().map(|o| redact(&o.name)).collect(),
            decision,
            rejection: outcome.as_ref().err().map(|r| Rejection {
                code: r.code,
                message: redact(&r.message),
            }),
            model: redact(&reply.model),
            prompt_hash: request.prompt_hash(),
            input_tokens: reply.input_tokens,
            output_tokens: reply.output_tokens,
            cost: reply.cost.clone(),
            latency_ms,
            raw_output: truncate(&redact(&reply.raw_output), MAX_JOURNALED_OUTPUT),
        }
    }
}

/// Apply `redact` to every string (and object key) in `value`.
pub fn redact_strings(value: &mut Value, redact: &dyn Fn(&str) -> String) {
    match value {
        Value::String(s) => {
            let clean = redact(s);
            if clean != *s {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_strings(v, redact)),
        Value::Object(map) => {
            let dirty: Vec<String> = map.keys().filter(|k| redact(k) != **k).cloned().collect();
            for k in dirty {
                if let Some(v) = map.remove(&k) {
                    map.insert(redact(&k), v);
                }
            }
            map.values_mut().for_each(|v| redact_strings(v, redact));
        }
        _ => {}
    }
}
