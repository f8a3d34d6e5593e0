//! `agentctl schedules …`: create, list, show, update, delete, pause, resume, trigger and
//! backfill schedules. Each write is one compare-and-set on the schedule
//! ([`agent_core::schedule`]); the agent's workers tick it. `agentctl` has no agent's code,
//! so a schedule's initial state is checked against the agent's registered graph (the
//! state's name must be an initial state); the workers check it fully at each tick.

use std::process::ExitCode;

use agent_core::schedule::{
    self, CatchUp, NewSchedule, SCHEDULE_LABEL, Schedule, ScheduleError, ScheduleSpec,
    ScheduleUpdate, TICK_LABEL, tick_text,
};
use agent_core::store::{Labels, RunFilter, now_ms};
use comfy_table::Cell;

use super::Ctx;
use crate::cli::{
    ScheduleBackfillArgs, ScheduleCreateArgs, ScheduleDefinition, ScheduleUpdateArgs,
    SchedulesAction,
};
use crate::error::{CliError, Result};
use crate::output::{fmt_time, outln};

/// How many of a schedule's latest runs `show` lists.
const SHOWN_RUNS: usize = 10;

pub(super) async fn run(cx: &Ctx, action: SchedulesAction) -> Result<ExitCode> {
    let store = cx.store.as_ref();
    let now = now_ms();
    let (schedule, done) = match action {
        SchedulesAction::List(args) => return list(cx, args.agent.as_deref()).await,
        SchedulesAction::Show(args) => return show(cx, &args.id).await,
        SchedulesAction::Create(args) => (create(cx, args, now).await?, "created"),
        SchedulesAction::Update(args) => (update(cx, args, now).await?, "updated"),
        SchedulesAction::Delete(args) => {
            schedule::delete_schedule(store, &args.id)
                .await
                .map_err(|e| error(e, &args.id))?;
            if cx.out.json {
                cx.out
                    .print_json(&serde_json::json!({ "schedule": args.id, "deleted": true }));
            } else {
                outln!("schedule {} deleted (its runs stay)", args.id);
            }
            return Ok(ExitCode::SUCCESS);
        }
        SchedulesAction::Pause(args) => (
            schedule::pause_schedule(store, &args.id, now)
                .await
                .map_err(|e| error(e, &args.id))?,
            "paused",
        ),
        SchedulesAction::Resume(args) => (
            schedule::resume_schedule(store, &args.id, now)
                .await
                .map_err(|e| error(e, &args.id))?,
            "resumed",
        ),
        SchedulesAction::Trigger(args) => (
            schedule::trigger_schedule(store, &args.id, now)
                .await
                .map_err(|e| error(e, &args.id))?,
            "triggered: a worker of its agent starts the run at its next pass",
        ),
        SchedulesAction::Backfill(args) => return backfill(cx, &args, now).await,
    };
    if cx.out.json {
        cx.out.print_json(&schedule);
    } else {
        outln!("schedule {} {done}", schedule.id);
        print_summary(&schedule);
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(cx: &Ctx, args: ScheduleCreateArgs, now: i64) -> Result<Schedule> {
    let ScheduleCreateArgs {
        id,
        agent,
        definition,
        paused,
    } = args;
    let spec = spec_of(&definition)?.ok_or_else(|| {
        CliError::usage("a schedule needs `--cron EXPR --tz ZONE` or `--every INTERVAL`")
    })?;
    let initial_state = definition.state.clone().ok_or_else(|| {
        CliError::usage("a schedule needs `--state JSON`, its runs' initial state")
    })?;
    let new = NewSchedule {
        id: id.clone(),
        agent,
        spec,
        jitter_ms: definition.jitter.map_or(0, duration_ms),
        overlap: definition.overlap.map(Into::into).unwrap_or_default(),
        catch_up: definition.catch_up.unwrap_or(CatchUp::Skip),
        paused,
        initial_state,
        labels: labels_of(&definition).unwrap_or_default(),
    };
    schedule::create_schedule(cx.store.as_ref(), new, None, now)
        .await
        .map_err(|e| error(e, &id))
}

async fn update(cx: &Ctx, args: ScheduleUpdateArgs, now: i64) -> Result<Schedule> {
    let d = &args.definition;
    let update = ScheduleUpdate {
        spec: spec_of(d)?,
        jitter_ms: d.jitter.map(duration_ms),
        overlap: d.overlap.map(Into::into),
        catch_up: d.catch_up,
        initial_state: d.state.clone(),
        labels: labels_of(d),
    };
    if update == ScheduleUpdate::default() {
        return Err(
            CliError::usage("nothing to update: give the options to change")
                .hint("`agentctl schedules update --help` lists them"),
        );
    }
    schedule::update_schedule(cx.store.as_ref(), &args.id, update, None, now)
        .await
        .map_err(|e| error(e, &args.id))
}

async fn backfill(cx: &Ctx, args: &ScheduleBackfillArgs, now: i64) -> Result<ExitCode> {
    if args.from > args.to {
        return Err(CliError::usage("`--from` is after `--to`"));
    }
    let (schedule, asked) =
        schedule::backfill_schedule(cx.store.as_ref(), &args.id, args.from, args.to, now)
            .await
            .map_err(|e| error(e, &args.id))?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "schedule": schedule.id,
            "ticks": asked,
            "requested_ticks": schedule.requested_ticks.iter().map(|t| tick_text(*t)).collect::<Vec<_>>(),
        }));
    } else {
        outln!(
            "schedule {}: {asked} ticks asked for; a worker of {} starts the runs of those \
             that have none",
            schedule.id,
            schedule.agent
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(cx: &Ctx, agent: Option<&str>) -> Result<ExitCode> {
    let schedules = cx.store.list_schedules(agent).await?;
    if cx.out.json {
        cx.out.print_json(&schedules);
        return Ok(ExitCode::SUCCESS);
    }
    if schedules.is_empty() {
        match agent {
            Some(agent) => outln!("no schedules of agent `{agent}`"),
            None => outln!("no schedules: create one with `agentctl schedules create`"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = cx.out.table([
        "SCHEDULE",
        "AGENT",
        "WHEN",
        "NEXT TICK",
        "LAST TICK",
        "STATE",
    ]);
    for s in &schedules {
        table.add_row(vec![
            Cell::new(&s.id),
            Cell::new(&s.agent),
            Cell::new(describe_spec(&s.spec)),
            Cell::new(s.next_tick.map_or_else(|| "-".to_owned(), fmt_time)),
            Cell::new(s.last_tick.map_or_else(|| "-".to_owned(), fmt_time)),
            Cell::new(status_of(s)),
        ]);
    }
    outln!("{table}");
    Ok(ExitCode::SUCCESS)
}

async fn show(cx: &Ctx, id: &str) -> Result<ExitCode> {
    let s = cx
        .store
        .load_schedule(id)
        .await?
        .ok_or_else(|| error(ScheduleError::NotFound(id.to_owned()), id))?;
    let filter = RunFilter {
        labels: Labels::from([(SCHEDULE_LABEL.to_owned(), id.to_owned())]),
        limit: Some(SHOWN_RUNS),
        ..RunFilter::default()
    };
    let runs = cx.store.list_runs(&filter).await?;
    if cx.out.json {
        cx.out
            .print_json(&serde_json::json!({ "schedule": s, "runs": runs }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!("schedule {} of agent {}", s.id, s.agent);
    print_summary(&s);
    outln!("  overlap:    {}", serde_plain(&s.overlap));
    outln!("  catch-up:   {}", serde_plain(&s.catch_up));
    outln!("  jitter:     {} ms", s.jitter_ms);
    outln!("  state:      {}", s.initial_state);
    for (key, value) in &s.labels {
        outln!("  label:      {key}={value}");
    }
    if let Some(error) = &s.last_error {
        outln!("  last error: {error}");
    }
    if runs.is_empty() {
        outln!("no runs yet");
    } else {
        let mut table = cx.out.table(["TICK", "RUN", "STATUS"]);
        for r in &runs {
            table.add_row(vec![
                Cell::new(r.labels.get(TICK_LABEL).map_or("?", String::as_str)),
                Cell::new(&r.id),
                Cell::new(r.status.as_str()),
            ]);
        }
        outln!("{table}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_summary(s: &Schedule) {
    outln!("  when:       {}", describe_spec(&s.spec));
    outln!("  status:     {}", status_of(s));
    outln!(
        "  next tick:  {}",
        s.next_tick.map_or_else(|| "none".to_owned(), fmt_time)
    );
    if let Some(last) = s.last_tick {
        outln!(
            "  last tick:  {} (run {})",
            fmt_time(last),
            s.last_run_id.as_deref().unwrap_or("?")
        );
    }
}

fn status_of(s: &Schedule) -> String {
    let mut parts = vec![if s.paused { "paused" } else { "active" }.to_owned()];
    if !s.requested_ticks.is_empty() {
        parts.push(format!("{} asked for", s.requested_ticks.len()));
    }
    if s.buffered_tick.is_some() {
        parts.push("1 buffered".to_owned());
    }
    parts.join(", ")
}

fn describe_spec(spec: &ScheduleSpec) -> String {
    match spec {
        ScheduleSpec::Cron {
            expression,
            time_zone,
        } => format!("cron `{expression}` in {time_zone}"),
        ScheduleSpec::Interval { every_ms, .. } => format!("every {}s", every_ms / 1000),
    }
}

/// A policy as its JSON form reads (`skip`, `buffer_one`, `{"up_to":3}`).
fn serde_plain<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => e.to_string(),
    }
}

fn spec_of(d: &ScheduleDefinition) -> Result<Option<ScheduleSpec>> {
    match (&d.cron, d.every) {
        (Some(expression), None) => Ok(Some(ScheduleSpec::Cron {
            expression: expression.clone(),
            time_zone: d.time_zone.clone().unwrap_or_else(|| "UTC".to_owned()),
        })),
        (None, Some(every)) => Ok(Some(ScheduleSpec::Interval {
            every_ms: duration_ms(every),
            anchor_ms: 0,
        })),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(CliError::usage("give `--cron` or `--every`, not both")),
    }
}

fn labels_of(d: &ScheduleDefinition) -> Option<Labels> {
    (!d.labels.is_empty()).then(|| d.labels.iter().cloned().collect())
}

fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A schedule error as the command's error: bad input is a usage error (exit 2).
fn error(e: ScheduleError, id: &str) -> CliError {
    match e {
        ScheduleError::NotFound(_) => CliError::not_found(format!("schedule `{id}` not found"))
            .hint("list schedules with `agentctl schedules list`"),
        ScheduleError::Store(e) => e.into(),
        ScheduleError::UnknownAgent(_) => {
            CliError::usage(e.to_string()).hint("`agentctl agents` lists the registered agents")
        }
        ScheduleError::AlreadyExists(_) => CliError::failed(e.to_string())
            .hint("change it with `agentctl schedules update`, or pick another id"),
        ScheduleError::Spec(_)
        | ScheduleError::InitialState(_)
        | ScheduleError::Invalid(_)
        | ScheduleError::TooManyTicks => CliError::usage(e.to_string()),
        ScheduleError::Start(_) => CliError::failed(e.to_string()),
    }
}
