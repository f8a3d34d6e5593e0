//! A tick: a due schedule starts its runs through the agent's [`JsonStarter`], then moves
//! on by one compare-and-set write.
//!
//! Exactly one run per tick, however many workers tick and whoever crashes, comes from
//! two facts. A tick's run id is derived from the schedule and the tick
//! ([`Schedule::run_id_of`]) and run creation is idempotent on the id, so starting a
//! tick's run twice creates it once. And the schedule advances by a compare-and-set on
//! its revision ([`replace_schedule`](crate::store::ScheduleStore::replace_schedule)): of
//! the workers that read the same revision, one write wins, and a worker that crashed
//! after starting a run and before advancing leaves the schedule at the same tick, which
//! the next pass starts again, as the same run. A tick's run that exists counts as started: the overlap policy is not
//! asked again for it (it was asked before the run was started).

use std::fmt;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use rand::seq::SliceRandom as _;

use super::{CatchUp, ON_TIME_MS, OverlapPolicy, Schedule, ScheduleError};
use crate::runner::{JsonStarter, RunnerError, StartError};
use crate::store::{Millis, OperatorNote, Store, StoreError};

/// How many ticks one pass looks at, at most, when catching up: a schedule down for a
/// year at one tick a second is caught up in passes, not in one.
pub const MAX_TICKS_PER_PASS: usize = 1000;

/// How many schedules one pass ticks at once. A tick is two writes (its run, then the
/// schedule advanced), so ticking one schedule after another left a thousand due
/// schedules waiting on two thousand round trips; at once, the stores' group commits
/// take them together.
pub const TICKS_AT_ONCE: usize = 16;

/// What one pass over a schedule did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// The runs started (or found started by an earlier pass): each schedule's by tick,
    /// the schedules in the order their ticks ended.
    pub started: Vec<String>,
    /// Ticks that started no run: missed (catch-up) or overlapping (skip).
    pub skipped: Vec<Millis>,
    /// Runs cancelled by [`OverlapPolicy::CancelPrevious`].
    pub cancelled: Vec<String>,
    /// Another writer advanced the schedule first: this pass's write was not applied (its
    /// runs, if any, are the same runs the winner started).
    pub lost_race: bool,
}

impl TickReport {
    fn absorb(&mut self, other: Self) {
        self.started.extend(other.started);
        self.skipped.extend(other.skipped);
        self.cancelled.extend(other.cancelled);
        self.lost_race |= other.lost_race;
    }
}

/// Tick every due schedule of `starter`'s agent at `now` (Unix ms; tests pass their own
/// clock), at most `limit` of them, [`TICKS_AT_ONCE`] at a time, in an order of this
/// pass's own: the workers of an agent read the same due schedules, and each ticking them
/// in its own order makes them mostly tick different ones rather than race for each (a
/// race is safe, only wasted: the loser's runs are the winner's, its write refused).
///
/// # Errors
/// [`ScheduleError::Store`] when the store fails; the schedules not ticked yet are ticked
/// at the next pass, and a schedule whose run was started but not advanced starts the
/// same run again then (as after a crash there).
pub async fn tick_due(
    store: &dyn Store,
    starter: &dyn JsonStarter,
    now: Millis,
    limit: usize,
) -> Result<TickReport, ScheduleError> {
    let mut due = store.due_schedules(starter.agent(), now, limit).await?;
    due.shuffle(&mut rand::rng());
    // Fed by hand rather than through `buffer_unordered` over a mapping closure, whose
    // borrowed arguments make the worker's future fail `Send`'s higher-ranked check.
    let mut waiting = due.iter();
    let mut ticking = FuturesUnordered::new();
    let mut report = TickReport::default();
    loop {
        while ticking.len() < TICKS_AT_ONCE {
            let Some(schedule) = waiting.next() else {
                break;
            };
            ticking.push(tick_schedule(store, starter, schedule, now));
        }
        match ticking.next().await {
            Some(ticked) => report.absorb(ticked?),
            None => return Ok(report),
        }
    }
}

/// Tick one schedule at `now`, as read (`schedule` is the stored revision): start the
/// runs of the ticks due by its catch-up and overlap policies, then write it advanced,
/// if nobody wrote it since it was read. A schedule that is not due is left alone.
///
/// # Errors
/// [`ScheduleError::Store`] when the store fails (nothing is advanced: the next pass
/// starts the same runs again, and the store creates them once).
pub async fn tick_schedule(
    store: &dyn Store,
    starter: &dyn JsonStarter,
    schedule: &Schedule,
    now: Millis,
) -> Result<TickReport, ScheduleError> {
    let Some((advanced, mut report)) = start_due_runs(store, starter, schedule, now).await? else {
        return Ok(TickReport::default());
    };
    report.lost_race = store
        .replace_schedule(&advanced, schedule.revision)
        .await?
        .is_none();
    Ok(report)
}

/// [`tick_schedule`] up to the fault point between starting the runs and advancing the
/// schedule: the runs are started and the schedule is left as it was, as when the
/// ticking worker dies there. For the conformance suite's crash checks.
///
/// # Errors
/// As [`tick_schedule`].
#[doc(hidden)]
pub async fn tick_without_advancing(
    store: &dyn Store,
    starter: &dyn JsonStarter,
    schedule: &Schedule,
    now: Millis,
) -> Result<TickReport, ScheduleError> {
    Ok(start_due_runs(store, starter, schedule, now)
        .await?
        .map(|(_, report)| report)
        .unwrap_or_default())
}

