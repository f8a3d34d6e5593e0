//! Every statement the store issues. Times are milliseconds since the Unix epoch; JSON is
//! stored as text. Statements whose text is the same on PostgreSQL are in
//! [`agent_sql::sql`]; those naming the final statuses are built once, on first use, from
//! [`final_statuses`].

use std::sync::LazyLock;

use agent_core::store::{RunStatus, WAIT_ALL_CHILDREN, WAIT_FIRST_CHILD};
use agent_sql::events::{Dialect, event_statement};
use agent_sql::sql::{RetentionSql, final_statuses};

/// The position of a record written now ([events](agent_core::store::events)): one more
/// than the highest of any record, and than the floor prune leaves in `event_clock` before
/// it deletes records. Read from indexes; writes are serialized, so no two records draw
/// the same one, and drawing one writes nothing.
macro_rules! next_position {
    () => {
        "(SELECT max(n) + 1 FROM (SELECT n FROM event_clock \
         UNION ALL SELECT max(position) FROM transitions \
         UNION ALL SELECT max(started_position) FROM journal \
         UNION ALL SELECT max(finished_position) FROM journal \
         UNION ALL SELECT max(position) FROM signals \
         UNION ALL SELECT max(position) FROM status_changes))"
    };
}

macro_rules! run_cols {
    () => {
        "id, agent, fingerprint, state_name, state, version, status, waiting_for, wake_at, \
         error_code, error_message, epoch, lease_owner, lease_expires_at, \
         claims_without_progress, parent_id, parent_version, created_at, updated_at, \
         creation_hash, last_hash, patch_bytes, snapshot_version, labels, \
         cancel_requested_by, cancel_reason, spawned_by, spawned_at_version, \
         agent_version, migrated_at_version, resume_base, spend, budget, \
         (SELECT json_group_array(json_array(t.payload_kind, json(t.payload))) FROM ( \
            SELECT payload_kind, payload FROM transitions t WHERE t.run_id = runs.id \
            AND t.version > runs.snapshot_version AND t.version <= runs.version \
            ORDER BY t.version) t) AS tail"
    };
}

pub(crate) const REGISTER_AGENT: &str = "INSERT INTO agents (agent, fingerprint, graph, registered_at, seq) \
     VALUES ($1, $2, $3, $4, (SELECT COALESCE(max(seq), 0) + 1 FROM agents)) \
     ON CONFLICT (agent, fingerprint) DO UPDATE SET registered_at = excluded.registered_at, \
     seq = excluded.seq";

pub(crate) const AGENT_GRAPH: &str = "SELECT graph FROM agents WHERE agent = $1 \
     AND ($2 IS NULL OR fingerprint = $2) ORDER BY seq DESC LIMIT 1";

pub(crate) const INSERT_RUN: &str = "INSERT INTO runs (id, agent, fingerprint, state_name, state, \
     creation_hash, last_hash, parent_id, parent_version, created_at, updated_at, seq, labels, \
     spawned_by, spawned_at_version, agent_version, budget) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, \
     (SELECT COALESCE(max(seq), 0) + 1 FROM runs), $11, $12, $13, $14, $15) ON CONFLICT (id) DO NOTHING";

/// The labels of a run just inserted, one row each from its JSON object `$2`.
pub(crate) const INSERT_LABELS: &str =
    "INSERT INTO run_labels (run_id, key, value) SELECT $1, key, value FROM json_each($2)";

/// `$12` to `$15`: what the version waits for and until when, and its failure. Its event
/// position is drawn from the clock, as every record's (see the migration `run_events`).
pub(crate) const INSERT_TRANSITION: &str = concat!(
    "INSERT INTO transitions (run_id, version, from_state, \
     to_state, kind, status, epoch, created_at, hash, payload_kind, payload, position, \
     waiting_for, wake_at, error_code, error_message) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, ",
    next_position!(),
    ", \
     $12, $13, $14, $15)"
);

/// A status set without a version, for its event: `$1` the run.
pub(crate) const INSERT_STATUS_CHANGE: &str = concat!(
    "INSERT INTO status_changes (position, run_id, \
     version, status, error_code, error_message, created_at) \
     SELECT ",
    next_position!(),
    ", id, version, status, error_code, error_message, \
     updated_at FROM runs WHERE id = $1"
);

pub(crate) const LOAD_RUN: &str = concat!("SELECT ", run_cols!(), " FROM runs WHERE id = $1");

/// Claim run `$1` for worker `$2` for `$3` ms from now, `$4` (the parameters of
/// PostgreSQL's, which reads its own clock, then the clock).
pub(crate) static CLAIM_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "UPDATE runs SET epoch = epoch + 1, lease_owner = $2, lease_expires_at = $4 + $3, \
             claims_without_progress = claims_without_progress + CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END, \
             updated_at = $4 \
             WHERE id = $1 AND status NOT IN {final_statuses} \
             AND (lease_owner IS NULL OR lease_expires_at <= $4 OR lease_owner = $2) RETURNING ",
            run_cols!()
        ),
        final_statuses = final_statuses()
    )
});

/// Runnable runs, oldest first among those [`claim_candidates`] finds; `$1` is a JSON
/// array of agent names (all when empty), `$2` now, `$3` the limit. The rule
/// ([`claimable`]) is checked on every row picked, read by its primary key: the
/// `CROSS JOIN` keeps the candidates as the outer loop (with `r.id IN (...)` instead,
/// SQLite without statistics reads every waiting run through `runs_status` and tests
/// each against the list).
pub(crate) static CLAIMABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT r.id FROM ({candidates}) c CROSS JOIN runs r ON r.id = c.id \
         WHERE {claimable} ORDER BY r.created_at, r.seq LIMIT $3",
        candidates = claim_candidates(),
        claimable = claimable(),
    )
});

/// The agents asked for (`$1`, all when empty): an entry `Agent` takes any of its runs, an
/// entry `Agent@N` only those on version `N`. Checked on rows an index of the arm found,
/// so it needs no index of its own.
const OF_AGENTS: &str = "(json_array_length($1) = 0 OR r.agent IN (SELECT value FROM json_each($1)) \
     OR (r.agent || '@' || r.agent_version) IN (SELECT value FROM json_each($1)))";
