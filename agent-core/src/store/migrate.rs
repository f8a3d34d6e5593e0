//! Moving a run to a newer version of its agent: the `migrated` transition
//! ([`RunStore::migrate_run`](super::RunStore::migrate_run)).
//!
//! A worker of version N of an agent that claims a run of an older version it can migrate
//! from ([`Agent::older_versions`](crate::Agent::older_versions)) maps the run's state
//! through the chain ([`Agent::migrate`](crate::Agent::migrate)) and writes the result as
//! the run's next version, before it runs anything: a transition of kind
//! [`Migrated`](super::TransitionKind::Migrated), fenced by the lease like a step commit,
//! that also moves the run row's [`agent_version`](super::RunRecord::agent_version) and
//! fingerprint. Its note ([`MigrationNote`]) says from which version and fingerprint to
//! which, and is covered by the transition's hash, so `verify` checks the chain across
//! it. The rules the runner follows are in `docs/versions.md`.

use serde_json::Value;

use super::{
    Millis, OperatorNote, RunFailure, RunRecord, RunStatus, StepCommit, TransitionKind,
    TransitionRecord, WaitingFor,
};
use crate::store::operator::OperatorTransition;

/// A migration to write ([`RunStore::migrate_run`](super::RunStore::migrate_run)): the run's next
/// version, in the new version's state, under the claimer's lease.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationCommit {
    /// The run's version when the migration was planned; the write is a compare-and-set
    /// on it, and writes the next one.
    pub expected_version: u64,
    /// The agent version the run is on; the write is a compare-and-set on it too, so two
    /// workers racing to migrate one run leave one migration in the history.
    pub from_agent_version: u32,
    /// The agent version the run moves to.
    pub to_agent_version: u32,
    /// The fingerprint of the new version's graph, recorded on the run row.
    pub fingerprint: String,
    /// The state left (the old version's state name).
    pub from_state: String,
    /// The state entered (the mapped state's name).
    pub to_state: String,
    /// The mapped state, serialized.
    pub state: Value,
    /// The run's status after it: running, or waiting when the mapped state waits.
    pub status: RunStatus,
    /// For waiting runs: the signal (or the children) waited for.
    pub waiting_for: Option<WaitingFor>,
    /// For waiting runs with a timeout: when to wake.
    pub wake_at: Option<Millis>,
    /// The run's failure, kept as it was (a run moved along an `on_error` edge keeps it).
    pub error: Option<RunFailure>,
    /// The base version of a step that began under the old version and did not commit, or
    /// of a parent's step waiting for its children: the first step after the migration
    /// reads its journal there ([`RunRecord::migration_resume_base`]).
    pub resume_base: Option<u64>,
    /// What the transition's note says (covered by its hash).
    pub note: MigrationNote,
}

impl MigrationCommit {
    /// The version the migration writes.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.expected_version + 1
    }

    /// The migration as a commit of kind [`Migrated`](TransitionKind::Migrated).
    #[must_use]
    pub fn step(&self) -> StepCommit {
        StepCommit {
            expected_version: self.expected_version,
            from_state: self.from_state.clone(),
            to_state: self.to_state.clone(),
            state: self.state.clone(),
            kind: TransitionKind::Migrated,
            status: self.status,
            waiting_for: self.waiting_for.clone(),
            wake_at: self.wake_at,
            error: self.error.clone(),
            consumed_signal: None,
            spend: None,
        }
    }

    /// The migration as a transition with a note written under epoch `epoch`, the lease
    /// kept (stores that write operators' transitions plan it the same way).
    #[must_use]
    pub fn transition(&self, epoch: u64) -> OperatorTransition {
        OperatorTransition {
            commit: self.step(),
            note: self.note.to_note(),
            epoch,
            keep_lease: true,
        }
    }

    /// Why `run` (as stored) refuses this migration, or `None` when it may be written
    /// under a lease of epoch `epoch`. The stores check it in the same write.
    #[must_use]
    pub fn refusal(&self, run: &RunRecord, epoch: u64) -> Option<super::StoreError> {
        use super::StoreError;
        if run.epoch != epoch {
            return Some(StoreError::LeaseLost {
                run_id: run.id.clone(),
                epoch,
            });
        }
        if run.version != self.expected_version || run.agent_version != self.from_agent_version {
            return Some(StoreError::Conflict {
                run_id: run.id.clone(),
                expected: self.expected_version,
                found: run.version,
            });
        }
        if run.cancel_requested.is_some() {
            return Some(StoreError::CancelRequested(run.id.clone()));
        }
        if !matches!(run.status, RunStatus::Running | RunStatus::Waiting) {
            // A compensating run finishes its saga at the version whose status is
            // `compensating` (moving it would hide the rest of the round's compensations);
            // a final run has nothing to migrate.
            return Some(StoreError::backend(format!(
                "run `{}` is {}: only a running or waiting run is migrated",
                run.id, run.status
            )));
        }
        None
    }
}

