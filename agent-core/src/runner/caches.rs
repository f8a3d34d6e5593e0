//! What the runner keeps between steps and shares between runs: a run's read cache, the
//! tools switched off as last read, the input fields each tool marks secret. Below the
//! runner's shared part, which holds them, and the step's context, which uses them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::store::StoreError;
use crate::tool::DynTool;

/// A lock whose poisoning is ignored: what it guards is a cache, right after any panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The successful read results of one run, by (tool, input hash), for the read cache
/// ([`ToolPolicy::cache`](crate::tool::ToolPolicy)): `None` until the run's journal is read,
/// at its first cacheable read call. One per drive of a run ([`Runner::drive`](super::Runner)):
/// the steps that follow each other under one lease share it, so the journal is read at
/// most once per claim, not once per step; the results a step journals are added as they
/// are journaled.
pub(crate) type ReadCache = tokio::sync::Mutex<Option<HashMap<(String, String), Value>>>;

/// Per tool, the names of the input fields its schema marks secret
/// ([`marked_fields`](crate::secrets::marked_fields)), computed once per tool.
#[derive(Debug, Default)]
pub(crate) struct MarkedFields(Mutex<std::collections::HashMap<String, Arc<[String]>>>);

impl MarkedFields {
    pub(crate) fn of(&self, tool: &dyn DynTool) -> Arc<[String]> {
        if let Some(m) = lock(&self.0).get(tool.name()) {
            return Arc::clone(m);
        }
        let marked: Arc<[String]> = crate::secrets::marked_fields(&tool.input_schema()).into();
        lock(&self.0).insert(tool.name().to_owned(), Arc::clone(&marked));
        marked
    }
}

/// A read cache known to be empty: the run has journaled nothing yet (its first step, at
/// version 0, with nothing journaled at that version).
pub(crate) fn empty_read_cache() -> ReadCache {
    tokio::sync::Mutex::new(Some(HashMap::new()))
}

/// A read cache to be loaded from the journal when first needed.
pub(crate) fn unloaded_read_cache() -> ReadCache {
    tokio::sync::Mutex::new(None)
}

/// The tools switched off in the registry, as a runner last read them: shared by every run
/// the runner drives, read again once older than
/// [`RunnerConfig::tool_registry_refresh`](super::RunnerConfig). A worker with thousands of
/// runs in flight reads the registry once per interval instead of once per step.
#[derive(Debug, Default)]
pub(crate) struct ToolSwitches {
    /// When the registry was read, and the tools it had switched off.
    read: Mutex<Option<(Instant, Arc<HashSet<String>>)>>,
    /// One reader at a time: the calls that find the copy stale while it is being read
    /// wait for that read instead of sending their own.
    reading: tokio::sync::Mutex<()>,
}

impl ToolSwitches {
    /// The tools switched off, read from `store` if the copy is older than `refresh`.
    pub(crate) async fn current(
        &self,
        store: &dyn crate::store::Store,
        refresh: Duration,
    ) -> Result<Arc<HashSet<String>>, StoreError> {
        let fresh = |read: &Option<(Instant, Arc<HashSet<String>>)>| {
            read.as_ref()
                .filter(|(at, _)| at.elapsed() < refresh)
                .map(|(_, off)| Arc::clone(off))
        };
        if let Some(off) = fresh(&lock(&self.read)) {
            return Ok(off);
        }
        let _reading = self.reading.lock().await;
        if let Some(off) = fresh(&lock(&self.read)) {
            return Ok(off);
        }
        // Timed from before the read: a switch written while it runs may be missed by it,
        // and is then seen by the next read, at most `refresh` after the switch.
        let at = Instant::now();
        let off: Arc<HashSet<String>> = Arc::new(
            store
                .tool_switches()
                .await?
                .into_iter()
                .filter(|s| !s.enabled)
                .map(|s| s.tool)
                .collect(),
        );
        *lock(&self.read) = Some((at, Arc::clone(&off)));
        Ok(off)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::ToolSwitches;
    use crate::store::OperatorStore;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn switches_are_read_again_once_older_than_the_refresh() {
        let store = MemoryStore::new();
        let switches = ToolSwitches::default();
        let hour = Duration::from_hours(1);
        assert!(switches.current(&store, hour).await.unwrap().is_empty());
        store
            .set_tool_enabled("Charge", false, Some("incident"))
            .await
            .unwrap();
        // Within the refresh interval: the copy read before the switch is used.
        assert!(switches.current(&store, hour).await.unwrap().is_empty());
        // Older than the refresh: read again, and kept.
        assert!(
            switches
                .current(&store, Duration::ZERO)
                .await
                .unwrap()
                .contains("Charge")
        );
        assert!(
            switches
                .current(&store, hour)
                .await
                .unwrap()
                .contains("Charge")
        );
    }
}
