//! Statements whose text is the same on PostgreSQL and SQLite (positional `$n` parameters
//! work on both), and the SQL list of final statuses that dialect statements build on.

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

/// The conflict clause of a journal entry's upsert, the same on both stores: a retried
/// entry replaces the one at its place, keeping when it started and, for a status written
/// again, its first finished position (a follower has it already). A macro, so that the
/// stores' statements stay `&'static str` built with `concat!`.
#[macro_export]
macro_rules! journal_upsert {
    () => {
        "ON CONFLICT (run_id, version, seq) DO UPDATE SET kind = EXCLUDED.kind, \
       state = EXCLUDED.state, name = EXCLUDED.name, tool_kind = EXCLUDED.tool_kind, \
       input_hash = EXCLUDED.input_hash, input = EXCLUDED.input, \
       idempotency_key = EXCLUDED.idempotency_key, status = EXCLUDED.status, \
       output = EXCLUDED.output, output_external = EXCLUDED.output_external, \
       output_summary = EXCLUDED.output_summary, output_bytes = EXCLUDED.output_bytes, \
       error_class = EXCLUDED.error_class, error_code = EXCLUDED.error_code, \
       error_message = EXCLUDED.error_message, attempts = EXCLUDED.attempts, \
       duration_ms = EXCLUDED.duration_ms, started_at = journal.started_at, \
       finished_at = EXCLUDED.finished_at, \
       finished_position = CASE WHEN EXCLUDED.status = 'started' THEN NULL \
         WHEN journal.status = EXCLUDED.status THEN \
           COALESCE(journal.finished_position, EXCLUDED.finished_position) \
         ELSE EXCLUDED.finished_position END"
    };
}

/// A run's stored version and epoch.
pub const RUN_HEAD: &str = "SELECT version, epoch FROM runs WHERE id = $1";

/// Whether an operator's cancel waits for the holder of run `$1`'s lease.
pub const CANCEL_PENDING: &str =
    "SELECT 1 FROM runs WHERE id = $1 AND cancel_requested_by IS NOT NULL";

/// The children of run `$1` that are not final, by id: each with the parent's state at the
/// version that spawned it (`NULL` when pruned), for an operator's cancel of the parent to
/// reach them in its own transaction (`OperatorStore::cancel_run`).
pub static CHILDREN_TO_CANCEL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT c.id, t.to_state FROM runs c LEFT JOIN transitions t \
         ON t.run_id = c.spawned_by AND t.version = c.spawned_at_version \
         WHERE c.spawned_by = $1 AND c.status NOT IN {} ORDER BY c.id",
        final_statuses()
    )
});

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

/// Runs with versions older than the policy keeps: `(id, cutoff)`, the first kept version,
/// at most `$4` of them. `$1`: versions kept at least; `$2`: only runs in a final status;
/// `$3`: keep every version committed since then too (`NULL`: no such window), as the
/// dialect's expression `since` of `$3` (the stores keep times in different types).
#[must_use]
pub fn prune_candidates(since: &str) -> String {
    format!(
        "SELECT id, cutoff FROM ( \
           SELECT id, CASE WHEN by_count < by_time THEN by_count ELSE by_time END AS cutoff \
           FROM ( \
             SELECT r.id, r.version + 1 - $1 AS by_count, \
               CASE WHEN $3 IS NULL THEN r.version ELSE COALESCE(( \
                 SELECT min(w.version) FROM transitions w WHERE w.run_id = r.id \
                 AND w.created_at >= {since}), r.version) END AS by_time \
             FROM runs r WHERE (NOT $2 OR r.status IN {final_statuses})) k) c \
         WHERE cutoff > 0 AND EXISTS (SELECT 1 FROM transitions t \
           WHERE t.run_id = c.id AND t.version < c.cutoff) \
         ORDER BY id LIMIT $4",
        final_statuses = final_statuses()
    )
}

/// Final runs last updated before `$1` (the dialect's expression `before` of it), oldest
/// first, at most `$2`: `id`. A final child whose parent is not final stays (the parent may
/// still read its result), and so does a final run with a child not final.
#[must_use]
pub fn expired_runs(before: &str) -> String {
    format!(
        "SELECT r.id FROM runs r WHERE r.status IN {finals} AND r.updated_at < {before} \
         AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.spawned_by = r.id \
           AND c.status NOT IN {finals}) \
         AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = r.spawned_by \
           AND p.status NOT IN {finals}) \
         ORDER BY r.updated_at, r.id LIMIT $2",
        finals = final_statuses()
    )
}

/// Delete the runs of a batch that are still final and last updated before `$2` (the
/// dialect's expression `before` of it), checked again inside the deleting transaction:
/// `RETURNING id`, the runs deleted, whose other rows go next ([`delete_runs_rows`]).
/// `in_batch` is the dialect's membership test in the batch of ids bound as `$1`
/// (`= ANY($1)` on PostgreSQL, `IN (SELECT value FROM json_each($1))` on SQLite).
fn delete_expired_runs(in_batch: &str, before: &str) -> String {
    format!(
        "DELETE FROM runs WHERE id {in_batch} AND status IN {finals} AND updated_at < {before} \
         RETURNING id",
        finals = final_statuses()
    )
}

