//! Correcting a stopped run's state and letting it continue: the debugger's "change the
//! variable and step on" (`agentctl edit`, `POST /v1/runs/{id}/state`,
//! [`Runner::edit_state`](crate::runner::Runner::edit_state)).
//!
//! A run that is waiting, failed, quarantined or dead-lettered, and that no worker holds,
//! gets a new state: a whole state, or a JSON Patch (RFC 6902) of its current one. The
//! edit is one transition of kind [`Edited`](super::TransitionKind::Edited), the one after
//! the last stored version and chained to it, carrying who edited and why, so the history
//! keeps what the run was and `verify` checks the edit like any other step. The run is
//! `running` after it: a worker claims it and steps the edited state (a waiting state waits
//! again, its timer started anew; a terminal state ends the run).
//!
//! What is checked before anything is written:
//! - the state is one the run's graph declares, and a different variant is one the graph
//!   allows from the current state (a declared edge, or its `on_error`), unless the edit
//!   overrides the graph, which its note then says;
//! - where the agent's code is at hand (the typed [`Runner::edit_state`](crate::runner::Runner::edit_state), or a service with
//!   the agent registered), the state reads as the agent's enum. Elsewhere (`agentctl`, which
//!   links no agent) the next worker reads it before any handler runs, and a state that does
//!   not read quarantines the run, which can then be edited again: an edit never makes a
//!   handler run on a state its type refuses.
//!
//! The state is stored as the runner stores states: the sealed values of the current state
//! (and any sealed envelope pasted into a whole state) are opened with the given keys
//! before the patch applies, and the result is sealed again, so an edit neither stores a
//! secret in the clear nor seals a sealed value twice.
//!
//! A run waiting for its children is not edited (its step resumes where the children were
//! started); nor is a run a live lease holds, or one that ended by design.

use serde_json::Value;

use super::repair::RepairCommit;
use super::{
    HistoryStore, OperatorNote, OperatorStore, RunRecord, RunStatus, StoreError, TransitionKind,
    WaitingFor, now_ms, transition_hash,
};
use crate::graph::GraphDescription;
use crate::secrets::{Redactor, SealKeys, SealPolicy};

/// The new state of an edit.
#[derive(Clone, Debug, PartialEq)]
pub enum StateEdit {
    /// The whole state, as the agent's enum serializes (`{"Review": {"cart": …}}`).
    Whole(Value),
    /// A JSON Patch applied to the run's current state.
    Patch(json_patch::Patch),
}

impl StateEdit {
    /// A patch from its JSON (an array of RFC 6902 operations).
    ///
    /// # Errors
    /// When `ops` is not a JSON Patch: the message says which operation and why.
    pub fn patch(ops: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(ops).map(Self::Patch)
    }
}

/// An edit of a run's state: what, and by whom and why.
#[derive(Clone, Debug)]
pub struct Edit {
    /// The new state.
    pub state: StateEdit,
    /// The new state's name, when its JSON does not say it (an enum serialized with an
    /// internal or adjacent tag); for the usual external tag (`{"Review": …}` or
    /// `"Done"`) it is read from the JSON, and must agree when given.
    pub state_name: Option<String>,
    /// Allow a variant the graph does not allow from the current state; recorded in the
    /// note of the transition.
    pub override_graph: bool,
    /// Who edits, and why: recorded with the transition and covered by its hash.
    pub note: OperatorNote,
}

/// Reads a state as the agent's enum: its name, or why it does not read.
pub type ReadState<'a> = &'a (dyn Fn(&Value) -> Result<String, String> + Send + Sync);

/// What an edit is checked and sealed with.
#[derive(Clone, Copy)]
pub struct EditCheck<'a> {
    /// Reads the new state as the agent's enum, where the agent's code is at hand (the
    /// runner's [`edit_run`](crate::runner::Runner::edit_run)); `None` elsewhere.
    pub read_state: Option<ReadState<'a>>,
    /// Names the fields whose values are sealed, and the secrets to seal wherever they show.
    pub redactor: &'a Redactor,
    /// Open the current state's sealed values and seal the new state's.
    pub keys: &'a SealKeys,
}

impl std::fmt::Debug for EditCheck<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EditCheck")
            .field("read_state", &self.read_state.is_some())
            .finish_non_exhaustive()
    }
}

