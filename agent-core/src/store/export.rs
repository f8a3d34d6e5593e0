//! A run exported as one JSON document ([`RunExport`]): its record, the graph its agent
//! registered, every committed transition, its journal and its pending signals, as the store
//! holds them (sealed values stay sealed). What `agentctl export`, the API's
//! `GET /v1/runs/{id}/export` and the inspector's "Download" give, so that a run can be
//! attached to a bug report, archived, or read by another tool. With the state of every
//! version ([`export_run_with_states`], `agentctl export --states`) it is what
//! [`replay`](crate::replay) drives new code against.

use serde::{Deserialize, Serialize};

use super::{
    HistoryStore, JournalEntry, Millis, RunRecord, SignalRecord, StateAtVersion, StoreError,
    TransitionRecord, now_ms,
};
use crate::graph::GraphDescription;

/// The format's name and version, the document's `format`: a reader checks it before reading
/// the rest, and a later format with other fields gets another number.
pub const EXPORT_FORMAT: &str = "durable-agents/run-export/1";

/// A run as one document. The state of an earlier version is in it only when asked for
/// ([`export_run_with_states`]); otherwise the store rebuilds it on demand
/// (`agentctl state RUN --at V`, `GET /v1/runs/{id}/state/{v}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunExport {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// When the document was made (Unix milliseconds).
    pub exported_at: Millis,
    /// The run as it is now.
    pub run: RunRecord,
    /// The graph the run's agent registered under the run's fingerprint, when the store has
    /// it.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub graph: Option<GraphDescription>,
    /// Every committed transition, by version (those pruned by retention are gone).
    pub history: Vec<TransitionRecord>,
    /// Every journal entry: tool calls with their keys and results, decisions, by version
    /// and sequence.
    pub journal: Vec<JournalEntry>,
    /// Signals sent and not consumed yet.
    pub pending_signals: Vec<SignalRecord>,
    /// The state of every stored version, as stored (sealed values sealed), by version:
    /// empty unless asked for ([`export_run_with_states`]), and then absent from the JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<StateAtVersion>,
}

/// Export run `run_id`, or `None` when there is no such run.
///
/// # Errors
/// The store's.
pub async fn export_run(
    store: &dyn HistoryStore,
    run_id: &str,
) -> Result<Option<RunExport>, StoreError> {
    let Some(run) = store.load_run(run_id).await? else {
        return Ok(None);
    };
    let graph = store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?;
    let history = store.history(run_id).await?;
    let journal = store.journal(run_id, None).await?;
    let pending_signals = store.pending_signals(run_id).await?;
    Ok(Some(RunExport {
        format: EXPORT_FORMAT.to_owned(),
        exported_at: now_ms(),
        run,
        graph,
        history,
        journal,
        pending_signals,
        states: Vec::new(),
    }))
}

/// [`export_run`], with the state of every stored version ([`RunExport::states`]): what
/// [`replay`](crate::replay) needs to run each step's handler again. One read of the store
/// per version.
///
/// # Errors
/// The store's.
pub async fn export_run_with_states(
    store: &dyn HistoryStore,
    run_id: &str,
) -> Result<Option<RunExport>, StoreError> {
    let Some(mut export) = export_run(store, run_id).await? else {
        return Ok(None);
    };
    for t in &export.history {
        if let Some(state) = store.state_at(run_id, t.version).await? {
            export.states.push(state);
        }
    }
    Ok(Some(export))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{EXPORT_FORMAT, RunExport, export_run};
    use crate::store::memory::MemoryStore;
    use crate::store::{HistoryStore, NewRun, RunStore};

    #[tokio::test]
    async fn a_run_exports_whole_and_reads_back() {
        let store = Arc::new(MemoryStore::new());
        assert!(
            export_run(store.as_ref(), "nobody")
                .await
                .unwrap()
                .is_none()
        );
        store
            .create_run(NewRun::new(
                "r-1",
                "Flow",
                "fp",
                "Start",
                serde_json::json!({"Start": {}}),
            ))
            .await
            .unwrap();
        store
            .send_signal("r-1", "go", &serde_json::json!({"n": 1}))
            .await
            .unwrap();
        let export = export_run(store.as_ref() as &dyn HistoryStore, "r-1")
            .await
            .unwrap()
            .expect("the run");
        assert_eq!(export.format, EXPORT_FORMAT);
        assert_eq!(export.run.id, "r-1");
        assert_eq!(
            export.history.len(),
            1,
            "its creation: {:?}",
            export.history
        );
        assert_eq!(export.pending_signals.len(), 1);
        let text = serde_json::to_string(&export).unwrap();
        let back: RunExport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, export);
    }
}