/// No live lease.
const LEASE_FREE: &str = "(r.lease_owner IS NULL OR r.lease_expires_at <= $2)";
/// A runnable run's timer, if any, is due.
const TIMER_DUE: &str = "(r.wake_at IS NULL OR r.wake_at <= $2)";
/// A signal the waiting run `r` waits for is pending.
const SIGNAL_AWAITED: &str = "EXISTS (SELECT 1 FROM signals s WHERE s.run_id = r.id \
     AND s.consumed_at_version IS NULL AND (r.waiting_for IS NULL OR s.name = r.waiting_for))";

/// The waiting parent `r`'s wait for its children holds: none of the runs its step at
/// `version - 1` spawned is in a status that is not final, or (the first) one of them
/// completed. Its subqueries run only for waiting rows with one of the two `children:`
/// values, on the index `runs_spawned_by`.
fn children_ready() -> String {
    format!(
        "(r.waiting_for IN ('{all}', '{first}') AND r.version > 0 AND (NOT EXISTS ( \
           SELECT 1 FROM runs c WHERE c.spawned_by = r.id \
           AND c.spawned_at_version = r.version - 1 AND c.status NOT IN {final_statuses}) \
           OR (r.waiting_for = '{first}' AND EXISTS ( \
           SELECT 1 FROM runs c WHERE c.spawned_by = r.id \
           AND c.spawned_at_version = r.version - 1 AND c.status = '{completed}'))))",
        all = WAIT_ALL_CHILDREN,
        first = WAIT_FIRST_CHILD,
        completed = RunStatus::Completed.as_str(),
        final_statuses = final_statuses()
    )
}

/// Whether run `r` may be claimed now by a worker of the agents `$1`: running or
/// compensating with its timer due; waiting with its timer due, a signal it waits for
/// pending, or its children's wait holding; or, whatever it waits for, with a cancel
/// requested (its claimer writes the cancel). Never under a live lease.
fn claimable() -> String {
    format!(
        "r.status IN ('running', 'compensating', 'waiting') AND {OF_AGENTS} AND {LEASE_FREE} \
         AND (r.cancel_requested_by IS NOT NULL \
           OR (r.status IN ('running', 'compensating') AND {TIMER_DUE}) \
           OR (r.status = 'waiting' AND (r.wake_at <= $2 OR {SIGNAL_AWAITED} \
             OR {children})))",
        children = children_ready()
    )
}

/// The runs [`CLAIMABLE`] picks from, as on PostgreSQL: each arm yields only runs
/// [`claimable`] accepts, at most `$3`, through an index of its own (migration
/// `claim_indexes`), so that no arm reads runs that cannot be claimed (which, read first,
/// would also use up its `$3`): runnable runs without a lease, oldest first
/// (`runs_unleased`; unlike PostgreSQL's, it keeps runs with a timer, which this arm
/// filters: a same-status commit assigns `wake_at`, and SQLite updates every index whose
/// definition names a column assigned, so an index naming `wake_at` would be rewritten by
/// every step); runnable runs whose lease expired, soonest first
/// (`runs_lease_expiry`); waiting runs whose signal is pending, from the pending signals,
/// oldest first (`signals_pending_id`); runs whose timer is due (`runs_waiting_wake`); parents whose children are done (`runs_waiting_children`); runs
/// with a cancel requested (`runs_cancel_requested`). A filter added to `claimable`
/// belongs in every arm too. `UNION` drops a run found twice (a cancel requested and a
/// signal pending, or two pending signals).
///
/// Each arm names its index (`INDEXED BY`): the store never runs `ANALYZE`, and without
/// statistics SQLite prefers `runs_status`, which reads every waiting run and sorts them.
/// An arm's `WHERE` repeats its index's, term for term, as SQLite requires to use a
/// partial index; should they part, preparing the statement fails ("no query solution")
/// rather than the claim quietly reading every run.
fn claim_candidates() -> String {
    format!(
        "SELECT id FROM (SELECT r.id FROM runs r INDEXED BY runs_unleased \
           WHERE r.status IN ('running', 'compensating') AND r.lease_owner IS NULL \
           AND {OF_AGENTS} AND {TIMER_DUE} ORDER BY r.created_at, r.seq LIMIT $3) \
         UNION SELECT id FROM (SELECT r.id FROM runs r INDEXED BY runs_lease_expiry \
           WHERE r.lease_owner IS NOT NULL \
           AND r.status IN ('running', 'compensating', 'waiting') \
           AND r.status IN ('running', 'compensating') AND r.lease_expires_at <= $2 \
           AND {OF_AGENTS} AND {TIMER_DUE} ORDER BY r.lease_expires_at LIMIT $3) \
         UNION SELECT id FROM (SELECT r.id FROM signals s INDEXED BY signals_pending_id \
           JOIN runs r ON r.id = s.run_id WHERE s.consumed_at_version IS NULL \
           AND r.status = 'waiting' AND (r.waiting_for IS NULL OR s.name = r.waiting_for) \
           AND {LEASE_FREE} AND {OF_AGENTS} ORDER BY s.id LIMIT $3) \
         UNION SELECT id FROM (SELECT r.id FROM runs r INDEXED BY runs_waiting_wake \
           WHERE r.wake_at <= $2 AND r.status IN ('running', 'compensating', 'waiting') \
           AND {LEASE_FREE} AND {OF_AGENTS} \
           ORDER BY r.wake_at LIMIT $3) \
         UNION SELECT id FROM (SELECT r.id FROM runs r INDEXED BY runs_waiting_children \
           WHERE r.status = 'waiting' AND r.waiting_for IN ('{all}', '{first}') \
           AND {LEASE_FREE} AND {OF_AGENTS} AND {children} \
           ORDER BY r.created_at, r.seq LIMIT $3) \
         UNION SELECT id FROM (SELECT r.id FROM runs r INDEXED BY runs_cancel_requested \
           WHERE r.cancel_requested_by IS NOT NULL \
           AND r.status IN ('running', 'compensating', 'waiting') AND {LEASE_FREE} \
           AND {OF_AGENTS} ORDER BY r.created_at, r.seq LIMIT $3)",
        all = WAIT_ALL_CHILDREN,
        first = WAIT_FIRST_CHILD,
        children = children_ready()
    )
}

