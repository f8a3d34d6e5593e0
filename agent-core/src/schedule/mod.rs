//! Schedules: runs of an agent started from an initial state on a cron expression in a
//! time zone, or at a fixed interval ([`ScheduleSpec`]), with jitter, an
//! [`OverlapPolicy`] and a [`CatchUp`] policy; paused, resumed, triggered by hand or
//! backfilled over a time range.
//!
//! A schedule is stored ([`ScheduleStore`](crate::store::ScheduleStore)) and ticked by the
//! [`Worker`](crate::runner::Worker)s of its agent ([`tick_due`]): each tick starts one
//! run, named after the schedule and the tick, however many workers tick and whoever
//! crashes (see [`tick`](mod@tick)). The operators' verbs ([`create_schedule`],
//! [`pause_schedule`], …) are written once here over the store, each one
//! compare-and-set write. Times are Unix milliseconds passed in by the caller, so tests
//! run a schedule through days and daylight-saving transitions without sleeping.
//!
//! ```
//! use durable_agents::schedule::{ScheduleSpec, SpecError};
//! let spec = ScheduleSpec::Cron { expression: "30 2 * * *".into(), time_zone: "Mars/Base".into() };
//! assert_eq!(spec.validate(0), Err(SpecError::UnknownTimeZone("Mars/Base".into())));
//! ```

mod integer;
mod ops;
mod record;
mod spec;
pub mod tick;

pub use ops::{
    MAX_BACKFILL_TICKS, MAX_JITTER_MS, NewSchedule, ScheduleUpdate, backfill_schedule,
    create_schedule, delete_schedule, pause_schedule, resume_schedule, trigger_schedule,
    update_schedule,
};
pub use record::{
    BUFFER_RECHECK_MS, CatchUp, ON_TIME_MS, OverlapPolicy, SCHEDULE_LABEL, Schedule, TICK_LABEL,
};
pub use spec::{MIN_INTERVAL_MS, ScheduleSpec, SpecError, Ticks, tick_text};
pub use tick::{TICKS_AT_ONCE, TickReport, tick_due, tick_schedule};

use crate::runner::StartError;
use crate::store::StoreError;

/// Why a schedule could not be created, changed or ticked.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The spec does not tick: a malformed cron expression, an unknown time zone, an
    /// interval under a second.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The initial state is not one of the agent's initial states.
    #[error("invalid initial state: {0}")]
    InitialState(String),
    /// The id is empty or too long, the jitter over a day, or a label is not valid.
    #[error("invalid schedule: {0}")]
    Invalid(String),
    /// The agent is not registered in the store, so its initial states are unknown.
    #[error(
        "agent `{0}` is not registered in this store: run one of its workers once, \
         or create the schedule where the agent's code is"
    )]
    UnknownAgent(String),
    /// No schedule of this id.
    #[error("schedule `{0}` not found")]
    NotFound(String),
    /// A schedule of this id exists with another definition.
    #[error("schedule `{0}` already exists with another definition")]
    AlreadyExists(String),
    /// A backfill over more ticks than [`MAX_BACKFILL_TICKS`].
    #[error("the range holds more than {MAX_BACKFILL_TICKS} ticks: backfill it in parts")]
    TooManyTicks,
    /// Starting a tick's run failed (the store, not the state): the tick is started
    /// again at the next pass.
    #[error("starting a tick's run failed: {0}")]
    Start(#[source] StartError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
