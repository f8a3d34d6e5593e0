//! A schedule as stored: what it starts, when, under which policies, and where its ticking
//! stands. The store keeps it as one document under its id and compares-and-sets it on
//! [`Schedule::revision`]; every change (an operator's edit, a tick) is one such write.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::spec::{ScheduleSpec, tick_text};
use crate::store::{Labels, Millis};

/// What a tick does while the run of the schedule's previous tick is not final.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OverlapPolicy {
    /// Drop the tick: no run for it, ever.
    #[default]
    Skip,
    /// Keep the latest such tick and start its run once the previous one is final; an
    /// older kept tick is dropped for it.
    BufferOne,
    /// Start the run anyway: runs of several ticks go on at once.
    AllowAll,
    /// Cancel the previous run (its compensations run) and start the new one.
    CancelPrevious,
}

/// What happens to ticks that came due while nobody ticked (every worker down).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CatchUp {
    /// Missed ticks start nothing: only a tick ticked within [`ON_TIME_MS`] of its due
    /// time starts a run.
    #[default]
    Skip,
    /// The latest of the missed ticks starts a run, the others nothing.
    Last,
    /// The latest `n` missed ticks start runs, oldest first.
    UpTo(#[serde(deserialize_with = "super::integer::u32")] u32),
}

/// How late a tick may be ticked and still count as on time for [`CatchUp::Skip`]: a
/// worker busy or restarting for a minute does not lose the tick.
pub const ON_TIME_MS: Millis = 60_000;

/// How often a tick kept by [`OverlapPolicy::BufferOne`] looks again whether the previous
/// run is final.
pub const BUFFER_RECHECK_MS: Millis = 1_000;

/// A schedule, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    /// Its id, chosen by whoever creates it; the runs of its ticks are named after it.
    pub id: String,
    /// The agent whose runs it starts.
    pub agent: String,
    /// When it ticks.
    pub spec: ScheduleSpec,
    /// Each tick's run starts up to this many milliseconds after the tick, by an amount
    /// drawn from the schedule's id and the tick ([`Schedule::due_at_tick`]), the same on
    /// every worker: schedules ticking at the same time spread out.
    #[serde(default)]
    pub jitter_ms: u64,
    /// While the previous tick's run is not final.
    #[serde(default)]
    pub overlap: OverlapPolicy,
    /// After downtime.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// A paused schedule ticks no more until resumed (ticks requested by hand still run).
    #[serde(default)]
    pub paused: bool,
    /// The state each run starts in: one of the agent's initial states, as JSON.
    pub initial_state: Value,
    /// Labels every run of it carries, besides `schedule` and `schedule.tick`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::BTreeMap<String, String>))]
    pub labels: Labels,
    /// When it was created, Unix ms.
    pub created_at: Millis,
    /// When it was last written, Unix ms.
    pub updated_at: Millis,
    /// Incremented by every write: the compare-and-set that gives each tick one winner.
    #[serde(default)]
    pub revision: u64,
    /// The next tick by the spec (before jitter), `None` when the spec has no more.
    pub next_tick: Option<Millis>,
    /// The latest tick that started a run.
    #[serde(default)]
    pub last_tick: Option<Millis>,
    /// The run of [`last_tick`](Self::last_tick): the overlap policy looks at it.
    #[serde(default)]
    pub last_run_id: Option<String>,
    /// A tick kept by [`OverlapPolicy::BufferOne`], waiting for the previous run to end.
    #[serde(default)]
    pub buffered_tick: Option<Millis>,
    /// Ticks asked for by hand (trigger now, backfill), started at the next pass whatever
    /// the overlap policy, oldest first.
    #[serde(default)]
    pub requested_ticks: Vec<Millis>,
    /// Why the latest tick that failed to start its run failed (a state the agent no
    /// longer accepts); cleared by the next run started.
    #[serde(default)]
    pub last_error: Option<String>,
}

