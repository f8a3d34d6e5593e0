//! The router loop of a `route = llm` state: ask, validate, execute a chosen tool through
//! the journaled tool path, repeat until a transition is chosen.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::{Instrument, info_span};

use super::cx::{StepCx, with_heartbeat};
use super::{FaultPoint, RunnerError};
use crate::agent::StepError;
use crate::router::{
    Decision, DecisionRecord, OptionKind, RawChoice, Rejection, RejectionCode, RouteOption,
    RouteRequest, RouterError, RouterReply, ToolResultView, check_transition_arguments, truncate,
    validate_answer,
};
use crate::secrets::SealError;
use crate::store::FailureCode;
use crate::store::{CallStatus, EntryKind};

/// Tool calls the router may make in one visit when the state sets no `max_tool_calls`.
const DEFAULT_ROUTER_TOOL_CALLS: u32 = 16;

/// The legal options of the state, generated from the graph: transitions, then tools.
pub(crate) fn options(cx: &StepCx<'_>) -> Vec<RouteOption> {
    let graph = cx.inner.graph;
    let transitions = cx.state.to.iter().map(|to| RouteOption {
        kind: OptionKind::Transition,
        name: to.clone(),
        description: graph.state(to).map_or_else(String::new, |s| {
            if s.terminal {
                format!("Finish in state `{to}`.")
            } else {
                format!("Move to state `{to}`.")
            }
        }),
        schema: Some(transition_schema(cx, to)),
    });
    let tools = cx.inner.tools_in(cx.state).filter_map(|name| {
        let tool = cx.inner.tools.get(name)?;
        Some(RouteOption {
            kind: OptionKind::Tool,
            name: name.to_owned(),
            description: tool.description().to_owned(),
            schema: Some(tool.input_schema()),
        })
    });
    transitions.chain(tools).collect()
}

/// The schema a transition is offered with, and its arguments are checked against: its
/// declared argument's (`to(Payment(args = PayArgs))`), else the closed empty object, so
/// whatever the model puts there is refused instead of reaching the handler.
fn transition_schema(cx: &StepCx<'_>, to: &str) -> Value {
    cx.state
        .arguments_of(to)
        .map_or_else(crate::schema::closed_empty_object, |a| a.schema.clone())
}

/// Longest error message of a failed ask kept in the journal (after redaction).
const MAX_ASK_ERROR: usize = 1000;