/// The rows of the deleted runs bound as `$1` in the other tables, outputs before the
/// journal entries they belong to: one statement per table for the whole batch
/// (`in_batch` as for [`delete_expired_runs`]).
fn delete_runs_rows(in_batch: &str) -> [String; 6] {
    [
        "outputs",
        "journal",
        "transitions",
        "signals",
        "run_labels",
        "status_changes",
    ]
    .map(|table| format!("DELETE FROM {table} WHERE run_id {in_batch}"))
}

// Compaction of a batch of runs, set-based: `cut` is the dialect's table expression, aliased
// `c`, of the batch bound as parameters, with columns `id`, `cutoff` (the first version
// kept) and, for `prune_snapshots`, `state` (the state at the cutoff). Versions at and
// after a cutoff are never touched, so commits of a run stepped meanwhile (which append
// versions after its current one, itself at or after the cutoff) neither wait on nor
// conflict with these statements.

/// The first kept version of each run of the batch becomes a snapshot of its state, so
/// that every kept version replays without the versions before it.
fn prune_snapshots(cut: &str) -> String {
    format!(
        "UPDATE transitions SET payload_kind = 'snapshot', payload = c.state FROM {cut} \
         WHERE transitions.run_id = c.id AND transitions.version = c.cutoff"
    )
}

/// The versions of the batch's runs before their cutoffs: `RETURNING run_id`, one row per
/// version removed.
fn prune_versions(cut: &str) -> String {
    format!(
        "DELETE FROM transitions WHERE (run_id, version) IN (SELECT t.run_id, t.version \
         FROM {cut} JOIN transitions t ON t.run_id = c.id AND t.version < c.cutoff) \
         RETURNING run_id"
    )
}

/// The journal entries of the batch's runs before their cutoffs that retention removes:
/// all of a final run's, and of a run not final all but its saga log (completed hybrid
/// calls and compensations, which compensation still needs, and the children it started,
/// which a cancel finds through their entries). The run's status is read by the deleting
/// statement itself, so a run re-queued meanwhile keeps its saga log.
fn prunable_entries(cut: &str) -> String {
    format!(
        "SELECT j.run_id, j.version, j.seq FROM {cut} \
         JOIN journal j ON j.run_id = c.id AND j.version < c.cutoff \
         JOIN runs r ON r.id = c.id \
         WHERE r.status IN {finals} OR NOT (j.kind IN ('compensation', 'child') \
           OR (j.kind = 'tool' AND j.tool_kind = 'hybrid' AND j.status = 'succeeded'))",
        finals = final_statuses()
    )
}

/// The large outputs of the entries [`prune_journal`] removes (run it first).
fn prune_outputs(cut: &str) -> String {
    format!(
        "DELETE FROM outputs WHERE (run_id, version, seq) IN ({})",
        prunable_entries(cut)
    )
}

/// The journal entries retention removes from the batch's runs (see [`prune_outputs`]).
fn prune_journal(cut: &str) -> String {
    format!(
        "DELETE FROM journal WHERE (run_id, version, seq) IN ({})",
        prunable_entries(cut)
    )
}

/// Retention's statements in a dialect (`OperatorStore::prune`, [`crate::retention`]): the same
/// text on both stores around the dialect's expressions of a batch.
#[derive(Clone, Debug)]
pub struct RetentionSql {
    /// The batch's runs still final and last updated before `$2` deleted, `RETURNING id`.
    pub delete_expired_runs: String,
    /// The other rows of the deleted runs bound as `$1`, one statement per table.
    pub delete_runs_rows: [String; 6],
    /// The first kept version of each run of a batch made a snapshot of its state.
    pub snapshots: String,
    /// The versions before the cutoffs, `RETURNING run_id`.
    pub versions: String,
    /// The large outputs of the journal entries `journal` removes (run it first).
    pub outputs: String,
    /// The journal entries before the cutoffs, but a live run's saga log.
    pub journal: String,
}

impl RetentionSql {
    /// The statements of a dialect: `in_batch` tests membership in the ids bound as `$1`
    /// (`= ANY($1)`, `IN (SELECT value FROM json_each($1))`), `before` is the time bound as
    /// `$2`, and `cut` and `cut_with_states` are the compaction batch bound as parameters,
    /// as a table aliased `c` with columns `id` and `cutoff` (and `state`).
    #[must_use]
    pub fn new(in_batch: &str, before: &str, cut: &str, cut_with_states: &str) -> Self {
        Self {
            delete_expired_runs: delete_expired_runs(in_batch, before),
            delete_runs_rows: delete_runs_rows(in_batch),
            snapshots: prune_snapshots(cut_with_states),
            versions: prune_versions(cut),
            outputs: prune_outputs(cut),
            journal: prune_journal(cut),
        }
    }
}

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
        assert!(prune_candidates("$3").contains(&final_statuses()));
        assert!(expired_runs("$1").contains(&final_statuses()));
    }
}