/// What a `migrated` transition's note says: the agent, the version and fingerprint the
/// run left and the ones it moved to, and the base of an interrupted step carried over.
/// Written as an [`OperatorNote`] by [`BY`](Self::BY), so that it is shown where every
/// note is, and covered by the transition's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationNote {
    /// The agent.
    pub agent: String,
    /// The version the run was on.
    pub from_version: u32,
    /// That version's graph fingerprint, as the run recorded it.
    pub from_fingerprint: String,
    /// The version the run moved to.
    pub to_version: u32,
    /// Its graph fingerprint.
    pub to_fingerprint: String,
    /// The base version of the interrupted step whose journal was carried over, if any.
    pub resume_base: Option<u64>,
}

impl MigrationNote {
    /// The note's author.
    pub const BY: &'static str = "migration";

    /// The note as stored: `Checkout v1 (fingerprint ab…) -> v2 (fingerprint cd…)`, and
    /// `; resumes the step begun at version N` when a step is carried over.
    #[must_use]
    pub fn to_note(&self) -> OperatorNote {
        let mut reason = format!(
            "{} v{} (fingerprint {}) -> v{} (fingerprint {})",
            self.agent,
            self.from_version,
            self.from_fingerprint,
            self.to_version,
            self.to_fingerprint
        );
        if let Some(base) = self.resume_base {
            reason = format!("{reason}; resumes the step begun at version {base}");
        }
        OperatorNote::new(Self::BY, reason)
    }

    /// Read a note written by [`to_note`](Self::to_note); `None` for any other note.
    #[must_use]
    pub fn parse(note: &OperatorNote) -> Option<Self> {
        if note.by != Self::BY {
            return None;
        }
        let (moves, resume) = match note
            .reason
            .split_once("; resumes the step begun at version ")
        {
            Some((moves, base)) => (moves, Some(base.parse().ok()?)),
            None => (note.reason.as_str(), None),
        };
        let (from, to) = moves.split_once(" -> ")?;
        let (agent, from) = from.split_once(' ')?;
        let version = |s: &str| -> Option<(u32, String)> {
            let (v, fp) = s.split_once(" (fingerprint ")?;
            let v = v.strip_prefix('v')?.parse().ok()?;
            Some((v, fp.strip_suffix(')')?.to_owned()))
        };
        let (from_version, from_fingerprint) = version(from)?;
        let (to_version, to_fingerprint) = version(to)?;
        Some(Self {
            agent: agent.to_owned(),
            from_version,
            from_fingerprint,
            to_version,
            to_fingerprint,
            resume_base: resume,
        })
    }
}

/// The agent version and fingerprint a run was on at `version` of its history: the run's
/// own, unless a `migrated` transition after `version` moved it, in which case the ones
/// the earliest such migration left. Fork and time travel use it, so that a run forked
/// from before its migration starts on the version its state belongs to (and is migrated
/// again when a newer worker claims it).
#[must_use]
pub fn agent_version_at(
    run: &RunRecord,
    history: &[TransitionRecord],
    version: u64,
) -> (u32, String) {
    history
        .iter()
        .filter(|t| t.kind == TransitionKind::Migrated && t.version > version)
        .min_by_key(|t| t.version)
        .and_then(|t| t.note.as_ref().and_then(MigrationNote::parse))
        .map_or_else(
            || (run.agent_version, run.fingerprint.clone()),
            |n| (n.from_version, n.from_fingerprint),
        )
}

/// The entry of [`RunStore::claim_next`](super::RunStore::claim_next)'s `agents` that claims the
/// runs of `agent` on version `version` only: `Agent@N`.
#[must_use]
pub fn versioned_agent(agent: &str, version: u32) -> String {
    format!("{agent}@{version}")
}

/// Whether a run of `agent` on version `version` is one
/// [`RunStore::claim_next`](super::RunStore::claim_next) may claim for these entries: all runs
/// when there is none,
/// else an entry naming the agent (any version) or `agent@version`.
#[must_use]
pub fn claimable_by(agents: &[String], agent: &str, version: u32) -> bool {
    agents.is_empty()
        || agents.iter().any(|e| match e.split_once('@') {
            None => e == agent,
            Some((a, v)) => a == agent && v.parse() == Ok(version),
        })
}

#[cfg(test)]
mod tests {
    use super::{MigrationNote, claimable_by};

    #[test]
    fn claim_entries_name_an_agent_or_one_of_its_versions() {
        let entries = [
            "Checkout@2".to_owned(),
            "Checkout@3".to_owned(),
            "Other".to_owned(),
        ];
        assert!(claimable_by(&entries, "Checkout", 2));
        assert!(!claimable_by(&entries, "Checkout", 1));
        assert!(claimable_by(&entries, "Other", 7));
        assert!(!claimable_by(&entries, "Third", 1));
        assert!(claimable_by(&[], "Third", 1));
    }

    #[test]
    fn notes_read_back() {
        for resume_base in [None, Some(4)] {
            let note = MigrationNote {
                agent: "Checkout".into(),
                from_version: 1,
                from_fingerprint: "ab12".into(),
                to_version: 3,
                to_fingerprint: "cd34".into(),
                resume_base,
            };
            let stored = note.to_note();
            assert_eq!(stored.by, "migration");
            assert!(
                stored
                    .reason
                    .starts_with("Checkout v1 (fingerprint ab12) -> v3")
            );
            assert_eq!(MigrationNote::parse(&stored), Some(note));
        }
        let other = crate::store::OperatorNote::new("alice", "Checkout v1 -> v2");
        assert_eq!(MigrationNote::parse(&other), None);
    }
}