/// Ask until the router chooses a legal transition; returns it with its arguments.
pub(crate) async fn decide(cx: &StepCx<'_>, agent: &str) -> Result<(String, Value), StepError> {
    let Some(router) = cx.inner.router.clone() else {
        cx.set_fatal(RunnerError::NoRouter(cx.state.name.clone()));
        return Err(interrupted());
    };
    // The name the configured rate limits know the router's model by, if any applies.
    let limit_key = (!cx.inner.config.rate_limits.is_empty())
        .then(|| router.limit_key())
        .flatten();
    let options = options(cx);
    let check = |tool: &str, input: &Value| {
        cx.inner
            .tools
            .get(tool)
            .ok_or_else(|| format!("unknown tool `{tool}`"))
            .and_then(|t| t.check_typed(input))
    };
    let mut feedback: Vec<String> = Vec::new();
    let mut rejections = 0;
    // Whether any ask got an answer from the model (accepted or not) in this step.
    let mut answered = false;
    let mut tool_calls = 0;
    loop {
        let seq = cx.next_seq();
        // An ask that a crash interrupted left its `started` entry: it is asked again under
        // the same index, counting the attempt that was in flight.
        let (journaled, prior_asks) = match cx.journaled(seq) {
            Some(e) if e.kind == EntryKind::Decision && e.status == CallStatus::Started => {
                (None, e.attempts)
            }
            other => (other, 0),
        };
        // A journaled decision that does not open held the run: nothing runs.
        if cx.is_interrupted() {
            return Err(interrupted());
        }
        let outcome: Result<Decision, Rejection> = if let Some(entry) = journaled {
            // A committed question is never asked again.
            if entry.kind != EntryKind::Decision {
                return Err(StepError::Handler(format!(
                    "nondeterministic step: journal entry #{seq} is a `{}` call, not a decision",
                    entry.name
                )));
            }
            let record: DecisionRecord = entry
                .output
                .and_then(|o| serde_json::from_value(o).ok())
                .ok_or_else(|| {
                    StepError::Handler(format!("journaled decision #{seq} is unreadable"))
                })?;
            match (record.decision, record.rejection) {
                (Some(d), _) => {
                    // Replayed through the very function that accepted it, against the
                    // options and types of the code running now: the graph, a schema or an
                    // argument type may have changed since it was journaled.
                    let again = RouterReply {
                        choices: raw_choices(&d),
                        ..RouterReply::default()
                    };
                    let redact = |s: &str| cx.inner.redact_text(s);
                    let verdict = validate_answer(
                        &options,
                        &again,
                        &check,
                        &redact,
                        cx.state.tools_per_answer.unwrap_or(1),
                    )
                    .and_then(|v| check_transition_arguments(cx.state, v, &redact));
                    match verdict {
                        Ok(v) if v == d => Ok(d),
                        other => {
                            let why = other.map_or_else(
                                |r| r.to_string(),
                                |_| "it now reads as another decision".to_owned(),
                            );
                            cx.set_quarantine(crate::store::RunFailure {
                                code: FailureCode::GraphIncompatible,
                                message: format!(
                                    "journaled decision #{seq} in `{}` chose {}, which the \
                                     current graph and types refuse: {why}",
                                    cx.state.name,
                                    chosen(&d)
                                ),
                            });
                            return Err(interrupted());
                        }
                    }
                }
                (None, Some(r)) => Err(r),
                (None, None) => {
                    return Err(StepError::Handler(format!(
                        "journaled decision #{seq} is empty"
                    )));
                }
            }
        } else {
            let mut request = RouteRequest {
                agent: agent.to_owned(),
                state: cx.state.name.clone(),
                state_data: cx.state_data.clone(),
                options: options.clone(),
                tool_results: cx
                    .results_so_far()
                    .into_iter()
                    .map(|(s, e)| ToolResultView {
                        handle: format!("v{}.{s}", cx.version),
                        tool: e.name,
                        output: e.output.unwrap_or(Value::Null),
                    })
                    .collect(),
                feedback: feedback.clone(),
                tools_per_answer: cx.state.tools_per_answer.unwrap_or(1),
                tokens: cx.inner.config.ephemeral.redacted_sink(
                    &cx.run_id,
                    cx.version,
                    seq,
                    &cx.inner.redactor,
                ),
            };
            let inner = cx.inner;
            inner.redact_value(&mut request.state_data);
            for r in &mut request.tool_results {
                inner.redact_value(&mut r.output);
            }
            for f in &mut request.feedback {
                *f = inner.redact_text(f);
            }
            request.trim_to_budget(cx.inner.config.prompt_token_budget);
            // The answering model and the tokens are recorded here, as journaled: after
            // the redaction of the configured secrets, which the provider's span (`chat`)
            // cannot apply.
            let span = info_span!(
                "decision",
                otel.name = %format_args!("route {}", cx.state.name),
                gen_ai.response.model = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                error.type = tracing::field::Empty,
                run_id = %cx.run_id,
                state = %cx.state.name,
                version = cx.version,
                seq,
            );
            // A question is within the budgets or not asked.
            cx.check_budget(crate::store::Spending::Ask)?;
            // And within the rate limits of its model, shared by every worker: a far turn
            // hands the run back until then.
            if let Some(key) = &limit_key {
                Box::pin(cx.take_turn(super::limits::Turn::Ask(key))).await?;
            }
            let asked = Asked {
                seq,
                prior: prior_asks,
            };
            ask(cx, router.as_ref(), &request, &options, &check, asked)
                .instrument(span)
                .await?
        };
        match outcome {
            Ok(Decision::Transition { to, arguments }) => return Ok((to, arguments)),
            Ok(Decision::Tool { tool, input }) => {
                answered = true;
                tool_calls += 1;
                if cx.state.max_tool_calls.is_none() && tool_calls > DEFAULT_ROUTER_TOOL_CALLS {
                    return Err(StepError::Budget(format!(
                        "the router called {DEFAULT_ROUTER_TOOL_CALLS} tools without choosing a transition"
                    )));
                }
                if let Err(e) = cx.call_tool(&tool, input).await {
                    if cx.is_interrupted() {
                        return Err(interrupted());
                    }
                    feedback.push(format!("tool `{tool}` failed: {e}"));
                }
            }
            Ok(Decision::Tools { calls }) => {
                answered = true;
                tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
                if cx.state.max_tool_calls.is_none() && tool_calls > DEFAULT_ROUTER_TOOL_CALLS {
                    return Err(StepError::Budget(format!(
                        "the router called {DEFAULT_ROUTER_TOOL_CALLS} tools without choosing a transition"
                    )));
                }
                // Made in the answer's order (their journal indices), run at once.
                let pending: Vec<_> = calls
                    .iter()
                    .map(|c| cx.call_tool(&c.tool, c.input.clone()))
                    .collect();
                let results = futures::future::join_all(pending).await;
                if cx.is_interrupted() {
                    return Err(interrupted());
                }
                for (call, result) in calls.iter().zip(results) {
                    if let Err(e) = result {
                        feedback.push(format!("tool `{}` failed: {e}", call.tool));
                    }
                }
            }
            Err(rejection) => {
                // A failed ask and a rejected answer share one budget: neither may hold the
                // step for longer than `max_reasks` more asks.
                // A 429 under a rate limit is waited out, however long the provider asks:
                // the limit was paused for every worker, and the re-ask takes its turn.
                if rejection.code != RejectionCode::AskRateLimited {
                    rejections += 1;
                }
                answered |= !rejection.code.is_ask_failure();
                tracing::warn!(code = %rejection.code, "router answer rejected");
                if rejections > cx.inner.config.max_reasks {
                    // Labelled for what happened: a model that kept answering wrong, or
                    // an endpoint that never answered (the journal has every ask).
                    return Err(if answered {
                        StepError::Routing(format!(
                            "no legal decision after {rejections} asks; last rejection: {rejection}"
                        ))
                    } else {
                        StepError::RouterUnavailable(format!(
                            "no answer in {rejections} asks; last: {rejection}"
                        ))
                    });
                }
                if !rejection.code.is_ask_failure() {
                    feedback.push(rejection.to_string());
                }
            }
        }
    }
}

