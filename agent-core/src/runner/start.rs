//! Starting, signalling and editing runs from JSON, with the agent's types erased: what every
//! trigger that is not the service's own code shares (the HTTP API, schedules, webhooks,
//! message triggers). A state is read as the agent's enum and checked to be an initial
//! state, then started through the agent's [`Runner`] as the service's own code would; a
//! signal goes through [`Runner::signal_once`], checked against the run's graph.

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Runner, RunnerError};
use crate::agent::{Agent, Handle};
use crate::store::edit::{Edit, EditError};
use crate::store::{Labels, RunRecord, SignalReceipt};

/// Why a run could not be started from JSON.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The JSON is not a state of the agent, or not one of its initial states: the
    /// message says which states it can start in.
    #[error("{0}")]
    NotAnInitialState(String),
    /// The runner refused or the store failed (a run of that id exists with other
    /// content: [`StoreError::AlreadyExists`](crate::store::StoreError::AlreadyExists)).
    #[error(transparent)]
    Runner(#[from] RunnerError),
}

/// Starts runs of one agent from a state in JSON: a [`Runner`] with its types erased.
pub trait JsonStarter: Send + Sync {
    /// The agent's name.
    fn agent(&self) -> &'static str;

    /// Check that `state` reads as one of the agent's initial states, starting nothing
    /// (a schedule checks its state when it is created).
    ///
    /// # Errors
    /// [`StartError::NotAnInitialState`], saying which states it can start in.
    fn check_initial_state(&self, state: &Value) -> Result<(), StartError>;

    /// Read `state` as the agent's enum, check it is initial, start run `id` in it with
    /// `labels`. Idempotent on `id`, as [`Runner::start`] is.
    fn start_json(
        &self,
        id: String,
        state: Value,
        labels: Labels,
    ) -> BoxFuture<'_, Result<RunRecord, StartError>>;

    /// Edit the state of run `run_id` of this agent ([`Runner::edit_run`]): the new state
    /// read as the agent's enum and sealed as the runner seals states. A starter that is not
    /// a [`Runner`] edits nothing unless it says how: the default refuses.
    fn edit_json(&self, run_id: String, edit: Edit) -> BoxFuture<'_, Result<RunRecord, EditError>> {
        drop(edit);
        Box::pin(async move {
            Err(EditError::Invalid {
                run_id,
                problem: format!("the starter of agent `{}` does not edit runs", self.agent()),
            })
        })
    }
}

impl<A, H> JsonStarter for Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    fn agent(&self) -> &'static str {
        A::NAME
    }

    fn check_initial_state(&self, state: &Value) -> Result<(), StartError> {
        initial_state::<A>(state.clone()).map(drop)
    }

    fn start_json(
        &self,
        id: String,
        state: Value,
        labels: Labels,
    ) -> BoxFuture<'_, Result<RunRecord, StartError>> {
        Box::pin(async move {
            let state = initial_state::<A>(state)?;
            self.start_with_labels(&id, state, labels)
                .await
                .map_err(|e| match e {
                    RunnerError::NotInitial(_) => StartError::NotAnInitialState(e.to_string()),
                    e => StartError::Runner(e),
                })
        })
    }

    fn edit_json(&self, run_id: String, edit: Edit) -> BoxFuture<'_, Result<RunRecord, EditError>> {
        Box::pin(async move { self.edit_run(&run_id, edit).await })
    }
}

/// Sends signals to runs with their types erased, as [`JsonStarter`] starts them: what a
/// signalling trigger (a webhook, a message) needs of a [`Runner`].
pub trait JsonSignaller: Send + Sync {
    /// The agent's name.
    fn agent(&self) -> &'static str;

    /// Send signal `name` with `payload` to run `run_id` once per dedup `key`
    /// ([`Runner::signal_once`]).
    fn signal_json(
        &self,
        run_id: String,
        name: String,
        payload: Value,
        key: String,
    ) -> BoxFuture<'_, Result<SignalReceipt, RunnerError>>;
}

impl<A, H> JsonSignaller for Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    fn agent(&self) -> &'static str {
        A::NAME
    }

    fn signal_json(
        &self,
        run_id: String,
        name: String,
        payload: Value,
        key: String,
    ) -> BoxFuture<'_, Result<SignalReceipt, RunnerError>> {
        Box::pin(async move { self.signal_once(&run_id, &name, payload, &key).await })
    }
}

/// `state` read as one of `A`'s initial states, or why not (naming the ones it can be).
///
/// # Errors
/// [`StartError::NotAnInitialState`] when it does not deserialize as `A`, or is not an
/// initial state.
pub fn initial_state<A: Agent>(state: Value) -> Result<A, StartError> {
    let initial = initial_states::<A>().join("`, `");
    let state: A = serde_json::from_value(state).map_err(|e| {
        StartError::NotAnInitialState(format!(
            "not a state of agent `{}`: {e}; start it in `{initial}`",
            A::NAME
        ))
    })?;
    let name = state.state_name();
    if !A::graph().state(name).is_some_and(|s| s.initial) {
        return Err(StartError::NotAnInitialState(format!(
            "`{name}` is not an initial state of agent `{}`; start it in `{initial}`",
            A::NAME
        )));
    }
    Ok(state)
}

/// The names of `A`'s initial states, in the enum's order.
#[must_use]
pub fn initial_states<A: Agent>() -> Vec<&'static str> {
    A::graph()
        .states
        .iter()
        .filter(|s| s.initial)
        .map(|s| s.name.as_str())
        .collect()
}
