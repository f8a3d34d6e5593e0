//! Editing a stopped run's state with the agent's code at hand: the new state is read as the
//! agent's enum before anything is written, and sealed as this runner seals states
//! ([`store::edit`](crate::store::edit) says what else is checked).

use serde_json::Value;

use super::Runner;
use crate::agent::{Agent, Handle};
use crate::store::edit::{Edit, EditCheck, EditError, StateEdit};
use crate::store::{OperatorNote, OperatorStore, RunRecord};

impl<A, H> Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// Replace the state of run `run_id` (waiting, failed, quarantined or dead-lettered, no
    /// worker holding it) with `state`, by and for `note`, and let it continue: one `edited`
    /// transition in its history ([`store::edit`](crate::store::edit)). A variant the graph
    /// does not allow from the current state is refused unless `override_graph`, which the
    /// transition's note then records.
    ///
    /// # Errors
    /// [`EditError`] saying why; nothing was written.
    pub async fn edit_state(
        &self,
        run_id: &str,
        state: A,
        override_graph: bool,
        note: OperatorNote,
    ) -> Result<RunRecord, EditError> {
        let name = state.state_name().to_owned();
        let state = serde_json::to_value(&state).map_err(|e| EditError::Invalid {
            run_id: run_id.to_owned(),
            problem: format!("the state does not serialize: {e}"),
        })?;
        self.edit_run(
            run_id,
            Edit {
                state: StateEdit::Whole(state),
                state_name: Some(name),
                override_graph,
                note,
            },
        )
        .await
    }

    /// As [`edit_state`](Self::edit_state), for an edit in JSON (a whole state or a patch),
    /// read as the agent's enum before it is written.
    ///
    /// # Errors
    /// [`EditError`] saying why; nothing was written.
    pub async fn edit_run(&self, run_id: &str, edit: Edit) -> Result<RunRecord, EditError> {
        let read = |state: &Value| -> Result<String, String> {
            A::deserialize(state)
                .map(|s| s.state_name().to_owned())
                .map_err(|e| format!("not a state of agent `{}`: {e}", A::NAME))
        };
        let check = EditCheck {
            read_state: Some(&read),
            redactor: &self.inner.redactor,
            keys: &self.inner.config.seal_keys,
        };
        let store: &dyn OperatorStore = &*self.inner.store;
        crate::store::edit::edit(store, run_id, edit, check).await
    }
}
