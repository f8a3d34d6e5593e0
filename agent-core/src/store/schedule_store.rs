//! The store's schedules role ([`ScheduleStore`]): schedules kept as documents, each
//! written by compare-and-set on its revision, and found by when they come due.

use async_trait::async_trait;

use super::{Millis, StoreError};
use crate::schedule::Schedule;

/// Where schedules ([`crate::schedule`]) are kept. A store keeps each as one document
/// with its agent and [`Schedule::due_at`] beside it, to find the due ones by index.
///
/// Every change is [`replace_schedule`](Self::replace_schedule), a compare-and-set on
/// [`Schedule::revision`]: of workers ticking the same schedule at once, one write wins
/// and the others find they lost, and an operator's edit racing a tick is never lost
/// (the loser reads again). That, with each tick's run id derived from the tick, is what
/// makes a tick start one run however many workers tick and whoever crashes.
#[async_trait]
pub trait ScheduleStore: Send + Sync + std::fmt::Debug {
    /// Store a new schedule as given (its revision as given, normally 0). `None`, and
    /// nothing written, when a schedule of that id exists.
    async fn insert_schedule(&self, schedule: &Schedule) -> Result<Option<Schedule>, StoreError>;

    /// The schedule, or `None`.
    async fn load_schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError>;

    /// The schedules of `agent`, or of every agent, by id.
    async fn list_schedules(&self, agent: Option<&str>) -> Result<Vec<Schedule>, StoreError>;

    /// Write `schedule` in place of the stored one of its id if that one's revision is
    /// `expected_revision`; the schedule as written, or `None` when the revision moved
    /// (someone else wrote first) or the schedule is gone. Nothing else is checked: the
    /// caller sets the new revision (`expected_revision + 1`).
    async fn replace_schedule(
        &self,
        schedule: &Schedule,
        expected_revision: u64,
    ) -> Result<Option<Schedule>, StoreError>;

    /// Delete the schedule; whether it existed. The runs it started are left as they are.
    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError>;

    /// At most `limit` schedules of `agent` whose [`Schedule::due_at`] is at or before
    /// `now`, earliest due first.
    async fn due_schedules(
        &self,
        agent: &str,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<Schedule>, StoreError>;

    /// The earliest [`Schedule::due_at`] of `agent`'s schedules, `None` when none will
    /// come due: a worker with nothing to do sleeps at most until then.
    async fn next_schedule_due(&self, agent: &str) -> Result<Option<Millis>, StoreError>;
}
