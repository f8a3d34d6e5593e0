//! The event log ([`EventLog`]): the events of each run's records, read from their positions.

use async_trait::async_trait;

use super::{MemoryStore, RunData};
use crate::store::events::{EventBuilder, EventCursor, EventScope, EventWakes, RunEvent};
use crate::store::{EventLog, SignalRecord, StoreError};

impl RunData {
    /// The events of this run's records positioned at or after `from`.
    fn events(&self, log: &mut EventBuilder, from: u64, signals: &[(&SignalRecord, u64)]) {
        let agent = &self.record.agent;
        for v in self.versions.values().filter(|v| v.position >= from) {
            log.transition(agent, v.position, &v.transition, &v.facts);
        }
        for (key, (started, finished)) in &self.call_positions {
            let Some(entry) = self.journal.get(key) else {
                continue;
            };
            if *started >= from {
                log.call_started(agent, *started, entry);
            }
            if let Some(finished) = finished.filter(|f| *f >= from) {
                log.call_finished(agent, finished, *started, entry);
            }
        }
        for (signal, position) in signals.iter().filter(|(_, p)| *p >= from) {
            log.signal(agent, *position, signal);
        }
        for (position, change) in self.status_changes.iter().filter(|(p, _)| *p >= from) {
            log.status_change(agent, *position, change);
        }
    }
}

#[async_trait]
impl EventLog for MemoryStore {
    async fn events(
        &self,
        scope: &EventScope,
        after: EventCursor,
        limit: usize,
    ) -> Result<Vec<RunEvent>, StoreError> {
        let g = self.lock();
        let from = after.position();
        let mut log = EventBuilder::new();
        let mut of_run = |data: &RunData| {
            let signals: Vec<_> = g
                .signals
                .values()
                .filter(|s| s.run_id == data.record.id)
                .filter_map(|s| g.signal_positions.get(&s.id).map(|p| (s, *p)))
                .collect();
            data.events(&mut log, from, &signals);
        };
        match scope {
            EventScope::Run(id) => of_run(g.run(id)?),
            EventScope::Agent(_) | EventScope::All => g
                .runs
                .values()
                .filter(|d| scope.contains(&d.record.id, &d.record.agent))
                .for_each(of_run),
        }
        Ok(log.finish(after, limit))
    }

    async fn event_wakes(&self) -> Result<Option<EventWakes>, StoreError> {
        Ok(Some(self.events.subscribe()))
    }

    async fn event_head(&self) -> Result<EventCursor, StoreError> {
        Ok(EventCursor::after_position(self.lock().position))
    }
}