/// `RunStore::next_due`: the earliest time after `$1` at which a live lease of a run that is
/// not final runs out or a timer is due; `NULL` when there is none. Each on its index
/// (`runs_lease_expiry`, `runs_waiting_wake`), named for the reason given at
/// [`claim_candidates`].
pub(crate) const NEXT_DUE: &str = "SELECT min(at) FROM ( \
     SELECT min(lease_expires_at) AS at FROM runs INDEXED BY runs_lease_expiry \
       WHERE lease_owner IS NOT NULL AND status IN ('running', 'compensating', 'waiting') \
       AND lease_expires_at > $1 \
     UNION ALL SELECT min(wake_at) FROM runs INDEXED BY runs_waiting_wake WHERE wake_at > $1 \
       AND status IN ('running', 'compensating', 'waiting'))";

/// Take a run whose stored data does not read out of circulation.
pub(crate) const QUARANTINE_CORRUPT: &str = "UPDATE runs SET status = 'quarantined', \
     error_code = 'row.unreadable', error_message = $2, lease_owner = NULL, \
     lease_expires_at = NULL, updated_at = $3 WHERE id = $1 RETURNING id";

pub(crate) const RENEW_LEASE: &str = "UPDATE runs SET lease_expires_at = $4 \
     WHERE id = $1 AND epoch = $2 AND lease_owner = $3 RETURNING lease_expires_at";

/// Release, leaving what the claim was charged (`RunStore::hand_back`).
pub(crate) const HAND_BACK: &str = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL \
     WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL";

/// `RunStore::defer_run`: released as `HAND_BACK` does, due again at `$3`; a running run
/// only (a step woken from a wait keeps its worker; see the trait).
pub(crate) const DEFER_RUN: &str = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, \
     wake_at = $3, waiting_for = $4 \
     WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL AND status = 'running' RETURNING id";

/// `RunStore::expire_leases_of`: the leases of a worker's previous process end now (`$2`).
pub(crate) const EXPIRE_LEASES_OF: &str = "UPDATE runs SET lease_expires_at = $2 \
     WHERE status IN ('running', 'compensating', 'waiting') AND lease_owner = $1 \
     AND lease_expires_at > $2 RETURNING id";

pub(crate) const RELEASE_LEASE: &str = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, \
     claims_without_progress = 0 WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL \
     RETURNING id";

/// A journal entry's upsert, its rows coming from `$source` (the values `$1`–`$22` and
/// its event positions).
macro_rules! upsert_entry {
    ($source:expr) => {
        concat!(
            "INSERT INTO journal (run_id, version, seq, kind, state, name, \
             tool_kind, input_hash, input, idempotency_key, status, output, output_external, \
             output_summary, output_bytes, error_class, error_code, error_message, attempts, \
             duration_ms, started_at, finished_at, started_position, finished_position) ",
            $source,
            " ",
            agent_sql::journal_upsert!()
        )
    };
}

macro_rules! entry_values {
    () => {
        concat!(
            "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
             $19, $20, $21, $22, ",
            next_position!(),
            ", CASE WHEN $11 <> 'started' THEN ",
            next_position!(),
            " END"
        )
    };
}

/// A journal entry written with its step's commit, whose compare-and-set fences it.
pub(crate) const UPSERT_ENTRY: &str = upsert_entry!(concat!("VALUES (", entry_values!(), ")"));

/// A journal entry written on its own: only while `$23` is its run's epoch, so that the
/// fence costs no statement of its own. No row changed: the run is gone or its lease
/// moved on.
pub(crate) const UPSERT_ENTRY_FENCED: &str = upsert_entry!(concat!(
    "SELECT ",
    entry_values!(),
    // The `WHERE` also keeps SQLite from reading `ON CONFLICT` as a join's constraint.
    " FROM runs WHERE id = $1 AND epoch = $23"
));

pub(crate) const UPSERT_OUTPUT: &str = "INSERT INTO outputs (run_id, version, seq, output) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, version, seq) DO UPDATE SET output = excluded.output";

pub(crate) const JOURNAL: &str = "SELECT j.run_id, j.version, j.seq, j.kind, j.state, j.name, \
     j.tool_kind, j.input_hash, j.input, j.idempotency_key, j.status, \
     COALESCE(o.output, j.output) AS output, j.error_class, j.error_code, j.error_message, \
     j.attempts, j.duration_ms, j.started_at, j.finished_at \
     FROM journal j LEFT JOIN outputs o ON j.output_external = 1 AND o.run_id = j.run_id \
     AND o.version = j.version AND o.seq = j.seq \
     WHERE j.run_id = $1 AND ($2 IS NULL OR j.version = $2) ORDER BY j.version, j.seq";

/// `HistoryStore::journal_from`: a page of `JOURNAL`, from `($2, $3)` (version, seq), at most
/// `$4` rows; `version >= $2` bounds the index range, the rest cuts its first version.
pub(crate) const JOURNAL_FROM: &str = "SELECT j.run_id, j.version, j.seq, j.kind, j.state, \
     j.name, j.tool_kind, j.input_hash, j.input, j.idempotency_key, j.status, \
     COALESCE(o.output, j.output) AS output, j.error_class, j.error_code, j.error_message, \
     j.attempts, j.duration_ms, j.started_at, j.finished_at \
     FROM journal j LEFT JOIN outputs o ON j.output_external = 1 AND o.run_id = j.run_id \
     AND o.version = j.version AND o.seq = j.seq \
     WHERE j.run_id = $1 AND j.version >= $2 AND (j.version > $2 OR j.seq >= $3) \
     ORDER BY j.version, j.seq LIMIT $4";

