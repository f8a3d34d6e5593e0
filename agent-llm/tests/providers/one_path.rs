//! One path for every mode: a property test. Logical answers (what the model meant: its
//! calls, how the answer ended, a refusal, several candidate messages, a stream that
//! contradicts itself) are encoded into every provider mode — OpenAI tool calls and
//! JSON-schema decoding, each whole and streamed, Anthropic whole and streamed — served over
//! HTTP, reduced by the real routers and judged by the one decision function,
//! `validate_answer`. Every mode that can express an answer must reach the same verdict
//! (the same decision, or the same rejection code); a mode that cannot express it is given
//! its closest encoding, which must still be refused. And a verdict may accept only what
//! was clean: one offered option, valid arguments, a complete (or unstated) end, no refusal,
//! one message, no contradiction.
//!
//! What each mode cannot express (see [`expressible`]):
//!
//! - a whole body (any provider) cannot say an end reason twice or restart a part: that
//!   is a repeated key in the envelope (`"finish_reason":"length","finish_reason":"tool_calls"`)
//!   or the call given twice, both refused;
//! - the JSON-schema mode has one decision text per message: several calls in one message
//!   are several JSON objects in it (not JSON: no decision), arguments that are not JSON or
//!   repeat a key make the decision text so (no decision, or a repeated key in the decision
//!   text, judged before truncation or refusal would be), and a restarted part is the text
//!   given twice;
//! - Anthropic has one message per answer (several are a repeated `content` key, or a second
//!   `message_start`), sends `input` as JSON (arguments that are not JSON arrive as a JSON
//!   string, one repeating a key is a repeated key of the envelope or of the streamed input,
//!   judged first), and says a refusal only by `stop_reason: "refusal"` (a refusal text with
//!   another end is sent as that).

use std::cell::Cell;
use std::fmt::Write as _;