/// A decision as the raw choices that give it: what the replay path validates again.
fn raw_choices(d: &Decision) -> Vec<RawChoice> {
    let raw = |name: &str, arguments: &Value| RawChoice {
        name: name.to_owned(),
        arguments: arguments.to_string(),
    };
    match d {
        Decision::Transition { to, arguments } => vec![raw(to, arguments)],
        Decision::Tool { tool, input } => vec![raw(tool, input)],
        Decision::Tools { calls } => calls.iter().map(|c| raw(&c.tool, &c.input)).collect(),
    }
}

/// What a decision chose, for a message: `` `Pay` with arguments ``, `` `Lookup` with its
/// input ``.
fn chosen(d: &Decision) -> String {
    match d {
        Decision::Transition { to, .. } => format!("`{to}` with arguments"),
        Decision::Tool { tool, .. } => format!("`{tool}` with its input"),
        Decision::Tools { calls } => calls
            .iter()
            .map(|c| format!("`{}`", c.tool))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Which ask: its journal index, and how many earlier asks under it a crash interrupted.
#[derive(Clone, Copy, Debug)]
struct Asked {
    seq: u32,
    prior: u32,
}

/// How long a model's asks pause, for every worker, after a 429 that did not say how long
/// to wait.
const DEFAULT_RATE_LIMITED_PAUSE: Duration = Duration::from_secs(1);

/// One ask, journaled as decision entry `seq`: accepted, rejected, or failed (an error, a
/// timeout, a body that is not the provider's shape), each with its code.
async fn ask(
    cx: &StepCx<'_>,
    router: &dyn crate::router::Router,
    request: &RouteRequest,
    options: &[RouteOption],
    check: &(dyn Fn(&str, &Value) -> Result<(), String> + Sync),
    Asked { seq, prior }: Asked,
) -> Result<Result<Decision, Rejection>, StepError> {
    let config = &cx.inner.config;
    let redact = |s: &str| cx.inner.redact_text(s);
    // Journaled before it is sent, so that an ask a crash interrupts leaves a trace (and an
    // event a follower sees while the model thinks); the answer replaces it.
    let input = json!({
        "prompt_hash": request.prompt_hash(),
        "options": request.options.iter().map(|o| redact(&o.name)).collect::<Vec<_>>(),
    });
    let mut entry = cx
        .new_entry(seq, EntryKind::Decision, "router", input, &[])
        .map_err(|e| StepError::Handler(e.to_string()))?;
    entry.attempts = prior + 1;
    if !cx.record(entry.clone()).await {
        return Err(interrupted());
    }
    if cx.fault(FaultPoint::LlmSent) {
        return Err(interrupted());
    }
    let started = Instant::now();
    // Providers retry transient failures themselves (with `retry-after`), inside this
    // timeout; the runner's re-asks come on top, within `max_reasks`. The lease is kept
    // alive while the ask runs, and the timeout bounds how long one ask holds the claim.
    // A state may bound its own asks tighter or looser (`decision_timeout_ms`).
    let timeout = cx
        .state
        .decision_timeout_ms
        .map_or(config.decision_timeout, Duration::from_millis);
    let answer =
        match tokio::time::timeout(timeout, with_heartbeat(cx, router.decide(request))).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return Err(interrupted()),
            Err(_) => Err(RouterError::new(
                crate::tool::ErrorClass::Timeout,
                format!("no answer within {} ms", timeout.as_millis()),
            )
            .with_code(RejectionCode::AskTimeout)),
        };
    if cx.fault(FaultPoint::LlmAnswered) {
        return Err(interrupted());
    }
    // The rate limits of the model hear how it went, for every worker: the tokens its answer
    // used, or the wait it asked for with a 429.
    let mut paused = false;
    if let Some(key) = (!config.rate_limits.is_empty())
        .then(|| router.limit_key())
        .flatten()
    {
        match &answer {
            Ok(reply) => {
                let tokens = reply.input_tokens.unwrap_or(0) + reply.output_tokens.unwrap_or(0);
                if tokens > 0 {
                    Box::pin(cx.inner.charge_tokens(&key, tokens)).await;
                }
            }
            Err(e) if e.class == crate::tool::ErrorClass::RateLimited => {
                let wait = e.retry_after.unwrap_or(DEFAULT_RATE_LIMITED_PAUSE);
                paused = cx.inner.limits_asks_of(&key);
                Box::pin(cx.inner.pause_asks(&key, wait)).await;
            }
            Err(_) => {}
        }
    }
    let (reply, outcome) = match answer {
        Ok(reply) => {
            let outcome =
                validate_answer(options, &reply, check, &redact, request.tools_per_answer)
                    .and_then(|d| check_transition_arguments(cx.state, d, &redact));
            (reply, outcome)
        }
        Err(e) => {
            let reply = RouterReply {
                raw_output: e.raw_output.clone().unwrap_or_default(),
                ..RouterReply::default()
            };
            let message = truncate(&redact(&e.message), MAX_ASK_ERROR);
            // A 429 under the model's rate limit paused it: journaled as such, and not
            // counted against `max_reasks` (the re-ask waits for the pause).
            let code = if paused {
                RejectionCode::AskRateLimited
            } else {
                e.rejection_code()
            };
            (reply, Err(Rejection::new(code, message)))
        }
    };
    // What is stored of the answer's text (raw output, rejection message) hides, besides the
    // configured secrets, the values the answer put in sensitive or marked fields: the
    // decision keeps them sealed, its text must not keep them plain.
    let stored = answer_redactor(cx, &reply);
    let redact_stored = |s: &str| stored.text(s);
    let outcome = outcome.map_err(|r| Rejection::new(r.code, redact_stored(&r.message)));
    let elapsed = started.elapsed();
    let latency = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let mut record = DecisionRecord::new(request, &reply, &outcome, latency, &redact_stored);
    // The model's name as journaled (redacted), a bounded label: one per configured model.
    let agent: &'static str = &cx.inner.graph.agent;
    let rejected = (outcome.as_ref().err()).map(|r| (r.code.as_str(), r.code.is_ask_failure()));
    crate::metrics::model_ask(agent, &record.model, rejected, elapsed);
    let span = tracing::Span::current();
    span.record("gen_ai.response.model", record.model.as_str());
    if let Some(tokens) = record.input_tokens {
        span.record("gen_ai.usage.input_tokens", tokens);
    }
    if let Some(tokens) = record.output_tokens {
        span.record("gen_ai.usage.output_tokens", tokens);
    }
    if let Some((code, _)) = rejected {
        span.record("error.type", code);
    }
    crate::metrics::model_tokens(
        agent,
        &record.model,
        record.input_tokens,
        record.output_tokens,
    );
    if let Some(cost) = &reply.cost {
        crate::metrics::model_cost(agent, &record.model, &cost.currency, cost.amount);
    }
    // The decision is stored as it will be executed, its secret parts sealed: a resumed
    // run opens it and executes exactly this (no placeholder replay would run).
    record.decision = outcome.as_ref().ok().cloned();
    if let Some(decision) = record.decision.as_mut()
        && let Err(e) = seal_decision(cx, decision)
    {
        return Err(StepError::Handler(e.to_string()));
    }
    entry.duration_ms = latency;
    entry.finished_at = Some(crate::store::now_ms());
    match &record.rejection {
        None => entry.status = CallStatus::Succeeded,
        Some(r) => {
            entry.status = CallStatus::Failed;
            entry.error_code = Some(r.code.as_str().to_owned());
            entry.error_message = Some(r.message.clone());
        }
    }
    entry.output = serde_json::to_value(&record).ok();
    if !cx.record(entry).await {
        return Err(interrupted());
    }
    Ok(outcome)
}

/// The configured redactor, hiding also every value an answer's calls put in a sensitive
/// field or one their option's type marks secret (read from the arguments when they parse).
fn answer_redactor(cx: &StepCx<'_>, reply: &RouterReply) -> crate::secrets::Redactor {
    let base = cx.inner.redactor.clone();
    let mut values = Vec::new();
    for choice in &reply.choices {
        let Ok(arguments) = serde_json::from_str::<Value>(&choice.arguments) else {
            continue;
        };
        let marked: Vec<String> = match cx.inner.tools.get(&choice.name) {
            Some(tool) => cx.inner.marked.of(tool.as_ref()).to_vec(),
            None => cx
                .state
                .arguments_of(&choice.name)
                .map(|a| crate::secrets::marked_fields(&a.schema))
                .unwrap_or_default(),
        };
        values.extend(
            crate::secrets::SealPolicy {
                redactor: &base,
                marked: &marked,
                stable: false,
            }
            .secret_values(&arguments),
        );
    }
    if values.is_empty() {
        base
    } else {
        base.with_secrets(&values)
    }
}

/// Seal, in place, the secret parts of an accepted decision: sensitive fields, and the
/// fields its tool's input type or its transition's argument type marks secret.
fn seal_decision(cx: &StepCx<'_>, decision: &mut Decision) -> Result<(), SealError> {
    let marked_tool = |tool: &str| {
        cx.inner
            .tools
            .get(tool)
            .map(|t| cx.inner.marked.of(t.as_ref()))
            .unwrap_or_default()
    };
    match decision {
        Decision::Tool { tool, input } => {
            let marked = marked_tool(tool);
            cx.inner
                .config
                .seal_value(input, &marked, &format!("the model's call of `{tool}`"))
        }
        Decision::Transition { to, arguments } => {
            let marked = cx
                .state
                .arguments_of(to)
                .map(|a| crate::secrets::marked_fields(&a.schema))
                .unwrap_or_default();
            cx.inner.seal_value(
                arguments,
                &marked,
                &format!("the arguments of the transition to `{to}`"),
            )
        }
        Decision::Tools { calls } => calls.iter_mut().try_for_each(|call| {
            let marked = marked_tool(&call.tool);
            cx.inner.seal_value(
                &mut call.input,
                &marked,
                &format!("the model's call of `{}`", call.tool),
            )
        }),
    }
}

fn interrupted() -> StepError {
    StepError::Interrupted("the step was interrupted".into())
}
