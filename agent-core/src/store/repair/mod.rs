//! Resetting a quarantined run to an earlier, verified version (`agentctl repair`).
//!
//! A run is quarantined when what is stored cannot be executed: its row does not read, its
//! state does not deserialize, its history contradicts its row. Once an operator has found
//! why, [`repair`] puts the run back at a version whose state replays and whose hash chain
//! verifies up to it. The reset is a transition of its own (kind
//! [`Repair`](super::TransitionKind::Repair)), the one after the last stored version and
//! chained to it, so the history keeps everything that happened, the repair included, and
//! `verify` checks it like any other step. It is planned here from what the store reads
//! and written by [`OperatorStore::repair_run`] in one write, refused if the run moved meanwhile.

use std::collections::BTreeMap;

mod commit;

pub use commit::RepairCommit;

use super::verify::verify_chain;
use super::{
    HistoryStore, OperatorNote, OperatorStore, RunRecord, RunStatus, StoreError, TransitionKind,
    now_ms, transition_hash,
};

/// Why a repair was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// No such run.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// Only quarantined runs are repaired: the others are runnable, or final by design.
    #[error("run `{run_id}` is {status}, not quarantined: only a quarantined run is repaired")]
    NotQuarantined {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// A worker holds the run.
    #[error("run `{0}` is held by a worker's live lease")]
    Leased(String),
    /// The version is not stored (never written, or pruned).
    #[error("run `{run_id}` has no stored version {version}{stored}")]
    NoSuchVersion {
        /// The run.
        run_id: String,
        /// The version asked for.
        version: u64,
        /// The stored versions, for the message.
        stored: String,
    },
    /// The history does not verify up to the version, or its state does not replay.
    #[error("run `{run_id}` cannot go back to version {version}: {problem}")]
    Unverified {
        /// The run.
        run_id: String,
        /// The version asked for.
        version: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// The store failed, or the run moved between plan and write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Plan the repair of quarantined run `run_id` to `to_version`, by and for `note`: the run is quarantined and
/// not leased, the version is stored, its state replays, and the hash chain verifies from
/// the first stored version up to it.
///
/// # Errors
/// [`RepairError`] saying which of these does not hold.
pub async fn plan_repair(
    store: &dyn HistoryStore,
    run_id: &str,
    to_version: u64,
    note: OperatorNote,
) -> Result<RepairCommit, RepairError> {
    let run = store
        .inspect_run(run_id)
        .await?
        .ok_or_else(|| RepairError::NotFound(run_id.to_owned()))?
        .record;
    if run.status != RunStatus::Quarantined {
        return Err(RepairError::NotQuarantined {
            run_id: run_id.to_owned(),
            status: run.status,
        });
    }
    if run.lease_owner.is_some() && run.lease_expires_at.is_some_and(|t| t > now_ms()) {
        return Err(RepairError::Leased(run_id.to_owned()));
    }
    let history = store.history(run_id).await?;
    let (Some(first), Some(last)) = (history.first(), history.last()) else {
        return Err(RepairError::NoSuchVersion {
            run_id: run_id.to_owned(),
            version: to_version,
            stored: " (it has none)".to_owned(),
        });
    };
    let Some(upto) = history.iter().position(|t| t.version == to_version) else {
        return Err(RepairError::NoSuchVersion {
            run_id: run_id.to_owned(),
            version: to_version,
            stored: format!(" (stored: {}..={})", first.version, last.version),
        });
    };
    let unverified = |problem: String| RepairError::Unverified {
        run_id: run_id.to_owned(),
        version: to_version,
        problem,
    };
    let prefix = &history[..=upto];
    let mut states = BTreeMap::new();
    for t in prefix {
        if let Ok(Some(s)) = store.state_at(run_id, t.version).await {
            states.insert(t.version, s);
        }
    }
    let Some(restored) = states.get(&to_version).cloned() else {
        return Err(unverified("its state does not replay".to_owned()));
    };
    // The chain up to the version, checked as if the run stood there (the run row itself
    // is what may be damaged: it is rewritten).
    let as_of = RunRecord {
        version: to_version,
        state_name: restored.state_name.clone(),
        state: restored.state.clone(),
        ..run.clone()
    };
    let report = verify_chain(&as_of, prefix, &states);
    if let Some(p) = report.problem {
        return Err(unverified(format!(
            "the hash chain breaks at version {} ({}: {})",
            p.version,
            p.kind.as_str(),
            p.message
        )));
    }
    let mut commit = RepairCommit {
        run_id: run_id.to_owned(),
        kind: TransitionKind::Repair,
        expected_status: RunStatus::Quarantined,
        expected_epoch: run.epoch,
        last_version: last.version,
        from_state: last.to_state.clone(),
        restored_version: to_version,
        to_state: restored.state_name,
        state: restored.state,
        note,
        hash: String::new(),
    };
    commit.hash = transition_hash(&last.hash, &commit.link());
    Ok(commit)
}

/// Repair quarantined run `run_id` to `to_version`, by and for `note` ([`plan_repair`], then
/// [`OperatorStore::repair_run`]): the run is running again at that version's state, at a new
/// version, with its error cleared.
///
/// # Errors
/// [`RepairError`]; [`StoreError::Conflict`] inside it when the run moved between the plan
/// and the write (nothing was written: look again and retry).
pub async fn repair(
    store: &dyn OperatorStore,
    run_id: &str,
    to_version: u64,
    note: OperatorNote,
) -> Result<RunRecord, RepairError> {
    let commit = plan_repair(store, run_id, to_version, note).await?;
    Ok(store.repair_run(&commit).await?)
}
