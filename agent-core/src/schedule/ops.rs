//! The operators' verbs on schedules, written once over the store: each reads the
//! schedule, changes it, and writes it by compare-and-set on its revision, reading again
//! when a tick or another operator wrote first.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CatchUp, OverlapPolicy, Schedule, ScheduleError, ScheduleSpec};
use crate::runner::{JsonStarter, StartError};
use crate::store::{Labels, Millis, Store, validate_labels};

/// How many ticks one backfill may ask for.
pub const MAX_BACKFILL_TICKS: usize = 1000;

/// The most jitter a schedule may have: a day (a tick's run a day late is another tick).
pub const MAX_JITTER_MS: u64 = 86_400_000;

/// The longest schedule id: ids name runs (`<id>@<tick>`), whose ids stay short.
const MAX_ID_CHARS: usize = 100;

/// A schedule to create.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewSchedule {
    /// Its id (at most 100 characters, no `@`).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 100,
            pattern = "^[^@\\u0000-\\u001F\\u007F]*$"
        )
    )]
    pub id: String,
    /// The agent whose runs it starts.
    pub agent: String,
    /// When it ticks.
    pub spec: ScheduleSpec,
    /// Up to this many milliseconds of jitter per tick (at most a day).
    #[serde(default, deserialize_with = "super::integer::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 86_400_000))]
    pub jitter_ms: u64,
    /// While the previous tick's run is not final.
    #[serde(default)]
    pub overlap: OverlapPolicy,
    /// After downtime.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// Created paused.
    #[serde(default)]
    pub paused: bool,
    /// The state each run starts in, as the agent's enum serializes.
    pub initial_state: Value,
    /// Labels of every run it starts.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::BTreeMap<String, String>))]
    pub labels: Labels,
}

/// A change to a schedule: the fields given replace the schedule's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleUpdate {
    /// A new spec: the next tick is computed from it, after now.
    #[serde(default)]
    pub spec: Option<ScheduleSpec>,
    /// New jitter (at most a day).
    #[serde(default, deserialize_with = "super::integer::opt_u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 86_400_000))]
    pub jitter_ms: Option<u64>,
    /// A new overlap policy.
    #[serde(default)]
    pub overlap: Option<OverlapPolicy>,
    /// A new catch-up policy.
    #[serde(default)]
    pub catch_up: Option<CatchUp>,
    /// A new initial state.
    #[serde(default)]
    pub initial_state: Option<Value>,
    /// New labels (all of them).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<std::collections::BTreeMap<String, String>>))]
    pub labels: Option<Labels>,
}

/// Create a schedule, checked: its spec ticks, its labels are valid, and its initial state
/// is one of the agent's initial states, as `starter` (the agent's runner) reads it, or,
/// without one (`agentctl`, which has no agent's code), by the state's name in the agent's
/// registered graph. Its first tick is the spec's first after `now`. Idempotent: the same
/// definition again returns the stored schedule.
///
/// # Errors
/// [`ScheduleError::Spec`], [`ScheduleError::InitialState`], [`ScheduleError::Invalid`],
/// [`ScheduleError::UnknownAgent`]; [`ScheduleError::AlreadyExists`] for an id taken by
/// another definition; [`ScheduleError::Store`].
pub async fn create_schedule(
    store: &dyn Store,
    new: NewSchedule,
    starter: Option<&dyn JsonStarter>,
    now: Millis,
) -> Result<Schedule, ScheduleError> {
    check_id(&new.id)?;
    check_jitter(new.jitter_ms)?;
    let ticks = new.spec.ticks()?;
    new.spec.validate(now)?;
    check_labels(&new.labels)?;
    check_initial_state(store, &new.agent, &new.initial_state, starter).await?;
    let schedule = Schedule {
        id: new.id,
        agent: new.agent,
        next_tick: ticks.next_after(now),
        spec: new.spec,
        jitter_ms: new.jitter_ms,
        overlap: new.overlap,
        catch_up: new.catch_up,
        paused: new.paused,
        initial_state: new.initial_state,
        labels: new.labels,
        created_at: now,
        updated_at: now,
        revision: 0,
        last_tick: None,
        last_run_id: None,
        buffered_tick: None,
        requested_ticks: Vec::new(),
        last_error: None,
    };
    if let Some(created) = store.insert_schedule(&schedule).await? {
        return Ok(created);
    }
    let existing = store
        .load_schedule(&schedule.id)
        .await?
        .ok_or_else(|| ScheduleError::AlreadyExists(schedule.id.clone()))?;
    let same = existing.agent == schedule.agent
        && existing.spec == schedule.spec
        && existing.jitter_ms == schedule.jitter_ms
        && existing.overlap == schedule.overlap
        && existing.catch_up == schedule.catch_up
        && existing.initial_state == schedule.initial_state
        && existing.labels == schedule.labels;
    if same {
        Ok(existing)
    } else {
        Err(ScheduleError::AlreadyExists(schedule.id))
    }
}

