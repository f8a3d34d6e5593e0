//! Item 8: journals of real runs of the fixture agent, captured as JSON fixtures
//! (`fixtures/replay/*.json`, written by `cargo run -p battery --bin gen-replay-fixtures`),
//! and the loader that puts a fixture back into a fresh store through the public `Store`
//! API (`create_run`, `record_entry`, `commit_step`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_conformance::fixture::Order;
use agent_core::Agent;
use agent_core::runner::{Runner, RunnerError, StepOutcome};
use agent_core::store::{
    Claimed, JournalEntry, NewRun, RunFailure, RunRecord, RunStatus, StepCommit, Store,
    TransitionKind,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One committed version of a captured run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// The version.
    pub version: u64,
    /// How it was reached (`start` for version 0).
    pub kind: TransitionKind,
    /// The state's name.
    pub state_name: String,
    /// The state.
    pub state: Value,
    /// The run's status after it.
    pub status: RunStatus,
    /// For waiting runs.
    pub waiting_for: Option<agent_core::store::WaitingFor>,
    /// The run's error after it.
    pub error: Option<RunFailure>,
}

/// A signal sent to a captured run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Value,
    /// The version whose commit consumed it.
    pub consumed_at_version: Option<u64>,
}

/// A captured run: every version, the whole journal, the signals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    /// What the run exercised.
    pub scenario: String,
    /// The agent.
    pub agent: String,
    /// The graph's fingerprint when captured.
    pub fingerprint: String,
    /// The run's id.
    pub run_id: String,
    /// Versions `0..=n`.
    pub versions: Vec<Version>,
    /// The journal, by (version, seq).
    pub journal: Vec<JournalEntry>,
    /// Signals sent.
    pub signals: Vec<Signal>,
}

/// Where the fixtures live.
#[must_use]
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/replay")
}

/// Every committed fixture, sorted by file name.
///
/// # Panics
/// When a fixture cannot be read or parsed.
#[must_use]
pub fn load_all() -> Vec<(String, Capture)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures/replay exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable fixture");
            let capture: Capture =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                capture,
            )
        })
        .collect()
}

fn version_of(r: &RunRecord, kind: TransitionKind) -> Version {
    Version {
        version: r.version,
        kind,
        state_name: r.state_name.clone(),
        state: r.state.clone(),
        status: r.status,
        waiting_for: r.waiting_for.clone(),
        error: r.error.clone(),
    }
}

/// Drive `run_id` to a final status step by step, resuming after injected crashes, and
/// capture every version it committed.
///
/// # Errors
/// What the runner or the store said (crashes excepted).
pub async fn capture<H: Send + Sync + 'static>(
    runner: &Runner<Order, H>,
    scenario: &str,
    run_id: &str,
    signals: &[(String, Value)],
) -> Result<Capture, String>
where
    Order: agent_core::Handle<H>,
{
    let store = runner.store();
    let mut seen: BTreeMap<u64, RunRecord> = BTreeMap::new();
    let e = |e: agent_core::store::StoreError| e.to_string();
    loop {
        let claimed = store
            .claim_run(
                run_id,
                &runner.config().worker_id,
                runner.config().lease_ttl,
            )
            .await
            .map_err(e)?;
        let Some(Claimed {
            mut lease,
            mut record,
            ..
        }) = claimed
        else {
            break;
        };
        seen.insert(record.version, record.clone());
        loop {
            match runner.step(&mut lease, record.clone()).await {
                Ok(StepOutcome::Committed(r)) => {
                    seen.insert(r.version, r.clone());
                    record = r;
                }
                Ok(
                    StepOutcome::Waiting(r) | StepOutcome::Finished(r) | StepOutcome::Deferred(r),
                ) => {
                    seen.insert(r.version, r);
                    store.release_lease(&lease).await.map_err(e)?;
                    break;
                }
                Err(RunnerError::Crashed(_)) => break,
                Err(other) => return Err(other.to_string()),
            }
        }
        let now = store.load_run(run_id).await.map_err(e)?.ok_or("vanished")?;
        if now.status.is_final() {
            seen.insert(now.version, now);
            break;
        }
    }
    let history = store.history(run_id).await.map_err(e)?;
    let mut versions = Vec::new();
    for t in &history {
        let record = seen
            .get(&t.version)
            .ok_or_else(|| format!("version {} was never observed", t.version))?;
        versions.push(version_of(record, t.kind));
    }
    let graph = Order::graph();
    let consumed = versions.windows(2).find_map(|w| {
        let waits = graph
            .state(&w[0].state_name)
            .is_some_and(|s| s.wait.is_some());
        (waits && w[1].kind != TransitionKind::Status).then_some(w[1].version)
    });
    Ok(Capture {
        scenario: scenario.to_owned(),
        agent: Order::NAME.to_owned(),
        fingerprint: graph.fingerprint(),
        run_id: run_id.to_owned(),
        versions,
        journal: store.journal(run_id, None).await.map_err(e)?,
        signals: signals
            .iter()
            .map(|(name, payload)| Signal {
                name: name.clone(),
                payload: payload.clone(),
                consumed_at_version: consumed,
            })
            .collect(),
    })
}

/// Put `capture` into `store` as it stood before the step from version `at`: versions
/// `0..=at` committed, the journal of versions `0..=at` (all of it when `whole`), and the
/// signals not consumed by then. Leaves the run unleased.
///
/// # Errors
/// What the store said.
pub async fn load(
    store: &Arc<dyn Store>,
    capture: &Capture,
    at: u64,
    whole: bool,
) -> Result<(), String> {
    let e = |e: agent_core::store::StoreError| e.to_string();
    let v0 = &capture.versions[0];
    store
        .create_run(NewRun::new(
            capture.run_id.clone(),
            capture.agent.clone(),
            capture.fingerprint.clone(),
            v0.state_name.clone(),
            v0.state.clone(),
        ))
        .await
        .map_err(e)?;
    let Claimed { lease, .. } = store
        .claim_run(
            &capture.run_id,
            "loader",
            std::time::Duration::from_secs(30),
        )
        .await
        .map_err(e)?
        .ok_or("the loader could not claim the run")?;
    for entry in capture.journal.iter().filter(|j| whole || j.version <= at) {
        store.record_entry(&lease, entry).await.map_err(e)?;
    }
    for w in capture.versions.windows(2) {
        let (prev, next) = (&w[0], &w[1]);
        if next.version > at {
            break;
        }
        let commit = StepCommit {
            expected_version: prev.version,
            from_state: prev.state_name.clone(),
            to_state: next.state_name.clone(),
            state: next.state.clone(),
            kind: next.kind,
            status: next.status,
            waiting_for: next.waiting_for.clone(),
            wake_at: None,
            error: next.error.clone(),
            consumed_signal: None,
            spend: None,
        };
        store.commit_step(&lease, &commit, &[]).await.map_err(e)?;
    }
    store.release_lease(&lease).await.map_err(e)?;
    for s in &capture.signals {
        if s.consumed_at_version.is_none_or(|c| c > at) {
            store
                .send_signal(&capture.run_id, &s.name, &s.payload)
                .await
                .map_err(e)?;
        }
    }
    Ok(())
}
