//! `agentctl triggers …`: what the message triggers (`agent-triggers`) and the webhooks
//! started, read from the labels every run they start carries
//! ([`agent_core::started_by`]). A trigger is a task in its own process, with no row of
//! its own: its live state (consuming, paused at its bound, disconnected) is its process's
//! `Consumer::monitor()`; what it did is in the store, and that is what these verbs show.

use std::process::ExitCode;

use agent_core::started_by::{
    TRIGGER_LABEL, TRIGGER_MESSAGE_LABEL, TRIGGER_ORIGIN_LABEL, WEBHOOK_DELIVERY_LABEL,
    WEBHOOK_LABEL,
};
use agent_core::store::{LabelValueCount, Labels, Millis, RunFilter, RunStatus, now_ms};
use comfy_table::Cell;
use serde::Serialize;

use super::Ctx;
use crate::cli::{TriggerListArgs, TriggerShowArgs, TriggersAction};
use crate::error::{CliError, Result};
use crate::output::{fmt_age, fmt_time, outln};

/// The two kinds of starter these verbs cover, each with the label naming it and the label
/// holding what it started each run from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    /// A NATS or MQTT trigger.
    Message,
    /// An HTTP webhook.
    Webhook,
}

impl Kind {
    const ALL: [Self; 2] = [Self::Message, Self::Webhook];

    fn name_label(self) -> &'static str {
        match self {
            Self::Message => TRIGGER_LABEL,
            Self::Webhook => WEBHOOK_LABEL,
        }
    }

    fn key_label(self) -> &'static str {
        match self {
            Self::Message => TRIGGER_MESSAGE_LABEL,
            Self::Webhook => WEBHOOK_DELIVERY_LABEL,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Webhook => "webhook",
        }
    }
}

/// One trigger or webhook as listed.
#[derive(Debug, Serialize)]
struct Listed {
    kind: Kind,
    name: String,
    runs: u64,
    #[serde(serialize_with = "status_map")]
    by_status: Vec<(RunStatus, u64)>,
    last_created_at: Millis,
}

/// Counts per status as a JSON object (`{"completed": 998, "failed": 2}`), in
/// [`RunStatus::ALL`]'s order.
fn status_map<S: serde::Serializer>(
    counts: &[(RunStatus, u64)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_map(counts.iter().map(|(status, n)| (status.as_str(), n)))
}

pub(super) async fn run(cx: &Ctx, action: TriggersAction) -> Result<ExitCode> {
    match action {
        TriggersAction::List(args) => list(cx, &args).await,
        TriggersAction::Show(args) => show(cx, &args).await,
    }
}

/// The runs a starter of `kind` named `name` started (of `agent`, if given).
fn started_by(kind: Kind, name: &str, agent: Option<&str>) -> RunFilter {
    RunFilter {
        agent: agent.map(str::to_owned),
        labels: Labels::from([(kind.name_label().to_owned(), name.to_owned())]),
        ..RunFilter::default()
    }
}

async fn list(cx: &Ctx, args: &TriggerListArgs) -> Result<ExitCode> {
    let agent = args.agent.as_deref();
    let all = RunFilter {
        agent: args.agent.clone(),
        ..RunFilter::default()
    };
    let mut listed = Vec::new();
    for kind in Kind::ALL {
        for LabelValueCount {
            value,
            runs,
            last_created_at,
        } in cx.store.count_label_values(kind.name_label(), &all).await?
        {
            let by_status = cx
                .store
                .count_runs(&started_by(kind, &value, agent))
                .await?;
            listed.push(Listed {
                kind,
                name: value,
                runs,
                by_status,
                last_created_at,
            });
        }
    }
    if cx.out.json {
        cx.out.print_json(&listed);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        match agent {
            Some(agent) => outln!("no run of agent `{agent}` was started by a trigger or webhook"),
            None => outln!("no run was started by a trigger or webhook yet"),
        }
        cx.out.note(
            "message triggers and webhooks label the runs they start (`trigger=NAME`, \
             `webhook=NAME`); schedules are listed by `agentctl schedules list`",
        );
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let mut table = cx
        .out
        .table(["KIND", "NAME", "RUNS", "BY STATUS", "LATEST RUN"]);
    for l in &listed {
        table.add_row(vec![
            Cell::new(l.kind.as_str()),
            Cell::new(&l.name),
            Cell::new(l.runs),
            Cell::new(status_counts(&l.by_status)),
            Cell::new(fmt_age(l.last_created_at, now)),
        ]);
    }
    cx.out.print_table(&table);
    Ok(ExitCode::SUCCESS)
}

/// `completed 998, failed 2`.
fn status_counts(counts: &[(RunStatus, u64)]) -> String {
    counts
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn show(cx: &Ctx, args: &TriggerShowArgs) -> Result<ExitCode> {
    let mut shown = Vec::new();
    for kind in Kind::ALL {
        let filter = started_by(kind, &args.name, None);
        let by_status = cx.store.count_runs(&filter).await?;
        if by_status.is_empty() {
            continue;
        }
        let origins = match kind {
            Kind::Message => {
                cx.store
                    .count_label_values(TRIGGER_ORIGIN_LABEL, &filter)
                    .await?
            }
            Kind::Webhook => Vec::new(),
        };
        let latest = cx
            .store
            .list_runs(&RunFilter {
                limit: Some(args.limit),
                ..filter
            })
            .await?;
        shown.push((kind, by_status, origins, latest));
    }
    if shown.is_empty() {
        return Err(CliError::not_found(format!(
            "no run was started by a trigger or webhook named `{}`",
            args.name
        ))
        .hint("`agentctl triggers list` lists those that started runs"));
    }
    if cx.out.json {
        let json: Vec<_> = shown
            .iter()
            .map(|(kind, by_status, origins, latest)| {
                let by_status: serde_json::Map<String, serde_json::Value> = by_status
                    .iter()
                    .map(|(status, n)| (status.as_str().to_owned(), (*n).into()))
                    .collect();
                serde_json::json!({
                    "kind": kind,
                    "name": args.name,
                    "by_status": by_status,
                    "origins": origins,
                    "latest_runs": latest,
                })
            })
            .collect();
        cx.out.print_json(&json);
        return Ok(ExitCode::SUCCESS);
    }
    for (kind, by_status, origins, latest) in &shown {
        let total: u64 = by_status.iter().map(|(_, n)| n).sum();
        outln!(
            "{} {} started {total} runs: {}",
            kind.as_str(),
            args.name,
            status_counts(by_status)
        );
        for origin in origins {
            outln!(
                "  from {}: {} runs, the latest at {}",
                origin.value,
                origin.runs,
                fmt_time(origin.last_created_at)
            );
        }
        let key = match kind {
            Kind::Message => "MESSAGE",
            Kind::Webhook => "DELIVERY",
        };
        let mut table = cx.out.table([key, "RUN", "AGENT", "STATUS", "CREATED"]);
        for r in latest {
            table.add_row(vec![
                Cell::new(r.labels.get(kind.key_label()).map_or("?", String::as_str)),
                Cell::new(&r.id),
                Cell::new(&r.agent),
                cx.out.status_cell(r.status),
                Cell::new(fmt_time(r.created_at)),
            ]);
        }
        cx.out.print_table(&table);
        if latest.len() == args.limit && total > latest.len() as u64 {
            cx.out.note(&format!(
                "the latest {} of {total}; pass --limit to see more, or list them with \
                 `agentctl runs --label {}={}`",
                args.limit,
                kind.name_label(),
                args.name
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