/// Change a schedule's definition, checked as at creation.
///
/// # Errors
/// As [`create_schedule`]; [`ScheduleError::NotFound`].
pub async fn update_schedule(
    store: &dyn Store,
    id: &str,
    update: ScheduleUpdate,
    starter: Option<&dyn JsonStarter>,
    now: Millis,
) -> Result<Schedule, ScheduleError> {
    if let Some(spec) = &update.spec {
        spec.validate(now)?;
    }
    if let Some(labels) = &update.labels {
        check_labels(labels)?;
    }
    if let Some(jitter) = update.jitter_ms {
        check_jitter(jitter)?;
    }
    if let Some(state) = &update.initial_state {
        let agent = load(store, id).await?.agent;
        check_initial_state(store, &agent, state, starter).await?;
    }
    modify(store, id, now, |s| {
        if let Some(spec) = &update.spec {
            s.next_tick = spec.ticks()?.next_after(now);
            s.spec = spec.clone();
        }
        if let Some(jitter) = update.jitter_ms {
            s.jitter_ms = jitter;
        }
        if let Some(overlap) = update.overlap {
            s.overlap = overlap;
        }
        if let Some(catch_up) = update.catch_up {
            s.catch_up = catch_up;
        }
        if let Some(state) = &update.initial_state {
            s.initial_state = state.clone();
        }
        if let Some(labels) = &update.labels {
            s.labels = labels.clone();
        }
        Ok(())
    })
    .await
}

/// Pause a schedule: no tick starts a run until it is resumed. Idempotent.
///
/// # Errors
/// [`ScheduleError::NotFound`]; [`ScheduleError::Store`].
pub async fn pause_schedule(
    store: &dyn Store,
    id: &str,
    now: Millis,
) -> Result<Schedule, ScheduleError> {
    modify(store, id, now, |s| {
        s.paused = true;
        Ok(())
    })
    .await
}

/// Resume a paused schedule: it ticks again from its first tick after `now`; the ticks
/// that fell in the pause start nothing (backfill them to run them). Idempotent: a
/// schedule that is not paused keeps its next tick.
///
/// # Errors
/// [`ScheduleError::NotFound`]; [`ScheduleError::Store`].
pub async fn resume_schedule(
    store: &dyn Store,
    id: &str,
    now: Millis,
) -> Result<Schedule, ScheduleError> {
    modify(store, id, now, |s| {
        if s.paused {
            s.paused = false;
            s.next_tick = s.spec.ticks()?.next_after(now);
        }
        Ok(())
    })
    .await
}

/// Ask for a tick at `now`, started at the next pass of a worker of the agent whatever
/// the overlap policy, also while paused. Its run is `<id>@<now>`, labelled as any tick's.
///
/// # Errors
/// [`ScheduleError::NotFound`]; [`ScheduleError::Store`].
pub async fn trigger_schedule(
    store: &dyn Store,
    id: &str,
    now: Millis,
) -> Result<Schedule, ScheduleError> {
    modify(store, id, now, |s| {
        if !s.requested_ticks.contains(&now) {
            s.requested_ticks.push(now);
        }
        Ok(())
    })
    .await
}

/// Ask for every tick of the spec in `from..=to` (Unix ms), as [`trigger_schedule`] asks
/// for one. A tick that already has its run names the same run, so a backfill over ticks
/// that ran starts nothing for them. Returns the schedule and how many ticks it asked for.
///
/// # Errors
/// [`ScheduleError::TooManyTicks`] past [`MAX_BACKFILL_TICKS`]; [`ScheduleError::NotFound`];
/// [`ScheduleError::Store`].
pub async fn backfill_schedule(
    store: &dyn Store,
    id: &str,
    from: Millis,
    to: Millis,
    now: Millis,
) -> Result<(Schedule, usize), ScheduleError> {
    let ticks = load(store, id)
        .await?
        .spec
        .ticks()?
        .between(from, to, MAX_BACKFILL_TICKS + 1);
    if ticks.len() > MAX_BACKFILL_TICKS {
        return Err(ScheduleError::TooManyTicks);
    }
    let asked = ticks.len();
    let schedule = modify(store, id, now, |s| {
        for tick in &ticks {
            if !s.requested_ticks.contains(tick) {
                s.requested_ticks.push(*tick);
            }
        }
        s.requested_ticks.sort_unstable();
        Ok(())
    })
    .await?;
    Ok((schedule, asked))
}

