//! Statements whose text is the same on PostgreSQL and SQLite (positional `$n` parameters
//! work on both), and the SQL list of final statuses that dialect statements build on.

use std::sync::LazyLock;

use agent_core::store::RunStatus;

/// The statuses a run never leaves on its own, as an SQL list:
/// `('completed', 'compensated', …)`, in the order of [`RunStatus::ALL`]. Derived from
/// [`RunStatus::is_final`], so a new final status reaches every statement that uses it.
#[must_use]
pub fn final_statuses() -> String {
    let names: Vec<String> = RunStatus::ALL
        .into_iter()
        .filter(|s| s.is_final())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!("({})", names.join(", "))
}

/// A run's stored version and epoch.
pub const RUN_HEAD: &str = "SELECT version, epoch FROM runs WHERE id = $1";

/// Whether an operator's cancel waits for the holder of run `$1`'s lease.
pub const CANCEL_PENDING: &str =
    "SELECT 1 FROM runs WHERE id = $1 AND cancel_requested_by IS NOT NULL";

/// Every agent with a registered graph.
pub const AGENTS: &str = "SELECT DISTINCT agent FROM agents ORDER BY agent";

/// The payloads from the nearest snapshot at or before `$2` up to `$2`.
pub const STATE_AT: &str = "SELECT version, to_state, payload_kind, payload FROM transitions \
     WHERE run_id = $1 AND version <= $2 AND version >= ( \
       SELECT max(version) FROM transitions WHERE run_id = $1 AND version <= $2 \
       AND payload_kind = 'snapshot') \
     ORDER BY version";

/// Whether version `$2` of run `$1` is stored.
pub const VERSION_EXISTS: &str = "SELECT 1 FROM transitions WHERE run_id = $1 AND version = $2";

/// The stored versions of a run: an index-only aggregate, asked at every claim.
pub const VERSION_SPAN: &str = "SELECT min(version) AS first, max(version) AS last, \
     count(*) AS n FROM transitions WHERE run_id = $1";

/// Whether a tool is switched on (no row: it is).
pub const TOOL_ENABLED: &str = "SELECT enabled FROM tool_switches WHERE tool = $1";

/// Runs with versions older than the policy keeps: `(id, cutoff)`, the first kept version;
/// `$2`: only runs in a final status.
pub static PRUNE_CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT r.id, r.version + 1 - $1 AS cutoff FROM runs r \
         WHERE r.version + 1 > $1 AND (NOT $2 OR r.status IN {final_statuses}) \
         AND EXISTS (SELECT 1 FROM transitions t WHERE t.run_id = r.id \
         AND t.version < r.version + 1 - $1) ORDER BY r.id",
        final_statuses = final_statuses()
    )
});

/// The first kept version of a pruned run becomes a snapshot, so every kept version replays.
pub const PRUNE_SNAPSHOT: &str = "UPDATE transitions SET payload_kind = 'snapshot', payload = $3 \
     WHERE run_id = $1 AND version = $2";

/// The versions of a run before the cutoff `$2`.
pub const PRUNE_TRANSITIONS: &str = "DELETE FROM transitions WHERE run_id = $1 AND version < $2";

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is exactly the statuses `RunStatus::is_final` names, each once.
    #[test]
    fn final_statuses_are_those_of_run_status() {
        let list = final_statuses();
        let inner = list
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .expect("a parenthesized list");
        let listed: Vec<RunStatus> = inner
            .split(", ")
            .map(|name| {
                let name = name.trim_matches('\'');
                RunStatus::parse(name).unwrap_or_else(|| panic!("unknown status `{name}`"))
            })
            .collect();
        let finals: Vec<RunStatus> = RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(listed, finals);
        assert_eq!(
            list,
            "('completed', 'compensated', 'failed', 'quarantined', 'dead_lettered', \
             'cancelled', 'terminated')"
        );
    }

    #[test]
    fn prune_candidates_use_the_final_statuses() {
        assert!(PRUNE_CANDIDATES.contains(&final_statuses()));
    }
}