use agent_core::router::{Decision, RouteRequest, Router, validate_answer};
use agent_llm::{
    AnthropicConfig, AnthropicRouter, ApiKey, Decoding, OpenAiConfig, OpenAiRouter, Streaming,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;
use crate::streaming::{openai_sse, openai_usage_chunk};

/// The offered options, and lookalikes a hostile model would try.
const NAMES: &[&str] = &[
    "Payment",
    "Browsing",
    "ReserveInventory",
    "payment",
    "Payment ",
    "\u{420}ayment",
    "ChargePayment",
    "reserveInventory",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Args {
    /// What the option's schema accepts.
    Valid,
    /// Not JSON.
    Invalid,
    /// A key twice.
    DuplicateKey,
    /// JSON the schema refuses.
    Violating,
}

#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) name: String,
    pub(crate) args: Args,
}

impl Call {
    /// The arguments as the model would write them.
    pub(crate) fn text(&self) -> String {
        let reserve = self.name.eq_ignore_ascii_case("reserveinventory");
        match (self.args, reserve) {
            (Args::Valid, true) => r#"{"sku":"a","quantity":1}"#.into(),
            (Args::Valid, false) => "{}".into(),
            (Args::Invalid, _) => r#"{"sku":"#.into(),
            (Args::DuplicateKey, _) => r#"{"sku":"a","quantity":1,"quantity":2}"#.into(),
            (Args::Violating, _) => r#"{"x":1}"#.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Complete,
    Truncated,
    Refused,
    Unfinished,
    /// The provider did not say (compatible servers omit it).
    Missing,
}

impl End {
    fn openai(self, calls: bool) -> Value {
        match self {
            Self::Complete if calls => json!("tool_calls"),
            Self::Complete => json!("stop"),
            Self::Truncated => json!("length"),
            Self::Refused => json!("content_filter"),
            // A reason this crate does not know (DeepSeek's).
            Self::Unfinished => json!("insufficient_system_resource"),
            Self::Missing => Value::Null,
        }
    }

    fn anthropic(self, calls: bool) -> Value {
        match self {
            Self::Complete if calls => json!("tool_use"),
            Self::Complete => json!("end_turn"),
            Self::Truncated => json!("max_tokens"),
            Self::Refused => json!("refusal"),
            Self::Unfinished => json!("pause_turn"),
            Self::Missing => Value::Null,
        }
    }
}

/// What a stream may do that a whole body cannot say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trick {
    None,
    /// An earlier event ends the answer with this reason, a later one with the real one.
    EndChanged(End),
    /// The first call starts again (a new id, a second `content_block_start`).
    Restarted,
}

#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// Every call, message `i % messages` holding call `i`.
    pub(crate) calls: Vec<Call>,
    pub(crate) end: End,
    pub(crate) refusal: Option<String>,
    /// Candidate messages (OpenAI's `choices`), 1 or more.
    pub(crate) messages: usize,
    pub(crate) trick: Trick,
}

impl Answer {
    fn new(
        calls: Vec<Call>,
        end: End,
        refusal: Option<String>,
        messages: usize,
        trick: Trick,
    ) -> Self {
        let mut answer = Self {
            calls,
            end,
            refusal,
            messages,
            trick,
        };
        // A change needs a real, different second reason; a restart needs a call.
        if let Trick::EndChanged(first) = answer.trick
            && (answer.end == first || answer.end == End::Missing)
        {
            answer.end = End::Complete;
        }
        if answer.trick == Trick::Restarted && answer.calls.is_empty() {
            answer.trick = Trick::None;
        }
        answer
    }

    fn message_calls(&self, k: usize) -> Vec<&Call> {
        (self.calls.iter().enumerate())
            .filter(|(i, _)| i % self.messages == k)
            .map(|(_, c)| c)
            .collect()
    }

    /// The only answers any mode may accept, and what it must decide.
    fn clean_decision(&self) -> Option<Decision> {
        let [call] = self.calls.as_slice() else {
            return None;
        };
        let clean = call.args == Args::Valid
            && matches!(self.end, End::Complete | End::Missing)
            && self.refusal.is_none()
            && self.messages == 1
            && self.trick == Trick::None;
        let arguments: Value = serde_json::from_str(&call.text()).ok()?;
        match call.name.as_str() {
            "Payment" | "Browsing" if clean => Some(Decision::Transition {
                to: call.name.clone(),
                arguments,
            }),
            "ReserveInventory" if clean => Some(Decision::Tool {
                tool: call.name.clone(),
                input: arguments,
            }),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    OpenAiToolsBody,
    OpenAiToolsStream,
    OpenAiJsonBody,
    OpenAiJsonStream,
    AnthropicBody,
    AnthropicStream,
}

impl Mode {
    pub(crate) const ALL: [Self; 6] = [
        Self::OpenAiToolsBody,
        Self::OpenAiToolsStream,
        Self::OpenAiJsonBody,
        Self::OpenAiJsonStream,
        Self::AnthropicBody,
        Self::AnthropicStream,
    ];

    pub(crate) fn streamed(self) -> bool {
        matches!(
            self,
            Self::OpenAiToolsStream | Self::OpenAiJsonStream | Self::AnthropicStream
        )
    }

    fn json_schema(self) -> bool {
        matches!(self, Self::OpenAiJsonBody | Self::OpenAiJsonStream)
    }

    fn anthropic(self) -> bool {
        matches!(self, Self::AnthropicBody | Self::AnthropicStream)
    }
}

/// Whether `mode` can say what `answer` means (the module docs list what it cannot).
fn expressible(mode: Mode, answer: &Answer) -> bool {
    let bad_args = answer
        .calls
        .iter()
        .any(|c| matches!(c.args, Args::Invalid | Args::DuplicateKey));
    let trick_ok = match answer.trick {
        Trick::None => true,
        Trick::EndChanged(_) => mode.streamed(),
        Trick::Restarted => matches!(mode, Mode::OpenAiToolsStream | Mode::AnthropicStream),
    };
    let mode_ok = if mode.json_schema() {
        !bad_args && (0..answer.messages).all(|k| answer.message_calls(k).len() <= 1)
    } else if mode.anthropic() {
        !bad_args
            && answer.messages == 1
            && (answer.refusal.is_none() || answer.end == End::Refused)
    } else {
        true
    };
    trick_ok && mode_ok
}

/// What the server sends: a body, or an event stream.
#[derive(Clone, Debug)]
pub(crate) enum Response {
    Body(String),
    Sse(String),
}

/// `text` in two fragments (split at a character boundary near its middle).
fn halves(text: &str) -> [&str; 2] {
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    [&text[..mid], &text[mid..]]
}

/// The JSON-schema decision text of one message: one object per call, concatenated, the
/// arguments written raw (so arguments that are not JSON make the text not JSON), given
/// twice for a restart.
fn decision_text(calls: &[&Call], restarted: bool) -> Option<String> {
    if calls.is_empty() {
        return None;
    }
    let mut one = String::new();
    for c in calls {
        let _ = write!(
            one,
            r#"{{"option":{},"arguments":{}}}"#,
            json!(c.name),
            c.text()
        );
    }
    Some(if restarted { one.repeat(2) } else { one })
}

pub(crate) fn openai_chunk(k: usize, delta: &Value, finish: &Value) -> Value {
    json!({
        "id": "chatcmpl-one-path", "object": "chat.completion.chunk", "created": 1_744_052_345,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": k, "delta": delta, "logprobs": null, "finish_reason": finish}],
    })
}

/// `answer` as `mode` sends it.
pub(crate) fn encode(mode: Mode, answer: &Answer) -> Response {
    match mode {
        Mode::OpenAiToolsBody | Mode::OpenAiJsonBody => openai_body_of(answer, mode.json_schema()),
        Mode::OpenAiToolsStream | Mode::OpenAiJsonStream => {
            openai_stream_of(answer, mode.json_schema())
        }
        Mode::AnthropicBody => anthropic_body_of(answer),
        Mode::AnthropicStream => anthropic_stream_of(answer),
    }
}

fn openai_body_of(answer: &Answer, json_schema: bool) -> Response {
    let restarted = answer.trick == Trick::Restarted;
    let choices: Vec<Value> = (0..answer.messages)
        .map(|k| {
            let calls = answer.message_calls(k);
            let mut message = json!({"role": "assistant", "content": null, "refusal": null});
            if k == 0
                && let Some(r) = &answer.refusal
            {
                message["refusal"] = json!(r);
            }
            if json_schema {
                message["content"] = json!(decision_text(&calls, restarted && k == 0));
            } else if !calls.is_empty() {
                let mut tool_calls: Vec<Value> = (calls.iter().enumerate())
                    .map(|(j, c)| {
                        json!({"id": format!("call_{k}_{j}"), "type": "function",
                               "function": {"name": c.name, "arguments": c.text()}})
                    })
                    .collect();
                // A whole body restarts a call only by giving it twice.
                if restarted && k == 0 {
                    let mut again = tool_calls[0].clone();
                    again["id"] = json!("call_restarted");
                    tool_calls.insert(1, again);
                }
                message["tool_calls"] = json!(tool_calls);
            }
            let finish = answer.end.openai(!calls.is_empty() && !json_schema);
            json!({"index": k, "message": message, "logprobs": null, "finish_reason": finish})
        })
        .collect();
    let body = json!({
        "id": "chatcmpl-one-path", "object": "chat.completion", "created": 1_741_570_283,
        "model": "gpt-4o-mini-2024-07-18", "choices": choices,
        "usage": {"prompt_tokens": 412, "completion_tokens": 23, "total_tokens": 435},
    })
    .to_string();
    Response::Body(match answer.trick {
        // A whole body says two end reasons only as a repeated key.
        Trick::EndChanged(first) => {
            let last = format!(r#""finish_reason":{}"#, answer.end.openai(true));
            let last_stop = format!(r#""finish_reason":{}"#, answer.end.openai(false));
            let both = |l: &str| format!(r#""finish_reason":{},{l}"#, first.openai(true));
            if body.contains(&last) {
                body.replacen(&last, &both(&last), 1)
            } else {
                body.replacen(&last_stop, &both(&last_stop), 1)
            }
        }
        _ => body,
    })
}

fn openai_stream_of(answer: &Answer, json_schema: bool) -> Response {
    let restarted = answer.trick == Trick::Restarted;
    let mut chunks = Vec::new();
    for k in 0..answer.messages {
        chunks.push(openai_chunk(
            k,
            &json!({"role": "assistant", "content": null, "refusal": null}),
            &Value::Null,
        ));
        if k == 0
            && let Some(r) = &answer.refusal
        {
            for part in halves(r) {
                chunks.push(openai_chunk(k, &json!({"refusal": part}), &Value::Null));
            }
        }
        let calls = answer.message_calls(k);
        if json_schema {
            if let Some(text) = decision_text(&calls, restarted && k == 0) {
                for part in halves(&text) {
                    chunks.push(openai_chunk(k, &json!({"content": part}), &Value::Null));
                }
            }
            continue;
        }
        for (j, call) in calls.iter().enumerate() {
            chunks.push(openai_chunk(
                k,
                &json!({"tool_calls": [{"index": j, "id": format!("call_{k}_{j}"), "type": "function",
                        "function": {"name": call.name, "arguments": ""}}]}),
                &Value::Null,
            ));
            let text = call.text();
            for part in halves(&text) {
                chunks.push(openai_chunk(
                    k,
                    &json!({"tool_calls": [{"index": j, "function": {"arguments": part}}]}),
                    &Value::Null,
                ));
            }
            // The same slot, another call.
            if restarted && k == 0 && j == 0 {
                chunks.push(openai_chunk(
                    k,
                    &json!({"tool_calls": [{"index": 0, "id": "call_restarted", "type": "function",
                            "function": {"arguments": ""}}]}),
                    &Value::Null,
                ));
            }
        }
    }
    for k in 0..answer.messages {
        let calls = !answer.message_calls(k).is_empty() && !json_schema;
        if let (Trick::EndChanged(first), 0) = (answer.trick, k) {
            chunks.push(openai_chunk(k, &json!({}), &first.openai(calls)));
        }
        chunks.push(openai_chunk(k, &json!({}), &answer.end.openai(calls)));
    }
    chunks.push(openai_usage_chunk());
    Response::Sse(openai_sse(&chunks, true))
}

/// Anthropic's `input` as text: JSON as written, or (not JSON) as a JSON string.
fn anthropic_input(call: &Call) -> String {
    let text = call.text();
    if call.args == Args::Invalid {
        json!(text).to_string()
    } else {
        text
    }
}

/// Anthropic's last end: a refusal text is said only by `stop_reason: "refusal"`.
fn anthropic_end(answer: &Answer) -> Value {
    if answer.refusal.is_some() {
        json!("refusal")
    } else {
        answer.end.anthropic(!answer.calls.is_empty())
    }
}

fn anthropic_body_of(answer: &Answer) -> Response {
    let restarted = answer.trick == Trick::Restarted;
    // Built as text: arguments repeating a key must reach the server as written.
    let contents: Vec<String> = (0..answer.messages)
        .map(|k| {
            let mut blocks = Vec::new();
            if k == 0
                && let Some(r) = &answer.refusal
            {
                blocks.push(json!({"type": "text", "text": r}).to_string());
            }
            for (j, call) in answer.message_calls(k).iter().enumerate() {
                let block = format!(
                    r#"{{"type":"tool_use","id":"toolu_{k}_{j}","name":{},"input":{}}}"#,
                    json!(call.name),
                    anthropic_input(call)
                );
                if restarted && k == 0 && j == 0 {
                    blocks.push(block.clone());
                }
                blocks.push(block);
            }
            format!(r#""content":[{}]"#, blocks.join(","))
        })
        .collect();
    let stop = anthropic_end(answer);
    let stop = match answer.trick {
        Trick::EndChanged(first) => format!(
            r#""stop_reason":{},"stop_reason":{stop}"#,
            first.anthropic(!answer.calls.is_empty())
        ),
        _ => format!(r#""stop_reason":{stop}"#),
    };
    Response::Body(format!(
        r#"{{"id":"msg_one_path","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",{},{stop},"stop_sequence":null,"usage":{{"input_tokens":20,"output_tokens":5}}}}"#,
        contents.join(",")
    ))
}

fn anthropic_stream_of(answer: &Answer) -> Response {
    let restarted = answer.trick == Trick::Restarted;
    // Events as text, for the same reason as the body.
    let mut events: Vec<(&str, String)> = Vec::new();
    let mut index = 0;
    for k in 0..answer.messages {
        events.push((
            "message_start",
            crate::streaming::anthropic_message_start().to_string(),
        ));
        if k == 0
            && let Some(r) = &answer.refusal
        {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "text", "text": ""}})
                .to_string(),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": r}})
                .to_string(),
            ));
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}).to_string(),
            ));
            index += 1;
        }
        for (j, call) in answer.message_calls(k).iter().enumerate() {
            let start = json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": format!("toolu_{k}_{j}"),
                                  "name": call.name, "input": {}}})
            .to_string();
            events.push(("content_block_start", start.clone()));
            let input = anthropic_input(call);
            for part in halves(&input) {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": part}})
                    .to_string(),
                ));
            }
            // The same index started again.
            if restarted && k == 0 && j == 0 {
                events.push(("content_block_start", start));
            }
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}).to_string(),
            ));
            index += 1;
        }
    }
    let delta = |stop: Value| {
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 5}})
        .to_string()
    };
    if let Trick::EndChanged(first) = answer.trick {
        events.push((
            "message_delta",
            delta(first.anthropic(!answer.calls.is_empty())),
        ));
    }
    events.push(("message_delta", delta(anthropic_end(answer))));
    events.push(("message_stop", json!({"type": "message_stop"}).to_string()));
    let mut sse = String::new();
    for (name, data) in &events {
        let _ = write!(sse, "event: {name}\ndata: {data}\n\n");
    }
    Response::Sse(sse)
}