/// Delete a schedule. Its runs stay.
///
/// # Errors
/// [`ScheduleError::NotFound`]; [`ScheduleError::Store`].
pub async fn delete_schedule(store: &dyn Store, id: &str) -> Result<(), ScheduleError> {
    if store.delete_schedule(id).await? {
        Ok(())
    } else {
        Err(ScheduleError::NotFound(id.to_owned()))
    }
}

async fn load(store: &dyn Store, id: &str) -> Result<Schedule, ScheduleError> {
    store
        .load_schedule(id)
        .await?
        .ok_or_else(|| ScheduleError::NotFound(id.to_owned()))
}

/// Read, change, compare-and-set; again from the read when someone wrote in between.
async fn modify(
    store: &dyn Store,
    id: &str,
    now: Millis,
    change: impl Fn(&mut Schedule) -> Result<(), ScheduleError>,
) -> Result<Schedule, ScheduleError> {
    loop {
        let read = load(store, id).await?;
        let mut s = read.clone();
        change(&mut s)?;
        s.revision = read.revision + 1;
        s.updated_at = now.max(read.updated_at);
        if let Some(written) = store.replace_schedule(&s, read.revision).await? {
            return Ok(written);
        }
    }
}

fn check_id(id: &str) -> Result<(), ScheduleError> {
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_ID_CHARS {
        return Err(ScheduleError::Invalid(format!(
            "a schedule id has 1 to {MAX_ID_CHARS} characters, not {chars}"
        )));
    }
    if id.contains('@') || id.chars().any(char::is_control) {
        return Err(ScheduleError::Invalid(format!(
            "schedule id `{}` holds `@` or a control character",
            id.escape_debug()
        )));
    }
    Ok(())
}

fn check_jitter(jitter_ms: u64) -> Result<(), ScheduleError> {
    if jitter_ms > MAX_JITTER_MS {
        return Err(ScheduleError::Invalid(format!(
            "a jitter of {jitter_ms} ms is over a day ({MAX_JITTER_MS} ms)"
        )));
    }
    Ok(())
}

/// The labels checked as a tick's run carries them, with the schedule's own two.
fn check_labels(labels: &Labels) -> Result<(), ScheduleError> {
    let mut with_ticks = labels.clone();
    with_ticks.insert(super::SCHEDULE_LABEL.to_owned(), "x".to_owned());
    with_ticks.insert(super::TICK_LABEL.to_owned(), "x".to_owned());
    validate_labels(&with_ticks).map_err(|e| ScheduleError::Invalid(e.to_string()))
}

async fn check_initial_state(
    store: &dyn Store,
    agent: &str,
    state: &Value,
    starter: Option<&dyn JsonStarter>,
) -> Result<(), ScheduleError> {
    if let Some(starter) = starter {
        return starter.check_initial_state(state).map_err(|e| match e {
            StartError::NotAnInitialState(message) => ScheduleError::InitialState(message),
            StartError::Runner(e) => ScheduleError::Start(StartError::Runner(e)),
        });
    }
    let graph = store
        .agent_graph(agent, None)
        .await?
        .ok_or_else(|| ScheduleError::UnknownAgent(agent.to_owned()))?;
    // serde's default enum form: `"Name"` for a unit variant, `{"Name": …}` otherwise.
    let name = match state {
        Value::String(name) => Some(name.as_str()),
        Value::Object(map) if map.len() == 1 => map.keys().next().map(String::as_str),
        _ => None,
    };
    let initial: Vec<&str> = graph
        .states
        .iter()
        .filter(|s| s.initial)
        .map(|s| s.name.as_str())
        .collect();
    match name {
        Some(name) if initial.contains(&name) => Ok(()),
        Some(name) => Err(ScheduleError::InitialState(format!(
            "`{name}` is not an initial state of agent `{agent}`; start it in `{}`",
            initial.join("`, `")
        ))),
        None => Err(ScheduleError::InitialState(format!(
            "not a state of agent `{agent}`: expected `{{\"State\": {{…}}}}`; start it in `{}`",
            initial.join("`, `")
        ))),
    }
}