pub(crate) const SIGNAL_PENDING: &str =
    "SELECT 1 FROM signals WHERE id = $1 AND run_id = $2 AND consumed_at_version IS NULL";

/// A commit to a final status also ends the lease (`RunStore::commit_step`); `$15` is the
/// run's spend through the step, `NULL` to keep it. The
/// compare-and-set on epoch (`$13`) and version (`$14`) is in the `WHERE`, with no
/// operator's cancel waiting: a commit based on a head the run has moved past, or racing a
/// cancel, updates nothing and returns no row.
pub(crate) static COMMIT_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE runs SET version = $2, state_name = $3, \
     state = COALESCE($4, state), \
     snapshot_version = CASE WHEN $4 IS NULL THEN snapshot_version ELSE $2 END, \
     status = $5, waiting_for = $6, wake_at = $7, error_code = $8, error_message = $9, \
     claims_without_progress = 0, last_hash = $10, patch_bytes = $11, updated_at = $12, \
     spend = COALESCE($15, spend), \
     lease_owner = CASE WHEN $5 IN {final_statuses} THEN NULL ELSE lease_owner END, \
     lease_expires_at = CASE WHEN $5 IN {final_statuses} THEN NULL ELSE lease_expires_at END \
     WHERE id = $1 AND epoch = $13 AND version = $14 AND cancel_requested_by IS NULL \
     RETURNING lease_owner, lease_expires_at",
        final_statuses = final_statuses()
    )
});

/// [`COMMIT_RUN`] for a commit that keeps the run's status (not a final one), the common
/// step: it leaves `status` and the lease columns out of the `SET`, because SQLite updates
/// an index whenever a column it covers is assigned, even to the same value (`runs_status`,
/// `runs_unleased`, `runs_lease_expiry`, `runs_lease_owner`). `status = $5` joins the compare-and-set: when the
/// stored status is not the one the commit keeps, nothing is written and [`COMMIT_RUN`]
/// decides.
pub(crate) const COMMIT_RUN_SAME_STATUS: &str = "UPDATE runs SET version = $2, state_name = $3, \
     state = COALESCE($4, state), \
     snapshot_version = CASE WHEN $4 IS NULL THEN snapshot_version ELSE $2 END, \
     waiting_for = $6, wake_at = $7, error_code = $8, error_message = $9, \
     claims_without_progress = 0, last_hash = $10, patch_bytes = $11, updated_at = $12, \
     spend = COALESCE($15, spend) \
     WHERE id = $1 AND epoch = $13 AND version = $14 AND status = $5 \
     AND cancel_requested_by IS NULL RETURNING lease_owner, lease_expires_at";

/// A commit's version row, after [`COMMIT_RUN`] or [`COMMIT_RUN_SAME_STATUS`] in the same
/// statement list, with their parameters and `$16` from-state, `$17` kind, `$18` payload
/// kind, `$19` payload: inserted only if that update changed the run (`changes()` counts
/// the last statement's rows), so that a commit is one round trip to SQLite's thread
/// instead of two.
const INSERT_TRANSITION_AFTER_UPDATE: &str = concat!(
    "INSERT INTO transitions (run_id, version, from_state, \
     to_state, kind, status, epoch, created_at, hash, payload_kind, payload, position, \
     waiting_for, wake_at, error_code, error_message) \
     SELECT $1, $2, $16, $3, $17, $5, $13, $12, $10, $18, $19, ",
    next_position!(),
    ", $6, $7, $8, $9 WHERE changes() = 1"
);

/// [`COMMIT_RUN`], then its version row if it applied.
pub(crate) static COMMIT_RUN_AND_VERSION: LazyLock<String> =
    LazyLock::new(|| format!("{}; {INSERT_TRANSITION_AFTER_UPDATE}", *COMMIT_RUN));

/// [`COMMIT_RUN_SAME_STATUS`], then its version row if it applied.
pub(crate) static COMMIT_RUN_SAME_STATUS_AND_VERSION: LazyLock<String> =
    LazyLock::new(|| format!("{COMMIT_RUN_SAME_STATUS}; {INSERT_TRANSITION_AFTER_UPDATE}"));

pub(crate) const CONSUME_SIGNAL: &str = "UPDATE signals SET consumed_at_version = $2 WHERE id = $1";

pub(crate) const HISTORY: &str = "SELECT run_id, version, from_state, to_state, kind, status, epoch, \
     created_at, hash, note_by, note_reason FROM transitions WHERE run_id = $1 ORDER BY version";

/// `HistoryStore::history_from`: a page of `HISTORY`, from version `$2`, at most `$3` rows.
pub(crate) const HISTORY_FROM: &str = "SELECT run_id, version, from_state, to_state, kind, \
     status, epoch, created_at, hash, note_by, note_reason FROM transitions \
     WHERE run_id = $1 AND version >= $2 ORDER BY version LIMIT $3";

/// The filter of `HistoryStore::list_runs`, `count_runs`, `count_versions` and
/// `count_label_values` (binds `$1`, `$2`,
/// `$4`-`$10`;
/// `$3` is the listing's limit).
macro_rules! runs_filter {
    () => {
        runs_filter!(" AND ($6 IS NULL OR spawned_by = $6)")
    };
    // The children of one run: `spawned_by = $6` alone, which the planner answers from
    // `runs_spawned_by` (it cannot when the filter may also be `NULL`, and then scans every
    // run: seconds for a run with a thousand children at 100,000 runs).
    (of_parent) => {
        runs_filter!(" AND spawned_by = $6")
    };
    ($parent:literal) => {
        concat!(
            " FROM runs WHERE ($1 IS NULL OR agent = $1) \
     AND (json_array_length($2) = 0 OR status IN (SELECT value FROM json_each($2))) \
     AND ($4 = 0 OR id IN (SELECT l.run_id FROM json_each($5) w \
       JOIN run_labels l ON l.key = w.key AND l.value = w.value \
       GROUP BY l.run_id HAVING count(*) = $4))",
            $parent,
            " AND ($7 IS NULL OR created_at >= $7) AND ($8 IS NULL OR created_at < $8) \
     AND ($9 IS NULL OR agent_version = $9) AND ($10 IS NULL OR fingerprint = $10)"
        )
    };
}