impl Schedule {
    /// The time tick `tick`'s run is due: the tick plus its jitter, drawn from the
    /// schedule's id and the tick so that every worker computes the same.
    #[must_use]
    pub fn due_at_tick(&self, tick: Millis) -> Millis {
        if self.jitter_ms == 0 {
            return tick;
        }
        let digest = Sha256::new()
            .chain_update(self.id.as_bytes())
            .chain_update(tick.to_be_bytes())
            .finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let offset = u64::from_be_bytes(first) % self.jitter_ms.saturating_add(1);
        tick.saturating_add(i64::try_from(offset).unwrap_or(0))
    }

    /// When a worker should next look at this schedule: at once for ticks asked by hand,
    /// shortly for a buffered tick, at the next tick's due time otherwise; `None` when
    /// nothing will come due (paused, or the spec has no more ticks). The stores index it.
    #[must_use]
    pub fn due_at(&self) -> Option<Millis> {
        let requested = (!self.requested_ticks.is_empty()).then_some(self.updated_at);
        if self.paused {
            return requested;
        }
        let buffered = self
            .buffered_tick
            .map(|_| self.updated_at + BUFFER_RECHECK_MS);
        let next = self.next_tick.map(|t| self.due_at_tick(t));
        [requested, buffered, next].into_iter().flatten().min()
    }

    /// The run id of a tick: the schedule's id and the tick's time, so that whoever
    /// ticks it, however often, names the same run and the store creates it once.
    #[must_use]
    pub fn run_id_of(&self, tick: Millis) -> String {
        format!("{}@{}", self.id, tick_text(tick))
    }

    /// The labels of a tick's run: the schedule's, and `schedule=<id>`,
    /// `schedule.tick=<RFC 3339 time>` saying which tick started it.
    #[must_use]
    pub fn labels_of(&self, tick: Millis) -> Labels {
        let mut labels = self.labels.clone();
        labels.insert(SCHEDULE_LABEL.to_owned(), self.id.clone());
        labels.insert(TICK_LABEL.to_owned(), tick_text(tick));
        labels
    }
}

pub use crate::started_by::{SCHEDULE_LABEL, TICK_LABEL};

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(jitter_ms: u64) -> Schedule {
        Schedule {
            id: "digest".into(),
            agent: "Digest".into(),
            spec: ScheduleSpec::Interval {
                every_ms: 60_000,
                anchor_ms: 0,
            },
            jitter_ms,
            overlap: OverlapPolicy::Skip,
            catch_up: CatchUp::Skip,
            paused: false,
            initial_state: Value::Null,
            labels: Labels::new(),
            created_at: 0,
            updated_at: 0,
            revision: 0,
            next_tick: Some(60_000),
            last_tick: None,
            last_run_id: None,
            buffered_tick: None,
            requested_ticks: Vec::new(),
            last_error: None,
        }
    }

    #[test]
    fn jitter_is_the_same_for_the_same_tick_and_stays_in_bounds() {
        let s = schedule(5_000);
        let offsets: Vec<_> = (1..50)
            .map(|k| s.due_at_tick(k * 60_000) - k * 60_000)
            .collect();
        assert!(offsets.iter().all(|o| (0..=5_000).contains(o)));
        assert!(
            offsets.iter().any(|o| *o != offsets[0]),
            "the offset varies by tick"
        );
        assert_eq!(s.due_at_tick(120_000), s.clone().due_at_tick(120_000));
        assert_eq!(schedule(0).due_at_tick(120_000), 120_000);
    }

    #[test]
    fn due_at_follows_pause_requests_and_buffers() {
        let mut s = schedule(0);
        assert_eq!(s.due_at(), Some(60_000));
        s.paused = true;
        assert_eq!(s.due_at(), None);
        s.requested_ticks.push(5);
        s.updated_at = 10;
        assert_eq!(s.due_at(), Some(10), "a trigger runs while paused");
        s.paused = false;
        s.requested_ticks.clear();
        s.buffered_tick = Some(0);
        assert_eq!(s.due_at(), Some(10 + BUFFER_RECHECK_MS));
    }

    #[test]
    fn a_tick_names_its_run_and_labels_it() {
        let s = schedule(0);
        assert_eq!(s.run_id_of(60_000), "digest@1970-01-01T00:01:00.000Z");
        let labels = s.labels_of(60_000);
        assert_eq!(labels["schedule"], "digest");
        assert_eq!(labels["schedule.tick"], "1970-01-01T00:01:00.000Z");
    }
}