/// Why an edit was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// No such run.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// Only a stopped run is edited.
    #[error(
        "run `{run_id}` is {status}: only a waiting, failed, quarantined or dead-lettered run is \
         edited{hint}"
    )]
    NotStopped {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
        /// What to do instead, for the message.
        hint: &'static str,
    },
    /// The run waits for the children its step started.
    #[error("run `{0}` waits for its children: edit it once they have ended, or cancel them")]
    WaitsForChildren(String),
    /// A worker holds the run.
    #[error("run `{0}` is held by a worker's live lease; edit it once the worker lets go")]
    Leased(String),
    /// The new state is not one the run can take.
    #[error("run `{run_id}`: {problem}")]
    Invalid {
        /// The run.
        run_id: String,
        /// What is wrong with the new state.
        problem: String,
    },
    /// The graph does not allow the new variant from the current one.
    #[error(
        "run `{run_id}`: the graph has no edge from `{from}` to `{to}`; edit to a state `{from}` \
         leads to ({allowed}), or override the graph (recorded in the history)"
    )]
    NotAnEdge {
        /// The run.
        run_id: String,
        /// The current state.
        from: String,
        /// The edited state.
        to: String,
        /// The states the graph allows from `from`, for the message.
        allowed: String,
    },
    /// The store failed, or the run moved between plan and write
    /// ([`StoreError::Conflict`]: look again and retry).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Plan `edit` of run `run_id`: every check of the [module](self) made with `check`, the
/// state sealed, the transition built and chained.
///
/// # Errors
/// [`EditError`] saying which check failed.
pub async fn plan_edit(
    store: &dyn HistoryStore,
    run_id: &str,
    edit: Edit,
    check: EditCheck<'_>,
) -> Result<RepairCommit, EditError> {
    let run = store
        .load_run(run_id)
        .await?
        .ok_or_else(|| EditError::NotFound(run_id.to_owned()))?;
    check_editable(&run)?;
    let invalid = |problem: String| EditError::Invalid {
        run_id: run_id.to_owned(),
        problem,
    };
    let unsealed = |e: crate::secrets::SealError| {
        invalid(format!("its sealed values cannot be opened here: {e}"))
    };
    let mut state = match edit.state {
        StateEdit::Whole(state) => state,
        StateEdit::Patch(patch) => {
            let mut state = run.state.clone();
            check.keys.open_all(&mut state).map_err(unsealed)?;
            json_patch::patch(&mut state, &patch)
                .map_err(|e| invalid(format!("the patch does not apply to its state: {e}")))?;
            state
        }
    };
    // A sealed envelope pasted into a whole state, or put there by the patch, is opened too:
    // the state is sealed again as a whole below, and a sealed value must not be sealed twice.
    check.keys.open_all(&mut state).map_err(unsealed)?;
    let graph = store
        .agent_graph(&run.agent, Some(&run.fingerprint))
        .await?
        .ok_or_else(|| invalid(format!("the graph of agent `{}` is not stored", run.agent)))?;
    // The agent's reading of the state may quote a value of it (serde's "invalid type:
    // string ..."): the message is redacted as every message that leaves the runner is.
    let to_state = state_name(&graph, &state, edit.state_name.as_deref(), check.read_state)
        .map_err(|e| invalid(check.redactor.text(&e)))?;
    SealPolicy {
        redactor: check.redactor,
        marked: &[],
        stable: true,
    }
    .seal(&mut state, check.keys, &format!("state `{to_state}`"))
    .map_err(|e| invalid(e.to_string()))?;
    let mut note = edit.note;
    if to_state != run.state_name {
        let allowed = allowed_from(&graph, &run.state_name);
        if !allowed.contains(&to_state.as_str()) {
            if !edit.override_graph {
                return Err(EditError::NotAnEdge {
                    run_id: run_id.to_owned(),
                    from: run.state_name.clone(),
                    to: to_state,
                    allowed: if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    },
                });
            }
            note.reason = format!(
                "{} [graph overridden: `{}` -> `{to_state}` is not a declared edge]",
                note.reason, run.state_name
            );
        }
    }
    let last = store
        .history_from(run_id, run.version, 1)
        .await?
        .pop()
        .ok_or_else(|| invalid(format!("its version {} is not stored", run.version)))?;
    let mut commit = RepairCommit {
        run_id: run_id.to_owned(),
        kind: TransitionKind::Edited,
        expected_status: run.status,
        expected_epoch: run.epoch,
        last_version: last.version,
        from_state: last.to_state.clone(),
        restored_version: last.version,
        to_state,
        state,
        note,
        hash: String::new(),
    };
    commit.hash = transition_hash(&last.hash, &commit.link());
    Ok(commit)
}