macro_rules! list_runs {
    ($filter:expr) => {
        concat!(
            "SELECT ",
            run_cols!(),
            $filter,
            " ORDER BY created_at DESC, id DESC LIMIT $3"
        )
    };
}

macro_rules! list_runs_after {
    ($filter:expr) => {
        concat!(
            "SELECT ",
            run_cols!(),
            $filter,
            " AND (created_at, id) < ($11, $12) ORDER BY created_at DESC, id DESC LIMIT $3"
        )
    };
}

macro_rules! count_runs {
    ($filter:expr) => {
        concat!(
            "SELECT status, count(*) AS n",
            $filter,
            " AND $3 IS NULL GROUP BY status"
        )
    };
}

macro_rules! count_versions {
    ($filter:expr) => {
        concat!(
            "SELECT agent_version, fingerprint, count(*) AS n",
            $filter,
            " AND $3 IS NULL GROUP BY agent_version, fingerprint \
             ORDER BY agent_version, fingerprint"
        )
    };
}

macro_rules! spend_by_day {
    ($filter:expr) => {
        concat!(
            "SELECT agent, created_at / 86400000 * 86400000 AS day, count(*) AS n, \
             COALESCE(sum(json_extract(spend, '$.input_tokens')), 0) AS input_tokens, \
             COALESCE(sum(json_extract(spend, '$.output_tokens')), 0) AS output_tokens, \
             COALESCE(sum(json_extract(spend, '$.cost_micros')), 0) AS cost_micros, \
             COALESCE(sum(json_extract(spend, '$.asks')), 0) AS asks, \
             COALESCE(sum(json_extract(spend, '$.tool_calls')), 0) AS tool_calls",
            $filter,
            " AND $3 IS NULL GROUP BY 1, 2 ORDER BY 1, 2"
        )
    };
}

macro_rules! count_label_values {
    ($filter:expr) => {
        concat!(
            "SELECT l.value, count(*) AS n, max(r.created_at) AS last_created_at FROM run_labels l \
             JOIN (SELECT id, created_at",
            $filter,
            " AND $3 IS NULL) r ON r.id = l.run_id WHERE l.key = $11 \
             GROUP BY l.value ORDER BY l.value"
        )
    };
}