/// What a pass decides for one tick.
enum Decision {
    Start,
    Skip,
    Buffer,
    CancelThenStart(String),
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Start => "start",
            Self::Skip => "skip",
            Self::Buffer => "buffer",
            Self::CancelThenStart(_) => "cancel then start",
        })
    }
}

/// Start the runs of the ticks due at `now`; the schedule as it is to be written next
/// (revision incremented), or `None` when nothing is due.
async fn start_due_runs(
    store: &dyn Store,
    starter: &dyn JsonStarter,
    read: &Schedule,
    now: Millis,
) -> Result<Option<(Schedule, TickReport)>, ScheduleError> {
    if read.due_at().is_none_or(|due| due > now) {
        return Ok(None);
    }
    let ticks = read.spec.ticks()?;
    let mut s = read.clone();
    let mut report = TickReport::default();

    // Ticks asked for by hand start whatever the overlap policy: someone asked for them.
    for tick in std::mem::take(&mut s.requested_ticks) {
        start_tick(starter, &mut s, tick, &mut report).await?;
    }

    if !s.paused {
        // The ticks due now, oldest first, and the first one not due yet.
        let mut due = Vec::new();
        let mut next = s.next_tick;
        while let Some(tick) = next {
            if s.due_at_tick(tick) > now || due.len() == MAX_TICKS_PER_PASS {
                break;
            }
            due.push(tick);
            next = ticks.next_after(tick);
        }
        s.next_tick = next;
        let keep = match s.catch_up {
            CatchUp::Skip => usize::from(
                due.last()
                    .is_some_and(|t| now.saturating_sub(s.due_at_tick(*t)) <= ON_TIME_MS),
            ),
            CatchUp::Last => 1,
            CatchUp::UpTo(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let split = due.len().saturating_sub(keep);
        report.skipped.extend(due.drain(..split));
        // A buffered tick is older than any tick due now: it goes first.
        let candidates: Vec<Millis> = s.buffered_tick.take().into_iter().chain(due).collect();
        for tick in candidates {
            match decide(store, &s, tick).await? {
                Decision::Start => start_tick(starter, &mut s, tick, &mut report).await?,
                Decision::Skip => report.skipped.push(tick),
                Decision::Buffer => {
                    if let Some(dropped) = s.buffered_tick.replace(tick) {
                        report.skipped.push(dropped);
                    }
                }
                Decision::CancelThenStart(previous) => {
                    let note = OperatorNote::new(
                        format!("schedule {}", s.id),
                        format!(
                            "overlap policy cancel_previous: tick {}",
                            super::tick_text(tick)
                        ),
                    );
                    match store.cancel_run(&previous, &note).await {
                        Ok(_) => report.cancelled.push(previous),
                        // It ended meanwhile: nothing to cancel.
                        Err(StoreError::RunIsFinal { .. } | StoreError::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                    start_tick(starter, &mut s, tick, &mut report).await?;
                }
            }
        }
    }
    s.revision = read.revision + 1;
    s.updated_at = now;
    Ok(Some((s, report)))
}

/// The overlap policy's answer for `tick`, from the run of the schedule's latest tick.
async fn decide(store: &dyn Store, s: &Schedule, tick: Millis) -> Result<Decision, ScheduleError> {
    // Started by a pass that died before advancing, or by a racing worker: it counts.
    if store.load_run(&s.run_id_of(tick)).await?.is_some() {
        return Ok(Decision::Start);
    }
    let Some(previous) = &s.last_run_id else {
        return Ok(Decision::Start);
    };
    let running = store
        .load_run(previous)
        .await?
        .is_some_and(|r| !r.status.is_final());
    Ok(match (running, s.overlap) {
        (false, _) | (true, OverlapPolicy::AllowAll) => Decision::Start,
        (true, OverlapPolicy::Skip) => Decision::Skip,
        (true, OverlapPolicy::BufferOne) => Decision::Buffer,
        (true, OverlapPolicy::CancelPrevious) => Decision::CancelThenStart(previous.clone()),
    })
}

/// Start `tick`'s run (idempotent on its derived id) and record it as the latest.
async fn start_tick(
    starter: &dyn JsonStarter,
    s: &mut Schedule,
    tick: Millis,
    report: &mut TickReport,
) -> Result<(), ScheduleError> {
    let run_id = s.run_id_of(tick);
    match starter
        .start_json(run_id.clone(), s.initial_state.clone(), s.labels_of(tick))
        .await
    {
        Ok(_) => {
            s.last_error = None;
        }
        // The state no longer starts the agent (its code changed): the tick is lost, and
        // the schedule says why until a run starts again.
        Err(StartError::NotAnInitialState(message)) => {
            tracing::warn!(schedule = %s.id, tick = tick, error = %message,
                "a schedule's tick could not start its run");
            s.last_error = Some(message);
            report.skipped.push(tick);
            return Ok(());
        }
        // A run of that id exists, started otherwise (the schedule's labels or state were
        // edited since a crashed pass started it): the tick has its run.
        Err(StartError::Runner(RunnerError::Store(StoreError::AlreadyExists(_)))) => {}
        Err(e) => return Err(ScheduleError::Start(e)),
    }
    if s.last_tick.is_none_or(|last| tick >= last) {
        s.last_tick = Some(tick);
        s.last_run_id = Some(run_id.clone());
    }
    report.started.push(run_id);
    Ok(())
}
