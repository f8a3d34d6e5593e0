//! A planned repair or edit, the record [`OperatorStore::repair_run`](crate::store::OperatorStore::repair_run)
//! writes: a layer below the store's contract, which names it, and the planning, which
//! makes it.

use serde_json::Value;

use crate::store::{ChainLink, OperatorNote, RunStatus, TransitionKind};

/// A planned repair ([`plan_repair`](super::plan_repair)) or edit
/// ([`plan_edit`](crate::store::edit::plan_edit)): what
/// [`OperatorStore::repair_run`](crate::store::OperatorStore::repair_run) writes. Either puts
/// a stopped run back to `running` at a state an operator chose, as the next version.
#[derive(Clone, Debug, PartialEq)]
pub struct RepairCommit {
    /// The run.
    pub run_id: String,
    /// [`TransitionKind::Repair`] (an earlier version's state restored) or
    /// [`TransitionKind::Edited`] (a state an operator wrote): the transition's kind.
    pub kind: TransitionKind,
    /// The run's status when the write was planned; the write is refused if it moved.
    pub expected_status: RunStatus,
    /// The run row's epoch when the repair was planned; the write is refused if it moved,
    /// and the repair writes the next one (fencing out any earlier lease holder).
    pub expected_epoch: u64,
    /// The last stored version when the repair was planned; the repair writes the next.
    pub last_version: u64,
    /// The state of the last stored version (the transition leaves it).
    pub from_state: String,
    /// A repair: the version whose state the run goes back to. An edit: the last stored
    /// version, whose state the edit replaced.
    pub restored_version: u64,
    /// That version's state name.
    pub to_state: String,
    /// That version's state.
    pub state: Value,
    /// Who repairs, and why: recorded with the transition and covered by its hash.
    pub note: OperatorNote,
    /// The new transition's hash, chained to the last stored version's.
    pub hash: String,
}

impl RepairCommit {
    /// The version the repair writes.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.last_version + 1
    }

    /// The epoch the repair writes.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.expected_epoch + 1
    }

    /// What the new transition's hash covers.
    #[must_use]
    pub fn link(&self) -> ChainLink<'_> {
        ChainLink {
            run_id: &self.run_id,
            version: self.version(),
            from_state: &self.from_state,
            to_state: &self.to_state,
            kind: self.kind,
            status: RunStatus::Running,
            epoch: self.epoch(),
            state: &self.state,
            note: Some(&self.note),
        }
    }
}
