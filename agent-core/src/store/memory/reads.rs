//! The history reads ([`HistoryStore`]): graphs, runs, histories, journals, signals, a fork.

use async_trait::async_trait;

use super::{MemoryStore, RunData, StoredVersion};
use crate::graph::GraphDescription;
use crate::store::{
    HistoryStore, JournalEntry, NewRun, RunFilter, RunRecord, SignalRecord, StateAtVersion,
    StoreError, ToolSwitch, TransitionRecord, creation_hash,
};

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn agent_graph(
        &self,
        agent: &str,
        fingerprint: Option<&str>,
    ) -> Result<Option<GraphDescription>, StoreError> {
        let g = self.lock();
        Ok(g.graphs
            .iter()
            .filter(|((a, f), _)| a == agent && fingerprint.is_none_or(|want| want == f))
            .max_by_key(|(_, (_, seq))| *seq)
            .map(|(_, (graph, _))| graph.clone()))
    }

    async fn agents(&self) -> Result<Vec<String>, StoreError> {
        let g = self.lock();
        let mut names: Vec<String> = g.graphs.keys().map(|(a, _)| a.clone()).collect();
        names.dedup();
        Ok(names)
    }

    async fn load_run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock().runs.get(run_id).map(|d| d.record.clone()))
    }

    async fn journal(
        &self,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let g = self.lock();
        let data = g.run(run_id)?;
        Ok(data
            .journal
            .values()
            .filter(|e| version.is_none_or(|v| e.version == v))
            .cloned()
            .collect())
    }

    async fn history(&self, run_id: &str) -> Result<Vec<TransitionRecord>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .versions
            .values()
            .map(|v| v.transition.clone())
            .collect())
    }

    async fn history_from(
        &self,
        run_id: &str,
        version: u64,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .versions
            .range(version..)
            .take(limit)
            .map(|(_, v)| v.transition.clone())
            .collect())
    }

    async fn journal_from(
        &self,
        run_id: &str,
        from: (u64, u32),
        limit: usize,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let g = self.lock();
        Ok(g.run(run_id)?
            .journal
            .range(from..)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn state_at(
        &self,
        run_id: &str,
        version: u64,
    ) -> Result<Option<StateAtVersion>, StoreError> {
        let g = self.lock();
        g.run(run_id)?.state_at(version)
    }

    async fn fork(
        &self,
        run_id: &str,
        version: u64,
        new_id: &str,
    ) -> Result<RunRecord, StoreError> {
        let record = {
            let mut g = self.lock();
            let data = g.run(run_id)?;
            let at = data
                .state_at(version)?
                .ok_or_else(|| StoreError::NotFound(format!("{run_id}@{version}")))?;
            // The state at `version` is of the agent version the run was on then.
            let history: Vec<TransitionRecord> = data
                .versions
                .values()
                .map(|v| v.transition.clone())
                .collect();
            let (agent_version, fingerprint) =
                crate::store::agent_version_at(&data.record, &history, version);
            let new = NewRun::new(
                new_id,
                data.record.agent.clone(),
                fingerprint,
                at.state_name,
                at.state,
            )
            .with_labels(data.record.labels.clone())
            .with_agent_version(agent_version);
            if let Some(existing) = g.runs.get(new_id) {
                return if existing.creation_hash == creation_hash(&new)
                    && existing.record.parent == Some((run_id.to_owned(), version))
                {
                    Ok(existing.record.clone())
                } else {
                    Err(StoreError::AlreadyExists(new_id.to_owned()))
                };
            }
            g.insert_run(&new, Some((run_id.to_owned(), version)))
        };
        self.work.notify_waiters();
        self.events.wake(&record.id);
        Ok(record)
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let g = self.lock();
        let mut runs: Vec<&RunData> = g
            .runs
            .values()
            .filter(|d| {
                filter.agent.as_ref().is_none_or(|a| *a == d.record.agent)
                    && (filter.spawned_by.as_ref()).is_none_or(|p| {
                        d.record.spawned_by.as_ref().is_some_and(|s| s.run_id == *p)
                    })
                    && (filter.statuses.is_empty() || filter.statuses.contains(&d.record.status))
                    && filter
                        .labels
                        .iter()
                        .all(|(k, v)| d.record.labels.get(k) == Some(v))
                    && filter
                        .created_after
                        .is_none_or(|t| d.record.created_at >= t)
                    && filter
                        .created_before
                        .is_none_or(|t| d.record.created_at < t)
                    && (filter.agent_version).is_none_or(|v| d.record.agent_version == v)
                    && (filter.fingerprint.as_ref()).is_none_or(|f| d.record.fingerprint == *f)
                    && (filter.after.as_ref()).is_none_or(|k| {
                        (d.record.created_at, d.record.id.as_str()) < (k.created_at, &k.id)
                    })
            })
            .collect();
        runs.sort_by(|a, b| {
            (b.record.created_at, &b.record.id).cmp(&(a.record.created_at, &a.record.id))
        });
        Ok(runs
            .into_iter()
            .take(filter.limit.unwrap_or(usize::MAX))
            .map(|d| d.record.clone())
            .collect())
    }

    async fn signal_by_key(&self, run_id: &str, key: &str) -> Result<Option<i64>, StoreError> {
        let g = self.lock();
        Ok(g.signal_keys
            .get(&(run_id.to_owned(), key.to_owned()))
            .copied())
    }

    async fn pending_signals(&self, run_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let g = self.lock();
        g.run(run_id)?;
        Ok(g.signals
            .values()
            .filter(|s| s.run_id == run_id && s.consumed_at_version.is_none())
            .cloned()
            .collect())
    }

    async fn tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError> {
        Ok(self.lock().tools.values().cloned().collect())
    }

    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError> {
        Ok(self.lock().tools.get(tool).is_none_or(|s| s.enabled))
    }

    async fn storage_bytes(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        let g = self.lock();
        let data = g.run(run_id)?;
        let versions: u64 = data.versions.values().map(StoredVersion::bytes).sum();
        let journal: u64 = data
            .journal
            .values()
            .map(|e| serde_json::to_vec(e).map_or(0, |b| b.len() as u64))
            .sum();
        Ok(Some(versions + journal))
    }
}
