//! The operator's records: who asked and why, tool switches, retention and what it pruned.

use serde::{Deserialize, Serialize};

use super::Millis;

/// Who asked for an operator's action on a run (cancel, terminate), and why; recorded
/// with the transition it wrote (and covered by its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperatorNote {
    /// The operator's identity (`agentctl` takes `--by`, or `$USER`).
    pub by: String,
    /// Why.
    pub reason: String,
}

impl OperatorNote {
    /// A note by `by` for `reason`.
    #[must_use]
    pub fn new(by: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            by: by.into(),
            reason: reason.into(),
        }
    }
}
/// A tool's switch in the tool registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSwitch {
    /// The tool's name.
    pub tool: String,
    /// Whether calls are allowed.
    pub enabled: bool,
    /// Why it was switched.
    pub reason: Option<String>,
    /// When.
    pub updated_at: Millis,
}

/// What to prune ([`OperatorStore::prune`](crate::store::OperatorStore::prune)).
///
/// A run's versions before its cutoff are removed, and the first kept version becomes a
/// snapshot, so that every kept version still replays and the kept chain still verifies
/// (anchored at its first row, see [`verify`](crate::store::verify)). The cutoff keeps at least the
/// last [`keep_last_versions`](Self::keep_last_versions) versions and, with
/// [`keep_versions_since`](Self::keep_versions_since), every version committed since then
/// (time travel within that window). Journal entries of removed versions go too, except
/// the saga's (completed hybrid calls, compensations, children) of runs not final.
///
/// With [`delete_final_before`](Self::delete_final_before), final runs not updated since
/// then are deleted whole (run, versions, journal, signals, labels), except a final child
/// whose parent is not final (the parent may still read its result) and a final run with
/// a child not final.
///
/// Idempotent, and bounded by [`max_runs`](Self::max_runs): several callers (a worker's
/// retention in each of several processes) may prune the same store at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep at least this many most recent versions of every run (the current one always).
    pub keep_last_versions: u64,
    /// Only prune runs in a final status (completed, compensated, failed...) when true.
    pub only_final_runs: bool,
    /// Keep every version committed at or after this time too (`None`: only
    /// `keep_last_versions` counts).
    pub keep_versions_since: Option<Millis>,
    /// Delete final runs last updated before this time (`None`: delete no run).
    pub delete_final_before: Option<Millis>,
    /// Prune at most this many runs' versions, and delete at most this many runs, in one
    /// call (`None`: all there are).
    pub max_runs: Option<usize>,
}

/// What [`OperatorStore::prune`](crate::store::OperatorStore::prune) removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Versions removed (those of deleted runs not counted).
    pub versions_removed: u64,
    /// Journal entries removed (those of deleted runs not counted).
    pub entries_removed: u64,
    /// Runs whose older versions were removed.
    #[serde(default)]
    pub runs_pruned: u64,
    /// Final runs deleted whole.
    #[serde(default)]
    pub runs_deleted: u64,
}
