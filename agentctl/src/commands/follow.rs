//! `agentctl show RUN --follow` and `agentctl runs --watch`: print events as they are
//! committed, through a [`Follower`] on the store (the events API the HTTP server streams
//! from), one line each (one JSON object per line with `--json`). Ends at the run's end
//! when following one run, at Ctrl-C, or quietly when stdout is closed (`| head`).

use std::process::ExitCode;

use agent_core::events::Follower;
use agent_core::store::{EventCursor, EventKind, EventScope, RunEvent};

use super::Ctx;
use crate::error::Result;
use crate::output::{fmt_time, outln};

/// Follow run `id` from the end of what `show` printed.
pub(super) async fn run(cx: &Ctx, id: &str) -> Result<ExitCode> {
    let run = cx.run(id).await?;
    if run.status.is_final() {
        cx.out.note(&format!(
            "run {id} is {}: nothing more will happen",
            run.status
        ));
        return Ok(ExitCode::SUCCESS);
    }
    // The timeline above is what is stored now; follow from the last event of it.
    let scope = EventScope::Run(id.to_owned());
    let mut after = EventCursor::START;
    loop {
        let page = cx.store.events(&scope, after, 1000).await?;
        match page.last() {
            Some(last) => after = last.cursor,
            None => break,
        }
    }
    if !cx.out.json {
        outln!();
        outln!("following {id} (Ctrl-C to stop)");
    }
    events(cx, scope, after, true).await
}

/// Print the events of `scope` after `after` as they come; with `until_finished`, stop
/// after a `run_finished`.
pub(super) async fn events(
    cx: &Ctx,
    scope: EventScope,
    after: EventCursor,
    until_finished: bool,
) -> Result<ExitCode> {
    let mut follower = Follower::new(cx.store.clone(), scope, after).await?;
    loop {
        let event = tokio::select! {
            event = follower.next() => event?,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        if cx.out.json {
            outln!("{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            outln!("{}", describe(&event));
        }
        if until_finished && matches!(event.kind, EventKind::RunFinished { .. }) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// One line for a person: when, which run, what.
fn describe(e: &RunEvent) -> String {
    let what = match &e.kind {
        EventKind::RunCreated { state } => format!("created in {state}"),
        EventKind::TransitionCommitted {
            version,
            from,
            to,
            kind,
            status,
            note,
        } => {
            let note = note
                .as_ref()
                .map_or_else(String::new, |n| format!(" by {}: {}", n.by, n.reason));
            format!(
                "v{version} {} {from} → {to} ({status}){note}",
                kind.as_str()
            )
        }
        EventKind::ToolStarted { tool, call, .. } => format!("call {call}: {tool} started"),
        EventKind::ToolFinished {
            tool,
            call,
            status,
            attempts,
            duration_ms,
            error_code,
            ..
        } => format!(
            "call {call}: {tool} {} after {attempts} attempt(s), {duration_ms} ms{}",
            status.as_str(),
            error_code
                .as_ref()
                .map_or_else(String::new, |c| format!(" ({c})"))
        ),
        EventKind::DecisionAsked { options, .. } => {
            format!("asked the model: {}", options.join(" | "))
        }
        EventKind::DecisionAccepted {
            transition, tools, ..
        } => match transition {
            Some(to) => format!("the model chose {to}"),
            None => format!("the model chose {}", tools.join(", ")),
        },
        EventKind::DecisionRejected { code, .. } => {
            format!("the model's answer was refused: {code}")
        }
        EventKind::CompensationStarted { tool, .. } => format!("compensating: {tool}"),
        EventKind::CompensationFinished { tool, status, .. } => {
            format!("compensation {tool} {}", status.as_str())
        }
        EventKind::ChildrenStarting { agent, count, .. } => {
            format!("starting {count} child run(s) of {agent}")
        }
        EventKind::ChildrenStarted { agent, runs, .. } => {
            format!("child runs of {agent}: {}", runs.join(", "))
        }
        EventKind::SignalReceived { name, .. } => format!("signal {name} received"),
        EventKind::SignalConsumed { name, .. } => format!("signal {name} consumed"),
        EventKind::WaitEntered {
            waiting_for,
            wake_at,
            ..
        } => {
            let until = wake_at.map_or_else(String::new, |t| format!(" until {}", fmt_time(t)));
            format!(
                "waiting for {}{until}",
                waiting_for.as_ref().map_or("a timer", |w| w.as_str())
            )
        }
        EventKind::StatusSet { status, error } => format!(
            "status set to {status}{}",
            error
                .as_ref()
                .map_or_else(String::new, |e| format!(": {} — {}", e.code, e.message))
        ),
        EventKind::RunFinished { status, error, .. } => format!(
            "finished {status}{}",
            error
                .as_ref()
                .map_or_else(String::new, |e| format!(": {} — {}", e.code, e.message))
        ),
        _ => "(an event this agentctl does not know)".to_owned(),
    };
    format!("{}  {}  {what}", fmt_time(e.at), e.run_id)
}
