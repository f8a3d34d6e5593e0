//! The schedules role of the in-memory store: a map under the store's one lock, so the
//! compare-and-set is atomic.

use async_trait::async_trait;

use super::MemoryStore;
use crate::schedule::Schedule;
use crate::store::{Millis, ScheduleStore, StoreError};

#[async_trait]
impl ScheduleStore for MemoryStore {
    async fn insert_schedule(&self, schedule: &Schedule) -> Result<Option<Schedule>, StoreError> {
        let mut g = self.lock();
        if g.schedules.contains_key(&schedule.id) {
            return Ok(None);
        }
        g.schedules.insert(schedule.id.clone(), schedule.clone());
        drop(g);
        // A worker of the agent may sleep past the new schedule's first tick.
        self.work.notify_waiters();
        Ok(Some(schedule.clone()))
    }

    async fn load_schedule(&self, id: &str) -> Result<Option<Schedule>, StoreError> {
        Ok(self.lock().schedules.get(id).cloned())
    }

    async fn list_schedules(&self, agent: Option<&str>) -> Result<Vec<Schedule>, StoreError> {
        Ok(self
            .lock()
            .schedules
            .values()
            .filter(|s| agent.is_none_or(|a| s.agent == a))
            .cloned()
            .collect())
    }

    async fn replace_schedule(
        &self,
        schedule: &Schedule,
        expected_revision: u64,
    ) -> Result<Option<Schedule>, StoreError> {
        let mut g = self.lock();
        match g.schedules.get_mut(&schedule.id) {
            Some(stored) if stored.revision == expected_revision => {
                *stored = schedule.clone();
                drop(g);
                self.work.notify_waiters();
                Ok(Some(schedule.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().schedules.remove(id).is_some())
    }

    async fn due_schedules(
        &self,
        agent: &str,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<Schedule>, StoreError> {
        let g = self.lock();
        let mut due: Vec<(Millis, &Schedule)> = g
            .schedules
            .values()
            .filter(|s| s.agent == agent)
            .filter_map(|s| s.due_at().filter(|d| *d <= now).map(|d| (d, s)))
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        Ok(due
            .into_iter()
            .take(limit)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn next_schedule_due(&self, agent: &str) -> Result<Option<Millis>, StoreError> {
        Ok(self
            .lock()
            .schedules
            .values()
            .filter(|s| s.agent == agent)
            .filter_map(Schedule::due_at)
            .min())
    }
}