/// The statement of `sql`, a listing, for the children of one parent (`RunFilter::spawned_by`).
pub(crate) fn of_parent(sql: &'static str) -> &'static str {
    [
        (LIST_RUNS, LIST_RUNS_OF_PARENT),
        (LIST_RUNS_AFTER, LIST_RUNS_AFTER_OF_PARENT),
        (COUNT_RUNS, COUNT_RUNS_OF_PARENT),
        (COUNT_VERSIONS, COUNT_VERSIONS_OF_PARENT),
        (SPEND_BY_DAY, SPEND_BY_DAY_OF_PARENT),
        (COUNT_LABEL_VALUES, COUNT_LABEL_VALUES_OF_PARENT),
    ]
    .into_iter()
    .find_map(|(any, of_parent)| (sql == any).then_some(of_parent))
    .unwrap_or(sql)
}

/// `HistoryStore::list_runs` without `RunFilter::after`, in the listing's total order: newest
/// first, then by id (compared as bytes, SQLite's `BINARY`), as every store lists runs.
pub(crate) const LIST_RUNS: &str = list_runs!(runs_filter!());

/// [`LIST_RUNS`] of one parent's children.
pub(crate) const LIST_RUNS_OF_PARENT: &str = list_runs!(runs_filter!(of_parent));

/// `HistoryStore::list_runs` after a key (`$11` its milliseconds, `$12` its id): a seek in
/// `runs_listed`, so that a page reads its own rows, not the pages before it.
pub(crate) const LIST_RUNS_AFTER: &str = list_runs_after!(runs_filter!());

/// [`LIST_RUNS_AFTER`] of one parent's children.
pub(crate) const LIST_RUNS_AFTER_OF_PARENT: &str = list_runs_after!(runs_filter!(of_parent));

/// `HistoryStore::count_runs`: runs per status under the listing's filter (`$3` unused).
pub(crate) const COUNT_RUNS: &str = count_runs!(runs_filter!());

/// [`COUNT_RUNS`] of one parent's children.
pub(crate) const COUNT_RUNS_OF_PARENT: &str = count_runs!(runs_filter!(of_parent));

/// `HistoryStore::count_versions`: runs per agent version and fingerprint under the listing's
/// filter (`$3` unused).
pub(crate) const COUNT_VERSIONS: &str = count_versions!(runs_filter!());

/// [`COUNT_VERSIONS`] of one parent's children.
pub(crate) const COUNT_VERSIONS_OF_PARENT: &str = count_versions!(runs_filter!(of_parent));

/// `HistoryStore::spend_by_day`: the runs of the listing's filter per agent and UTC day of
/// creation, with their spend (JSON text, `NULL` where nothing was spent) summed (`$3`
/// unused).
pub(crate) const SPEND_BY_DAY: &str = spend_by_day!(runs_filter!());

/// [`SPEND_BY_DAY`] of one parent's children.
pub(crate) const SPEND_BY_DAY_OF_PARENT: &str = spend_by_day!(runs_filter!(of_parent));

/// `HistoryStore::count_label_values`: the values of label `$11` on the runs of the
/// listing's filter (`$3` unused), by value as bytes (SQLite's `BINARY`), each with its
/// runs and the newest one's creation time.
pub(crate) const COUNT_LABEL_VALUES: &str = count_label_values!(runs_filter!());

/// [`COUNT_LABEL_VALUES`] of one parent's children.
pub(crate) const COUNT_LABEL_VALUES_OF_PARENT: &str = count_label_values!(runs_filter!(of_parent));

/// `OperatorStore::cancel_run` under a live lease: the request, for the holder's next commit.
pub(crate) const REQUEST_CANCEL: &str = "UPDATE runs SET cancel_requested_by = $2, \
     cancel_reason = $3, updated_at = $4 WHERE id = $1";

/// An operator's transition on the run row (`OperatorStore::cancel_run`, `terminate_run`,
/// `accept_cancel`), inside the write transaction that read the run: the new version,
/// status and epoch (`$6`), the lease kept (`$7`) or ended, the request cleared.
pub(crate) const OPERATOR_RUN: &str = "UPDATE runs SET version = $2, status = $3, \
     error_code = $4, error_message = $5, epoch = $6, waiting_for = NULL, wake_at = NULL, \
     lease_owner = CASE WHEN $7 THEN lease_owner ELSE NULL END, \
     lease_expires_at = CASE WHEN $7 THEN lease_expires_at ELSE NULL END, \
     claims_without_progress = 0, last_hash = $8, patch_bytes = $9, updated_at = $10, \
     state = COALESCE($11, state), \
     snapshot_version = CASE WHEN $11 IS NULL THEN snapshot_version ELSE $2 END, \
     cancel_requested_by = NULL, cancel_reason = NULL \
     WHERE id = $1 AND version = $2 - 1 RETURNING lease_owner, lease_expires_at";

/// An operator's transition, with its note.
pub(crate) const INSERT_OPERATOR_TRANSITION: &str = concat!(
    "INSERT INTO transitions (run_id, version, \
     from_state, to_state, kind, status, epoch, created_at, hash, payload_kind, payload, note_by, \
     note_reason, position, error_code, error_message) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
     ",
    next_position!(),
    ", $14, $15)"
);

/// `RunStore::migrate_run`, after the `migrated` version was written in the same
/// transaction: the run row's agent version (`$2`), fingerprint (`$3`), the version
/// migrated at (`$4`), the resume base (`$5`), what the run waits for (`$6`, `$7`) and the
/// mapped state's name (`$8`: an operator's transition keeps the run's).
pub(crate) const MIGRATED_ROW: &str = "UPDATE runs SET agent_version = $2, fingerprint = $3, \
     state_name = $8, \
     migrated_at_version = $4, resume_base = $5, waiting_for = $6, wake_at = $7 \
     WHERE id = $1 AND version = $4";

/// The same wait on the `migrated` (or `signal_dropped`) transition, for its events.
pub(crate) const MIGRATED_TRANSITION: &str = "UPDATE transitions SET waiting_for = $2, \
     wake_at = $3 WHERE run_id = $1 AND version = $4";

pub(crate) const SEND_SIGNAL: &str = concat!(
    "INSERT INTO signals (run_id, name, payload, created_at, \
     position) SELECT id, $2, $3, $4, ",
    next_position!(),
    " FROM runs WHERE id = $1 \
     RETURNING id"
);

/// [`SEND_SIGNAL`] under dedup key `$4` (`$5` the clock), unless the run has a signal
/// under it (the unique index `signals_dedup`): no row then, as for no such run.
pub(crate) const SEND_SIGNAL_ONCE: &str = concat!(
    "INSERT INTO signals (run_id, name, payload, created_at, dedup_key, \
     position) SELECT id, $2, $3, $5, $4, ",
    next_position!(),
    " FROM runs WHERE id = $1 \
     ON CONFLICT (run_id, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING \
     RETURNING id"
);

pub(crate) const SIGNAL_BY_KEY: &str =
    "SELECT id FROM signals WHERE run_id = $1 AND dedup_key = $2";

/// What a worker's claim reads for the claimed runs (`RunStore::claim_next`), in one
/// statement for the batch: `$1` is a JSON array of `[id, version, waiting]`. Per run, its
/// version span as `[first, last, count]`, whether its journal has an entry at its
/// version, and, for a waiting run, its pending signals as `[[id, name, payload,
/// created_at], ...]` oldest first. Each part is the statement the runner would otherwise
/// send for the run (`VERSION_SPAN`, the journal at the version, `PENDING_SIGNALS`), on the
/// same indexes.
pub(crate) const CLAIM_READS: &str = "SELECT c.value ->> 0 AS id, \
     (SELECT json_array(min(t.version), max(t.version), count(*)) FROM transitions t \
      WHERE t.run_id = c.value ->> 0) AS span, \
     EXISTS (SELECT 1 FROM journal j WHERE j.run_id = c.value ->> 0 \
      AND j.version = c.value ->> 1) AS journaled, \
     CASE WHEN c.value ->> 2 THEN (SELECT json_group_array(json_array(s.id, s.name, \
      json(s.payload), s.created_at) ORDER BY s.id) FROM signals s \
      WHERE s.run_id = c.value ->> 0 AND s.consumed_at_version IS NULL) END AS pending \
     FROM json_each($1) AS c";

pub(crate) const PENDING_SIGNALS: &str = "SELECT id, run_id, name, payload, created_at, \
     consumed_at_version FROM signals WHERE run_id = $1 AND consumed_at_version IS NULL \
     ORDER BY id";

/// Signal `$2` of run `$1`, consumed or not (`OperatorStore::drop_signal` reads it in its write).
pub(crate) const SIGNAL_OF_RUN: &str = "SELECT id, run_id, name, payload, created_at, \
     consumed_at_version FROM signals WHERE run_id = $1 AND id = $2";

/// An operator's transition that keeps the run's wait (`OperatorStore::drop_signal`): the wait put
/// back on the run row and on the transition `$4` (for its events), which
/// [`OPERATOR_RUN`] and [`INSERT_OPERATOR_TRANSITION`] clear.
pub(crate) const KEEP_WAIT_ROW: &str =
    "UPDATE runs SET waiting_for = $2, wake_at = $3 WHERE id = $1 AND version = $4";

/// `RunStore::quarantine`: fenced by the epoch, no version written, the lease ended.
pub(crate) const QUARANTINE_UNDER_LEASE: &str = concat!(
    "UPDATE runs SET status = 'quarantined', error_code = $3, error_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $5 \
     WHERE id = $1 AND epoch = $2 RETURNING ",
    run_cols!()
);

pub(crate) const SET_STATUS: &str = concat!(
    "UPDATE runs SET status = $2, \
     error_code = CASE WHEN $2 = 'running' THEN NULL ELSE $3 END, \
     error_message = CASE WHEN $2 = 'running' THEN NULL ELSE $4 END, \
     claims_without_progress = CASE WHEN $2 = 'running' THEN 0 ELSE claims_without_progress END, \
     wake_at = CASE WHEN $2 = 'running' THEN NULL ELSE wake_at END, updated_at = $5 \
     WHERE id = $1 AND NOT (lease_owner IS NOT NULL AND lease_expires_at > $5) RETURNING ",
    run_cols!()
);

/// `OperatorStore::set_budget`: the run's budget `$2` (JSON text or `NULL`).
pub(crate) const SET_BUDGET: &str = concat!(
    "UPDATE runs SET budget = $2 WHERE id = $1 RETURNING ",
    run_cols!()
);

pub(crate) const SET_TOOL: &str = "INSERT INTO tool_switches (tool, enabled, reason, updated_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (tool) DO UPDATE SET enabled = excluded.enabled, \
     reason = excluded.reason, updated_at = excluded.updated_at";

pub(crate) const TOOL_SWITCHES: &str =
    "SELECT tool, enabled, reason, updated_at FROM tool_switches ORDER BY tool";

/// Bytes of a run's rows: the stored values plus a fixed per-row overhead.
pub(crate) const STORAGE_BYTES: &str = "SELECT \
     (SELECT COALESCE(sum(length(payload) + length(hash) + length(from_state) \
        + length(to_state) + 48), 0) FROM transitions WHERE run_id = $1) \
   + (SELECT COALESCE(sum(length(input) + COALESCE(length(output), 0) \
        + COALESCE(length(output_summary), 0) + length(name) + 96), 0) \
        FROM journal WHERE run_id = $1) \
   + (SELECT COALESCE(sum(length(output) + 24), 0) FROM outputs WHERE run_id = $1) \
   + (SELECT COALESCE(sum(length(state) + 160), 0) FROM runs WHERE id = $1)";

/// `OperatorStore::repair_run`'s compare-and-set: the run still in the planned status (`$10`)
/// at the planned epoch and last stored version, no live lease; the row rewritten from the
/// restored or edited state.
pub(crate) const REPAIR_RUN: &str = "UPDATE runs SET state = $2, state_name = $3, version = $4, \
     snapshot_version = $4, status = 'running', waiting_for = NULL, wake_at = NULL, \
     error_code = NULL, error_message = NULL, epoch = $5, lease_owner = NULL, \
     lease_expires_at = NULL, claims_without_progress = 0, last_hash = $6, patch_bytes = 0, \
     cancel_requested_by = NULL, cancel_reason = NULL, updated_at = $7 \
     WHERE id = $1 AND status = $10 AND epoch = $8 \
     AND (lease_owner IS NULL OR lease_expires_at <= $7) \
     AND (SELECT max(version) FROM transitions WHERE run_id = $1) = $9";

/// `SqlReads::run_events_sql`.
pub(crate) static RUN_EVENTS: LazyLock<String> =
    LazyLock::new(|| event_statement(SQLITE, "{a}.run_id = $1"));

/// `SqlReads::scope_events_sql`.
pub(crate) static SCOPE_EVENTS: LazyLock<String> =
    LazyLock::new(|| event_statement(SQLITE, "($1 IS NULL OR r.agent = $1)"));

/// How event statements are written on SQLite: times are milliseconds already.
const SQLITE: Dialect = Dialect {
    ms: "",
    is_true: " = 1",
    typed: false,
};

/// The highest position drawn so far (`EventLog::event_head`).
pub(crate) const LAST_POSITION: &str = concat!("SELECT ", next_position!(), " - 1");

/// Before prune deletes records: keep their highest position as the floor, so that it is
/// never drawn again.
pub(crate) const RAISE_POSITION_FLOOR: &str =
    concat!("UPDATE event_clock SET n = ", next_position!(), " - 1");

/// `OperatorStore::prune`'s candidates ([`agent_sql::sql::prune_candidates`]).
pub(crate) static PRUNE_CANDIDATES: LazyLock<String> =
    LazyLock::new(|| agent_sql::sql::prune_candidates("$3"));

/// The final runs retention deletes ([`agent_sql::sql::expired_runs`]).
pub(crate) static EXPIRED_RUNS: LazyLock<String> =
    LazyLock::new(|| agent_sql::sql::expired_runs("$1"));

/// Retention's writes ([`agent_sql::sql::RetentionSql`]): ids bound as a JSON array; a
/// compaction batch as a JSON array of `[id, cutoff, state]`, the state as its JSON text (a
/// JSON string, which `json_extract` returns as that text).
pub(crate) static RETENTION: LazyLock<RetentionSql> = LazyLock::new(|| {
    let cut = "(SELECT json_extract(value, '$[0]') AS id, \
               json_extract(value, '$[1]') AS cutoff, json_extract(value, '$[2]') AS state \
               FROM json_each($1)) AS c";
    RetentionSql::new("IN (SELECT value FROM json_each($1))", "$2", cut, cut)
});

#[cfg(test)]
mod tests {
    use agent_core::store::RunStore;
    use sqlx::Row;

    use crate::SqliteStore;

    /// The store with `n` runs waiting for a signal, `n` completed, `n` running under live
    /// leases and `n` consumed signals, all written as rows: a store at scale that has
    /// nothing to claim.
    async fn store_at_scale(n: u32) -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("plan.sqlite3"))
            .await
            .unwrap();
        let far = agent_core::store::now_ms() + 3_600_000;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "WITH RECURSIVE g(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM g WHERE k < {n}) \
             INSERT INTO runs (id, agent, fingerprint, state_name, state, version, status, \
               waiting_for, lease_owner, lease_expires_at, creation_hash, last_hash, \
               created_at, updated_at, seq) \
             SELECT s.status || '-' || k, 'A', 'fp', 'S', '{{}}', 1, s.status, s.waiting_for, \
               s.owner, s.expires, 'h', 'h', k, k, s.rank * {n} + k \
             FROM g, (SELECT 'waiting' AS status, 'go' AS waiting_for, NULL AS owner, \
                 NULL AS expires, 0 AS rank \
               UNION ALL SELECT 'completed', NULL, NULL, NULL, 1 \
               UNION ALL SELECT 'running', NULL, 'w', {far}, 2) s; \
             WITH RECURSIVE g(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM g WHERE k < {n}) \
             INSERT INTO signals (run_id, name, payload, created_at, consumed_at_version) \
             SELECT 'completed-' || k, 'go', 'true', k, 1 FROM g"
        )))
        .execute(store.pool())
        .await
        .unwrap();
        (dir, store)
    }

    async fn explain(store: &SqliteStore, sql: &str, binds: &[i64]) -> String {
        let mut q = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
        for b in binds {
            q = q.bind(*b);
        }
        let rows = q.fetch_all(store.pool()).await.unwrap();
        let nodes: Vec<(i64, i64, String)> = rows
            .iter()
            .map(|r| (r.get("id"), r.get("parent"), r.get("detail")))
            .collect();
        crate::plan_tree(&nodes)
    }

    /// No line of `plan` reads a whole table, or an index that holds the runs that cannot
    /// be claimed (`runs_status`: every waiting and every completed run).
    fn reads_no_table(plan: &str) {
        let steps: Vec<&str> = plan
            .lines()
            .skip(1)
            .map(|l| l.trim_start_matches([' ', '|', '-']))
            .collect();
        // Subqueries' rows, not tables: reading them whole is reading what they yield.
        let coroutines: Vec<&str> = steps
            .iter()
            .filter_map(|s| s.strip_prefix("CO-ROUTINE "))
            .collect();
        for &step in &steps {
            let scanned = step
                .strip_prefix("SCAN ")
                .map(|s| s.split(' ').next().unwrap_or(s));
            let scan = scanned.is_some_and(|t| t != "json_each" && !coroutines.contains(&t));
            assert!(
                !scan || step.contains(" USING "),
                "a table read whole: `{step}` in\n{plan}"
            );
            assert!(
                !step.contains("runs_status") && !step.contains("runs_claimable"),
                "an index over every run of a status: `{step}` in\n{plan}"
            );
        }
    }

    fn claim_plan_uses_its_indexes(plan: &str) {
        reads_no_table(plan);
        for index in [
            "runs_unleased",
            "runs_lease_expiry",
            "signals_pending_id",
            "runs_waiting_wake",
            "runs_waiting_children",
            "runs_cancel_requested",
        ] {
            assert!(
                plan.contains(&format!("USING INDEX {index}")),
                "no arm on `{index}` in\n{plan}"
            );
        }
        assert!(
            plan.lines()
                .any(|l| l.starts_with("|--SEARCH r USING INDEX") && l.ends_with("(id=?)")),
            "the runs picked are not read by id in\n{plan}"
        );
        // Only the runs the arms picked (at most the limit from each) are sorted, and
        // deduplicated by the `UNION`.
        for line in plan.lines().filter(|l| l.contains("TEMP B-TREE")) {
            let step = line.trim_start_matches([' ', '|', '-']);
            assert!(
                line.starts_with("|--USE TEMP B-TREE") || step == "UNION USING TEMP B-TREE",
                "an arm sorts: `{line}` in\n{plan}"
            );
        }
    }

    /// The listings of one parent's children read its children through `runs_spawned_by`,
    /// not every run (as the statements for any parent do, `$6` possibly `NULL`).
    #[tokio::test]
    async fn a_parents_children_are_listed_and_counted_from_their_index() {
        let (_dir, store) = store_at_scale(500).await;
        for (any, of_parent) in [
            (super::LIST_RUNS, super::LIST_RUNS_OF_PARENT),
            (super::COUNT_RUNS, super::COUNT_RUNS_OF_PARENT),
            (super::COUNT_VERSIONS, super::COUNT_VERSIONS_OF_PARENT),
            (super::SPEND_BY_DAY, super::SPEND_BY_DAY_OF_PARENT),
        ] {
            assert_eq!(super::of_parent(any), of_parent);
            let limit = (any == super::LIST_RUNS).then_some(50_i64);
            let plan = sqlx::query(sqlx::AssertSqlSafe(format!(
                "EXPLAIN QUERY PLAN {of_parent}"
            )))
            .bind(None::<&str>)
            .bind("[]")
            .bind(limit)
            .bind(0_i64)
            .bind("[]")
            .bind("parent-1")
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(None::<&str>)
            .fetch_all(store.pool())
            .await
            .unwrap();
            let details: Vec<String> = plan.iter().map(|r| r.get("detail")).collect();
            assert!(
                details
                    .iter()
                    .any(|d| d.contains("USING INDEX runs_spawned_by")),
                "{of_parent}: {details:#?}"
            );
        }
        assert_eq!(super::of_parent(super::NEXT_DUE), super::NEXT_DUE);
    }

    #[tokio::test]
    async fn claims_and_next_due_read_only_their_indexes_with_and_without_statistics() {
        let (_dir, store) = store_at_scale(2_000).await;
        let agents = vec!["A".to_owned()];
        let now = agent_core::store::now_ms();
        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
            }
            let plan = store.explain_claim_next(&agents, 16).await.unwrap();
            claim_plan_uses_its_indexes(&plan);
            let due = explain(&store, super::NEXT_DUE, &[now]).await;
            reads_no_table(&due);
            assert!(
                due.contains("USING INDEX runs_lease_expiry (lease_expires_at>?)")
                    && due.contains("USING INDEX runs_waiting_wake (wake_at>?)"),
                "next_due off its indexes:\n{due}"
            );
        }
        let claimed = store
            .claim_next(&agents, "w", std::time::Duration::from_secs(30), 16)
            .await
            .unwrap();
        assert!(claimed.is_empty(), "nothing is claimable");
    }
}