/// A decision, or the rejection code (a router error's code: nothing ran either way).
pub(crate) type Verdict = Result<Decision, String>;

/// A router for `mode` against `base`.
pub(crate) fn router_for(mode: Mode, base: &str) -> Box<dyn Router> {
    let stream = if mode.streamed() {
        Streaming::Always
    } else {
        Streaming::Never
    };
    if mode.anthropic() {
        Box::new(
            AnthropicRouter::new(
                AnthropicConfig::new(ApiKey::new(ANTHROPIC_KEY), "claude-sonnet-4-5")
                    .with_base_url(base)
                    .with_http(http())
                    .with_streaming(stream),
            )
            .unwrap(),
        )
    } else {
        let decoding = if mode.json_schema() {
            Decoding::JsonSchema
        } else {
            Decoding::Tools
        };
        Box::new(
            OpenAiRouter::new(
                OpenAiConfig::new(format!("{base}/v1"), "gpt-4o-mini")
                    .with_api_key(ApiKey::new(OPENAI_KEY))
                    .with_http(http())
                    .with_streaming(stream)
                    .with_decoding(decoding),
            )
            .unwrap(),
        )
    }
}

/// Serve `response` from `server` (replacing what it served before).
pub(crate) async fn serve(server: &MockServer, response: &Response) {
    server.reset().await;
    let template = match response {
        Response::Body(b) => ResponseTemplate::new(200).set_body_raw(b.clone(), "application/json"),
        Response::Sse(s) => ResponseTemplate::new(200).set_body_raw(s.clone(), "text/event-stream"),
    };
    Mock::given(method("POST"))
        .respond_with(template)
        .mount(server)
        .await;
}