/// Edit run `run_id` ([`plan_edit`], then [`OperatorStore::repair_run`]): the run is
/// running again, at the edited state, at a new version.
///
/// # Errors
/// [`EditError`]; [`StoreError::Conflict`] inside it when the run moved between the plan
/// and the write (nothing was written: look again and retry).
pub async fn edit(
    store: &dyn OperatorStore,
    run_id: &str,
    edit: Edit,
    check: EditCheck<'_>,
) -> Result<RunRecord, EditError> {
    let commit = plan_edit(store, run_id, edit, check).await?;
    Ok(store.repair_run(&commit).await?)
}

/// Whether `run` can be edited now: stopped (waiting, failed, quarantined or
/// dead-lettered), not waiting for its children, held by no live lease. Pages that offer the
/// edit ask it too, so they offer it where [`plan_edit`] takes it.
///
/// # Errors
/// [`EditError::NotStopped`] (saying what to do instead), [`EditError::WaitsForChildren`]
/// or [`EditError::Leased`].
pub fn check_editable(run: &RunRecord) -> Result<(), EditError> {
    let hint = match run.status {
        RunStatus::Waiting
        | RunStatus::Failed
        | RunStatus::Quarantined
        | RunStatus::DeadLettered => "",
        RunStatus::Running | RunStatus::Compensating => {
            " (a worker is driving it: cancel it, or wait until it waits or stops)"
        }
        _ => " (it ended: fork it at a version to run again from there)",
    };
    if !hint.is_empty() {
        return Err(EditError::NotStopped {
            run_id: run.id.clone(),
            status: run.status,
            hint,
        });
    }
    if matches!(
        run.waiting_for,
        Some(WaitingFor::AllChildren | WaitingFor::FirstChild)
    ) && run.status == RunStatus::Waiting
    {
        return Err(EditError::WaitsForChildren(run.id.clone()));
    }
    if run.lease_owner.is_some() && run.lease_expires_at.is_some_and(|t| t > now_ms()) {
        return Err(EditError::Leased(run.id.clone()));
    }
    Ok(())
}

/// The new state's name: read by the agent's code where given, else from the JSON's
/// external tag, else as the edit names it; a state of `graph` in every case.
fn state_name(
    graph: &GraphDescription,
    state: &Value,
    named: Option<&str>,
    read_state: Option<ReadState<'_>>,
) -> Result<String, String> {
    let known = |name: &str| graph.state(name).is_some();
    let tagged = match state {
        Value::String(name) if known(name) => Some(name.clone()),
        Value::Object(map) if map.len() == 1 => map.keys().next().filter(|k| known(k)).cloned(),
        _ => None,
    };
    let read = match read_state {
        Some(read) => Some(read(state).map_err(|e| format!("the new state does not read: {e}"))?),
        None => None,
    };
    let name = match (read.or(tagged), named) {
        (Some(found), Some(named)) if found != named => {
            return Err(format!(
                "the new state is `{found}`, not `{named}` as the edit says"
            ));
        }
        (Some(found), _) => found,
        (None, Some(named)) => named.to_owned(),
        (None, None) => {
            return Err(
                "cannot tell which state the new state is: give its name (`--state-name`)"
                    .to_owned(),
            );
        }
    };
    if !known(&name) {
        let states: Vec<&str> = graph.states.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "`{name}` is not a state of its agent (states: {})",
            states.join(", ")
        ));
    }
    Ok(name)
}

/// The states the graph allows a run in `from` to move to by an edit without overriding the
/// graph: its declared edges and its `on_error` state.
#[must_use]
pub fn allowed_from<'g>(graph: &'g GraphDescription, from: &str) -> Vec<&'g str> {
    let Some(desc) = graph.state(from) else {
        return Vec::new();
    };
    let mut allowed: Vec<&str> = desc.to.iter().map(String::as_str).collect();
    if let Some(e) = desc.on_error.as_deref()
        && !allowed.contains(&e)
    {
        allowed.push(e);
    }
    allowed
}