/// Ask `router` and judge its reply with the one decision function.
pub(crate) async fn verdict(router: &dyn Router, request: &RouteRequest) -> Verdict {
    match router.decide(request).await {
        Ok(reply) => validate_answer(
            &request.options,
            &reply,
            &check_input,
            &|s| s.to_owned(),
            request.tools_per_answer,
        )
        .map_err(|r| r.code.to_string()),
        Err(e) => Err(e.rejection_code().to_string()),
    }
}

fn args() -> impl Strategy<Value = Args> {
    prop_oneof![
        6 => Just(Args::Valid),
        1 => Just(Args::Invalid),
        1 => Just(Args::DuplicateKey),
        1 => Just(Args::Violating),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let name = prop_oneof![
        3 => prop::sample::select(&NAMES[..3]),
        1 => prop::sample::select(&NAMES[3..]),
    ];
    (name, args()).prop_map(|(name, args)| Call {
        name: name.to_owned(),
        args,
    })
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        6 => Just(End::Complete),
        1 => Just(End::Truncated),
        1 => Just(End::Refused),
        1 => Just(End::Unfinished),
        1 => Just(End::Missing),
    ]
}

fn trick() -> impl Strategy<Value = Trick> {
    prop_oneof![
        8 => Just(Trick::None),
        1 => Just(Trick::EndChanged(End::Truncated)),
        1 => Just(Trick::EndChanged(End::Refused)),
        1 => Just(Trick::Restarted),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    (
        // One call most often: the answers that may be accepted must come up.
        prop_oneof![
            1 => prop::collection::vec(call(), 0..1),
            4 => prop::collection::vec(call(), 1..2),
            1 => prop::collection::vec(call(), 2..3),
        ],
        end(),
        prop::option::weighted(0.1, Just("I can't help with that.".to_owned())),
        prop_oneof![6 => Just(1usize), 1 => Just(2usize)],
        trick(),
    )
        .prop_map(|(calls, end, refusal, messages, trick)| {
            Answer::new(calls, end, refusal, messages, trick)
        })
}

/// Modest, so the test stays well under a second (1 500 cases pass in about 15 s).
const CASES: u32 = 64;

#[test]
fn every_mode_that_can_express_an_answer_reaches_the_same_verdict() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // One server and one router per mode, reused by every case.
    let modes: Vec<(Mode, MockServer, Box<dyn Router>)> = rt.block_on(async {
        let mut modes = Vec::new();
        for mode in Mode::ALL {
            let server = MockServer::start().await;
            let router = router_for(mode, &server.uri());
            modes.push((mode, server, router));
        }
        modes
    });
    let request = request();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let (accepted, agreeing) = (Cell::new(0), Cell::new(0));
    runner
        .run(&answer(), |answer| {
            let verdicts: Vec<(Mode, bool, Verdict)> = rt.block_on(async {
                let mut verdicts = Vec::new();
                for (mode, server, router) in &modes {
                    serve(server, &encode(*mode, &answer)).await;
                    let v = verdict(router.as_ref(), &request).await;
                    verdicts.push((*mode, expressible(*mode, &answer), v));
                }
                verdicts
            });
            let clean = answer.clean_decision();
            let mut agreed: Option<&Verdict> = None;
            for (mode, can, v) in &verdicts {
                // Only a clean answer is ever accepted, and as what it meant.
                match (&clean, v) {
                    (Some(d), Ok(got)) => prop_assert_eq!(d, got, "{:?}", mode),
                    (None, Ok(got)) => {
                        prop_assert!(false, "{mode:?} accepted {got:?} for {answer:?}");
                    }
                    (_, Err(_)) => {}
                }
                if !can {
                    prop_assert!(v.is_err(), "{mode:?} cannot express {answer:?}: {v:?}");
                    continue;
                }
                match agreed {
                    None => agreed = Some(v),
                    Some(first) => prop_assert_eq!(
                        first,
                        v,
                        "{:?} differs for {:?}: {:#?}",
                        mode,
                        answer,
                        verdicts
                    ),
                }
            }
            // Every answer is expressible by the streamed tool calls of OpenAI at least.
            prop_assert!(agreed.is_some());
            if let Some(d) = &clean {
                prop_assert_eq!(agreed, Some(&Ok(d.clone())));
                accepted.set(accepted.get() + 1);
            }
            agreeing.set(agreeing.get() + verdicts.iter().filter(|(_, can, _)| *can).count());
            Ok(())
        })
        .unwrap();
    println!(
        "one path: {CASES} answers, {} expressible mode verdicts agreed, {} clean answers accepted",
        agreeing.get(),
        accepted.get()
    );
}
