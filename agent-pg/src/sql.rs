//! Every statement the store issues. Unqualified names resolve in the store's schema (the
//! connection's `search_path`); times cross the boundary as milliseconds (`ms_to_ts`,
//! `ts_to_ms` from the first migration). Statements whose text is the same on SQLite are in
//! [`agent_sql::sql`]; those naming the final statuses are built once, on first use, from
//! [`final_statuses`].

use std::sync::LazyLock;

use agent_core::store::{RunStatus, WAIT_ALL_CHILDREN, WAIT_FIRST_CHILD};
use agent_sql::events::{Dialect, event_statement};
use agent_sql::sql::{RetentionSql, final_statuses};

/// The columns of a run, in the order `row_to_run` reads them.
macro_rules! run_cols {
    () => {
        "id, agent, fingerprint, state_name, state, version, status, waiting_for, \
         ts_to_ms(wake_at) AS wake_at, error_code, error_message, epoch, lease_owner, \
         ts_to_ms(lease_expires_at) AS lease_expires_at, claims_without_progress, parent_id, \
         parent_version, ts_to_ms(created_at) AS created_at, ts_to_ms(updated_at) AS updated_at, \
         creation_hash, last_hash, patch_bytes, snapshot_version, labels, \
         cancel_requested_by, cancel_reason, spawned_by, spawned_at_version, \
         agent_version, migrated_at_version, resume_base, spend, budget, \
         (SELECT jsonb_agg(jsonb_build_array(t.payload_kind, t.payload) ORDER BY t.version) \
          FROM transitions t WHERE t.run_id = runs.id AND t.version > runs.snapshot_version \
          AND t.version <= runs.version) AS tail"
    };
}

/// The columns of a journal entry, in the order `row_to_entry` reads them.
macro_rules! journal_cols {
    () => {
        "j.run_id, j.version, j.seq, j.kind, j.state, j.name, j.tool_kind, j.input_hash, j.input, \
         j.idempotency_key, j.status, COALESCE(o.output, j.output) AS output, j.output_external, \
         j.error_class, j.error_code, j.error_message, j.attempts, j.duration_ms, \
         ts_to_ms(j.started_at) AS started_at, ts_to_ms(j.finished_at) AS finished_at"
    };
}

/// The graph `$3` comes as JSON text.
pub(crate) const REGISTER_AGENT: &str = "INSERT INTO agents (agent, fingerprint, graph) \
     VALUES ($1, $2, $3::jsonb) \
     ON CONFLICT (agent, fingerprint) DO UPDATE \
     SET registered_at = clock_timestamp(), seq = nextval(pg_get_serial_sequence('agents', 'seq'))";

pub(crate) const AGENT_GRAPH: &str = "SELECT graph FROM agents WHERE agent = $1 \
     AND ($2::text IS NULL OR fingerprint = $2) ORDER BY seq DESC LIMIT 1";

/// With a worker in `$15`, the run is created claimed by it for `$16` ms (epoch 1, no
/// claim charged, as `CLAIM_RUN` leaves a free run) and nobody is woken; without, idle
/// workers are notified.
pub(crate) const INSERT_RUN: &str = concat!(
    "WITH ins AS (INSERT INTO runs (id, agent, fingerprint, state_name, state, creation_hash, \
     last_hash, parent_id, parent_version, labels, spawned_by, spawned_at_version, \
     agent_version, epoch, lease_owner, lease_expires_at, claims_without_progress, budget) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $11, $12, $13, $14, \
     CASE WHEN $15::text IS NULL THEN 0 ELSE 1 END, $15, \
     CASE WHEN $15 IS NULL THEN NULL \
     ELSE clock_timestamp() + $16::bigint * interval '1 millisecond' END, 0, $17::jsonb) \
     ON CONFLICT (id) DO NOTHING RETURNING ",
    run_cols!(),
    "), lb AS (INSERT INTO run_labels (run_id, key, value) \
     SELECT ins.id, l.key, l.value FROM ins, jsonb_each_text(ins.labels) l), \
     tr AS (INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, \
     epoch, created_at, hash, payload_kind, payload) \
     SELECT id, 0, state_name, state_name, 'start', status, 0, ms_to_ts(created_at), last_hash, \
     'snapshot', state FROM ins) \
     SELECT ins.*, CASE WHEN $15 IS NULL THEN pg_notify($10, ins.id) IS NULL END AS notified \
     FROM ins"
);

pub(crate) const LOAD_RUN: &str = concat!("SELECT ", run_cols!(), " FROM runs WHERE id = $1");

pub(crate) static CLAIM_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "UPDATE runs SET epoch = epoch + 1, lease_owner = $2, \
             lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', \
             claims_without_progress = claims_without_progress + CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END, \
             updated_at = clock_timestamp() WHERE id = $1 AND status NOT IN {final_statuses} \
             AND (lease_owner IS NULL OR lease_expires_at <= clock_timestamp() \
             OR lease_owner = $2) RETURNING ",
            run_cols!()
        ),
        final_statuses = final_statuses()
    )
});

/// A run whose cancel is requested is claimable whatever it waits for: its claimer writes
/// the cancel. A parent waiting for its children (`waiting_for` one of the two `children:`
/// values) is claimable once none of the runs its step at `version - 1` spawned is in a
/// status that is not final, or (the first) once one of them completed. Its subqueries run
/// only for waiting rows with one of those values, on the index `runs_spawned_by`.
///
/// The rule ([`claimable`]) is checked on every row picked. The rows are found by
/// [`claim_candidates`]: one index per way of being claimable, so that runs waiting for a
/// signal that has not come (a million of them, say) are never read.
pub(crate) static CLAIM_NEXT: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "WITH candidates AS ({candidates}), \
             picked AS (SELECT r.id AS pick_id FROM runs r \
             WHERE r.id IN (SELECT id FROM candidates) AND {claimable} \
             ORDER BY r.created_at, r.seq LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE runs SET epoch = epoch + 1, lease_owner = $2, \
             lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', \
             claims_without_progress = claims_without_progress + CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END, \
             updated_at = clock_timestamp() FROM picked WHERE id = pick_id RETURNING ",
            run_cols!()
        ),
        candidates = claim_candidates(),
        claimable = claimable(),
    )
});

/// What `Store::claim_*_reading` reads for runs it just claimed (`$1` ids, `$2` their
/// versions, `$3` whether each waits): the version span (`span`: first, last, count, as
/// `VERSION_SPAN`), whether the journal holds an entry at the version (`journaled`), and a
/// waiting run's pending signals (`pending`: `[id, name, payload, sent at]`, oldest first).
/// Each is an index lookup (`transitions` and `journal` by their primary keys,
/// `signals_pending`).
///
/// A statement of its own, sent after the claim: inside the claim's statement these reads
/// would use the snapshot taken when it began, and a claim that waited for the row lock
/// of a run whose previous holder was writing (a takeover racing a late journal entry or
/// commit) would not see what that holder committed meanwhile.
pub(crate) const CLAIM_READS: &str = "SELECT c.id, \
     (SELECT ARRAY[min(t.version), max(t.version), count(*)] FROM transitions t \
      WHERE t.run_id = c.id) AS span, \
     EXISTS (SELECT 1 FROM journal j WHERE j.run_id = c.id AND j.version = c.version) \
     AS journaled, \
     CASE WHEN c.waiting THEN COALESCE((SELECT jsonb_agg(jsonb_build_array( \
      s.id, s.name, s.payload, ts_to_ms(s.created_at)) ORDER BY s.id) FROM signals s \
      WHERE s.run_id = c.id AND s.consumed_at_version IS NULL), '[]'::jsonb) END AS pending \
     FROM unnest($1::text[], $2::bigint[], $3::boolean[]) AS c(id, version, waiting)";

/// The agents asked for (`$1`, all when empty): an entry `Agent` takes any of its runs, an
/// entry `Agent@N` only those on version `N` (`RunStore::claim_next`). Checked on rows an
/// index of the arm found, so it needs no index of its own.
const OF_AGENTS: &str = "(cardinality($1::text[]) = 0 OR r.agent = ANY($1) \
     OR (r.agent || '@' || r.agent_version) = ANY($1))";
/// No live lease.
const LEASE_FREE: &str = "(r.lease_owner IS NULL OR r.lease_expires_at <= clock_timestamp())";
/// A runnable run's timer, if any, is due.
const TIMER_DUE: &str = "(r.wake_at IS NULL OR r.wake_at <= clock_timestamp())";
/// A signal the waiting run `r` waits for is pending.
const SIGNAL_PENDING: &str = "EXISTS (SELECT 1 FROM signals s WHERE s.run_id = r.id \
     AND s.consumed_at_version IS NULL AND (r.waiting_for IS NULL OR s.name = r.waiting_for))";

/// The waiting parent `r`'s wait for its children holds.
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

/// Whether run `r` may be claimed now by a worker of the agents `$1`.
fn claimable() -> String {
    format!(
        "r.status IN ('running', 'compensating', 'waiting') AND {OF_AGENTS} AND {LEASE_FREE} \
         AND (r.cancel_requested_by IS NOT NULL \
           OR (r.status IN ('running', 'compensating') AND {TIMER_DUE}) \
           OR (r.status = 'waiting' AND (r.wake_at <= clock_timestamp() OR {SIGNAL_PENDING} \
             OR {children})))",
        children = children_ready()
    )
}

/// The runs [`CLAIM_NEXT`] picks from: each arm yields only runs [`claimable`] accepts, at
/// most `$4`, through an index of its own (migration `claim_indexes`), so that no arm
/// reads runs that cannot be claimed (which, read first, would also use up its `$4`):
/// runnable runs without a lease or a timer, oldest first (`runs_unleased`); runnable runs
/// whose lease expired, soonest first (`runs_lease_expiry`); waiting runs whose signal is
/// pending, from the pending signals (`signals_pending`); runs whose timer is due (a wait's
/// timeout, a retry's backoff, a run handed back until a rate limit has room;
/// `runs_waiting_wake`); parents whose children are done (`runs_waiting_children`); runs
/// with a cancel requested (`runs_cancel_requested`). A filter added to `claimable`
/// belongs in every arm too.
///
/// The arms compare times with `statement_timestamp()`, where the rule uses
/// `clock_timestamp()`: a volatile function cannot bound an index scan (the expired
/// leases and due timers would be found by reading every lease and timer), and a lease
/// expired at the statement's start is expired when the rule looks too.
fn claim_candidates() -> String {
    let arms = format!(
        "(SELECT r.id FROM runs r WHERE r.status IN ('running', 'compensating') \
           AND r.lease_owner IS NULL AND r.wake_at IS NULL AND {OF_AGENTS} \
           ORDER BY r.created_at, r.seq LIMIT $4) \
         UNION (SELECT r.id FROM runs r WHERE r.status IN ('running', 'compensating') \
           AND r.lease_owner IS NOT NULL AND r.lease_expires_at <= clock_timestamp() \
           AND {OF_AGENTS} AND {TIMER_DUE} ORDER BY r.lease_expires_at LIMIT $4) \
         UNION (SELECT r.id FROM signals s JOIN runs r ON r.id = s.run_id \
           WHERE s.consumed_at_version IS NULL AND r.status = 'waiting' \
           AND (r.waiting_for IS NULL OR s.name = r.waiting_for) AND {LEASE_FREE} \
           AND {OF_AGENTS} ORDER BY s.id LIMIT $4) \
         UNION (SELECT r.id FROM runs r \
           WHERE r.status IN ('running', 'compensating', 'waiting') \
           AND r.wake_at <= clock_timestamp() AND {LEASE_FREE} AND {OF_AGENTS} \
           ORDER BY r.wake_at LIMIT $4) \
         UNION (SELECT r.id FROM runs r WHERE r.status = 'waiting' \
           AND r.waiting_for IN ('{all}', '{first}') AND {LEASE_FREE} AND {OF_AGENTS} \
           AND {children} ORDER BY r.created_at, r.seq LIMIT $4) \
         UNION (SELECT r.id FROM runs r WHERE r.cancel_requested_by IS NOT NULL \
           AND r.status IN ('running', 'compensating', 'waiting') AND {LEASE_FREE} \
           AND {OF_AGENTS} ORDER BY r.created_at, r.seq LIMIT $4)",
        all = WAIT_ALL_CHILDREN,
        first = WAIT_FIRST_CHILD,
        children = children_ready()
    );
    arms.replace("clock_timestamp()", "statement_timestamp()")
}

/// `RunStore::next_due`: milliseconds until the earliest live lease of a run that is not
/// final runs out or its earliest timer is due (`runs_lease_expiry`, `runs_waiting_wake`);
/// `NULL` when there is none.
/// (`statement_timestamp()` bounds the index scans; see [`claim_candidates`].)
pub(crate) const NEXT_DUE: &str = "SELECT ts_to_ms(least( \
     (SELECT min(lease_expires_at) FROM runs WHERE lease_owner IS NOT NULL \
       AND status IN ('running', 'compensating', 'waiting') \
       AND lease_expires_at > statement_timestamp()), \
     (SELECT min(wake_at) FROM runs WHERE wake_at > statement_timestamp() \
       AND status IN ('running', 'compensating', 'waiting')))) \
     - ts_to_ms(clock_timestamp())";

/// Take a run whose stored data does not read out of circulation.
pub(crate) const QUARANTINE_CORRUPT: &str = "WITH upd AS (UPDATE runs SET status = 'quarantined', \
     error_code = 'row.unreadable', error_message = $2, lease_owner = NULL, \
     lease_expires_at = NULL, updated_at = clock_timestamp() WHERE id = $1 \
     RETURNING id, version, status, error_code, error_message) \
     INSERT INTO status_changes (run_id, version, status, error_code, error_message) \
     SELECT id, version, status, error_code, error_message FROM upd";

pub(crate) const RENEW_LEASE: &str = "UPDATE runs \
     SET lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond' \
     WHERE id = $1 AND epoch = $2 AND lease_owner = $3 RETURNING ts_to_ms(lease_expires_at)";

/// Release, leaving what the claim was charged (`RunStore::hand_back`); wakes nobody.
pub(crate) const HAND_BACK: &str = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL \
     WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL";

/// `RunStore::defer_run`: released as `HAND_BACK` does, due again at `$3`; a running run
/// only (a step woken from a wait keeps its worker; see the trait).
pub(crate) const DEFER_RUN: &str = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, \
     wake_at = ms_to_ts($3), waiting_for = $4 \
     WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL AND status = 'running' RETURNING id";

/// `RunStore::expire_leases_of`: the leases of a worker's previous process end now; one
/// notification per run wakes the workers. The status filter keeps to `runs_claimable`.
pub(crate) const EXPIRE_LEASES_OF: &str = "WITH upd AS (UPDATE runs SET lease_expires_at = clock_timestamp() \
     WHERE status IN ('running', 'compensating', 'waiting') AND lease_owner = $1 \
     AND lease_expires_at > clock_timestamp() RETURNING id) \
     SELECT pg_notify($2, id) AS notified FROM upd";

pub(crate) const RELEASE_LEASE: &str = "WITH upd AS (UPDATE runs SET lease_owner = NULL, \
     lease_expires_at = NULL, claims_without_progress = 0 WHERE id = $1 AND epoch = $2 AND lease_owner IS NOT NULL \
     RETURNING id, status) \
     SELECT pg_notify($3, id) AS notified FROM upd";

/// Insert or replace a journal entry, fenced: the lock on the run row conflicts with a
/// concurrent claim's update, so an entry is written only under the current epoch. The lock
/// is exclusive (`NO KEY UPDATE`, which foreign keys do not wait for), so that the entries
/// of parallel calls draw their event positions in the order they commit; a call keeps
/// the position of its first record, and its end gets one when it is recorded ended (an
/// ended call recorded again keeps it).
pub(crate) const RECORD_ENTRY: &str = concat!(
    "WITH fence AS (SELECT id FROM runs WHERE id = $1 AND epoch = $2 \
       FOR NO KEY UPDATE), \
     p AS (SELECT id, nextval('event_positions') AS n FROM fence), \
     j AS (INSERT INTO journal (run_id, version, seq, kind, state, name, tool_kind, input_hash, \
       input, idempotency_key, status, output, output_external, output_summary, output_bytes, \
       error_class, error_code, error_message, attempts, duration_ms, started_at, finished_at, \
       started_position, finished_position) \
       SELECT id, $3::bigint, $4::integer, $5::text, $6::text, $7::text, $8::text, $9::text, \
       $10::jsonb, $11::text, $12::text, $13::jsonb, $14::boolean, $15::text, $16::integer, \
       $17::text, $18::text, $19::text, $20::integer, $21::bigint, ms_to_ts($22), \
       ms_to_ts($23), n, CASE WHEN $12::text <> 'started' THEN n END FROM p \
       ",
    agent_sql::journal_upsert!(),
    " RETURNING 1), \
     o AS (INSERT INTO outputs (run_id, version, seq, output) \
       SELECT id, $3::bigint, $4::integer, $24::jsonb FROM fence WHERE $24::jsonb IS NOT NULL \
       ON CONFLICT (run_id, version, seq) DO UPDATE SET output = EXCLUDED.output), \
     od AS (DELETE FROM outputs WHERE $24::jsonb IS NULL AND run_id = (SELECT id FROM fence) \
       AND version = $3 AND seq = $4) \
     SELECT count(*) FROM j"
);

/// Several runs' journal entries in one statement (group commit, `group_commit.rs`): the
/// same writes as [`RECORD_ENTRY`] for entries whose output is kept inline, one row of
/// parameter arrays per entry (one entry per run at most). Each entry is fenced by its own
/// lease's epoch under the lock of its run row (taken in the order of the run ids, so that
/// two such statements never wait for each other in a cycle); an entry whose epoch is not
/// the run's writes nothing and returns nothing. `n` (the entry's place in the arrays,
/// from 1) says which entries were written. A side-table output an entry replaces is
/// deleted, as by [`RECORD_ENTRY`].
pub(crate) const RECORD_ENTRIES: &str = concat!(
    "WITH i AS (SELECT * FROM unnest($1::text[], \
       $2::bigint[], $3::bigint[], $4::integer[], $5::text[], $6::text[], $7::text[], \
       $8::text[], $9::text[], $10::jsonb[], $11::text[], $12::text[], $13::jsonb[], \
       $14::text[], $15::integer[], $16::text[], $17::text[], $18::text[], $19::integer[], \
       $20::bigint[], $21::bigint[], $22::bigint[]) WITH ORDINALITY AS i(run_id, epoch, \
       version, seq, kind, state, name, tool_kind, input_hash, input, idempotency_key, \
       status, output, output_summary, output_bytes, error_class, error_code, \
       error_message, attempts, duration_ms, started_at, finished_at, n)), \
     fence AS (SELECT id, epoch FROM runs WHERE id IN (SELECT run_id FROM i) ORDER BY id \
       FOR NO KEY UPDATE), \
     p AS (SELECT i.*, nextval('event_positions') AS pos FROM i \
       JOIN fence ON fence.id = i.run_id AND fence.epoch = i.epoch), \
     j AS (INSERT INTO journal (run_id, version, seq, kind, state, name, tool_kind, input_hash, \
       input, idempotency_key, status, output, output_external, output_summary, output_bytes, \
       error_class, error_code, error_message, attempts, duration_ms, started_at, finished_at, \
       started_position, finished_position) \
       SELECT run_id, version, seq, kind, state, name, tool_kind, input_hash, input, \
       idempotency_key, status, output, false, output_summary, output_bytes, error_class, \
       error_code, error_message, attempts, duration_ms, ms_to_ts(started_at), \
       ms_to_ts(finished_at), pos, CASE WHEN status <> 'started' THEN pos END FROM p \
       ",
    agent_sql::journal_upsert!(),
    "), \
     od AS (DELETE FROM outputs o USING p WHERE o.run_id = p.run_id \
       AND o.version = p.version AND o.seq = p.seq) \
     SELECT n FROM p"
);

pub(crate) const JOURNAL: &str = concat!(
    "SELECT ",
    journal_cols!(),
    " FROM journal j LEFT JOIN outputs o ON j.output_external AND o.run_id = j.run_id \
     AND o.version = j.version AND o.seq = j.seq \
     WHERE j.run_id = $1 AND ($2::bigint IS NULL OR j.version = $2) ORDER BY j.version, j.seq"
);

/// `HistoryStore::journal_from`: a page of `JOURNAL`, from `($2, $3)` (version, seq), at most
/// `$4` rows; `version >= $2` bounds the index range, the rest cuts its first version.
pub(crate) const JOURNAL_FROM: &str = concat!(
    "SELECT ",
    journal_cols!(),
    " FROM journal j LEFT JOIN outputs o ON j.output_external AND o.run_id = j.run_id \
     AND o.version = j.version AND o.seq = j.seq \
     WHERE j.run_id = $1 AND j.version >= $2 AND (j.version > $2 OR j.seq >= $3) \
     ORDER BY j.version, j.seq LIMIT $4"
);

/// One step, one statement: the compare-and-set on version and epoch (and no operator's
/// cancel waiting) is the `WHERE` of the update, and every other write hangs off its
/// `RETURNING`, so a stale writer, or one racing a cancel, writes nothing.
/// A commit to a final status also ends the lease (no release round trip after it).
/// Two variants: with and without a consumed signal (so a plain step does not touch
/// `signals` at all). A snapshot's state is bound once, as `$6`, for both the run row and
/// the transition's payload (`$16` is then `NULL`): serialized and parsed once.
macro_rules! commit_step {
    ($signal_check:literal, $signal_update:literal) => {
        concat!(
            "WITH upd AS (UPDATE runs SET version = $3 + 1, state_name = $5, \
             state = COALESCE($6::jsonb, state), \
             snapshot_version = CASE WHEN $6::jsonb IS NULL THEN snapshot_version ELSE $3 + 1 END, \
             status = $7, waiting_for = $8, wake_at = ms_to_ts($9), error_code = $10, \
             error_message = $11, claims_without_progress = 0, last_hash = $12, \
             patch_bytes = $13, updated_at = clock_timestamp(), \
             spend = COALESCE($17::jsonb, spend), \
             lease_owner = CASE WHEN $7 IN {final_statuses} THEN NULL ELSE lease_owner END, \
             lease_expires_at = CASE WHEN $7 IN {final_statuses} THEN NULL \
             ELSE lease_expires_at END \
             WHERE id = $1 AND epoch = $2 AND version = $3 AND cancel_requested_by IS NULL",
            $signal_check,
            " RETURNING id, version, status, epoch, lease_owner, lease_expires_at, updated_at), \
             tr AS (INSERT INTO transitions (run_id, version, from_state, to_state, kind, \
             status, epoch, created_at, hash, payload_kind, payload, waiting_for, wake_at, \
             error_code, error_message) \
             SELECT id, version, $4::text, $5::text, $14::text, status, epoch, updated_at, \
             $12::text, $15::text, COALESCE($16::jsonb, $6::jsonb), $8::text, ms_to_ts($9), \
             $10::text, $11::text FROM upd)",
            $signal_update,
            " SELECT lease_owner, ts_to_ms(lease_expires_at) AS lease_expires_at, \
             ts_to_ms(updated_at) AS updated_at FROM upd"
        )
    };
}

pub(crate) static COMMIT_STEP: LazyLock<String> =
    LazyLock::new(|| format!(commit_step!("", ""), final_statuses = final_statuses()));

pub(crate) static COMMIT_STEP_CONSUMING: LazyLock<String> = LazyLock::new(|| {
    format!(
        commit_step!(
            " AND EXISTS (SELECT 1 FROM signals WHERE id = $18 AND run_id = $1 \
             AND consumed_at_version IS NULL)",
            ", sig AS (UPDATE signals SET consumed_at_version = upd.version FROM upd \
             WHERE signals.id = $18 AND signals.run_id = upd.id)"
        ),
        final_statuses = final_statuses()
    )
});

/// Several runs' steps in one statement (group commit, `group_commit.rs`): the same writes as
/// [`COMMIT_STEP`] and [`COMMIT_STEP_CONSUMING`], one row of parameter arrays per commit,
/// each row fenced by its own compare-and-set on version and epoch (and, for a step that
/// consumes a signal, `$17`, on that signal still pending). A row that matches nothing
/// writes nothing and returns nothing; `n` (the commit's place in the arrays, from 1) says
/// which rows applied.
pub(crate) static COMMIT_STEPS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH i AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], \
     $5::text[], $6::jsonb[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], \
     $12::text[], $13::bigint[], $14::text[], $15::text[], $16::jsonb[], $17::bigint[], \
     $18::jsonb[]) \
     WITH ORDINALITY AS i(id, epoch, expected, from_state, to_state, snapshot, status, \
     waiting_for, wake_at, error_code, error_message, hash, patch_bytes, kind, payload_kind, \
     patch, signal, spend, n)), \
     upd AS (UPDATE runs SET version = i.expected + 1, state_name = i.to_state, \
     state = COALESCE(i.snapshot, runs.state), \
     snapshot_version = CASE WHEN i.snapshot IS NULL THEN runs.snapshot_version \
     ELSE i.expected + 1 END, \
     status = i.status, waiting_for = i.waiting_for, wake_at = ms_to_ts(i.wake_at), \
     error_code = i.error_code, error_message = i.error_message, claims_without_progress = 0, \
     last_hash = i.hash, patch_bytes = i.patch_bytes, updated_at = clock_timestamp(), \
     spend = COALESCE(i.spend, runs.spend), \
     lease_owner = CASE WHEN i.status IN {final_statuses} THEN NULL ELSE runs.lease_owner END, \
     lease_expires_at = CASE WHEN i.status IN {final_statuses} THEN NULL \
     ELSE runs.lease_expires_at END \
     FROM i WHERE runs.id = i.id AND runs.epoch = i.epoch AND runs.version = i.expected \
     AND runs.cancel_requested_by IS NULL \
     AND (i.signal IS NULL OR EXISTS (SELECT 1 FROM signals WHERE signals.id = i.signal \
       AND signals.run_id = i.id AND signals.consumed_at_version IS NULL)) \
     RETURNING i.n, runs.id, runs.version, runs.status, runs.epoch, runs.lease_owner, \
     runs.lease_expires_at, runs.updated_at, i.from_state, i.to_state, i.kind, i.hash, \
     i.payload_kind, COALESCE(i.patch, i.snapshot) AS payload, runs.waiting_for, \
     runs.wake_at, runs.error_code, runs.error_message, i.signal), \
     tr AS (INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, \
     epoch, created_at, hash, payload_kind, payload, waiting_for, wake_at, error_code, \
     error_message) \
     SELECT id, version, from_state, to_state, kind, status, epoch, updated_at, hash, \
     payload_kind, payload, waiting_for, wake_at, error_code, error_message FROM upd), \
     sig AS (UPDATE signals SET consumed_at_version = upd.version FROM upd \
     WHERE signals.id = upd.signal AND signals.run_id = upd.id) \
     SELECT n, lease_owner, ts_to_ms(lease_expires_at) AS lease_expires_at, \
     ts_to_ms(updated_at) AS updated_at FROM upd",
        final_statuses = final_statuses()
    )
});

pub(crate) const HISTORY: &str = "SELECT run_id, version, from_state, to_state, kind, status, epoch, \
     ts_to_ms(created_at) AS created_at, hash, note_by, note_reason FROM transitions \
     WHERE run_id = $1 ORDER BY version";

/// `HistoryStore::history_from`: a page of `HISTORY`, from version `$2`, at most `$3` rows.
pub(crate) const HISTORY_FROM: &str = "SELECT run_id, version, from_state, to_state, kind, \
     status, epoch, ts_to_ms(created_at) AS created_at, hash, note_by, note_reason \
     FROM transitions WHERE run_id = $1 AND version >= $2 ORDER BY version LIMIT $3";

/// The filter of `HistoryStore::list_runs`, `count_runs`, `count_versions` and
/// `count_label_values` (binds `$1`, `$2`,
/// `$4`-`$10`;
/// `$3` is the listing's limit).
macro_rules! runs_filter {
    () => {
        " FROM runs WHERE ($1::text IS NULL OR agent = $1) \
     AND (cardinality($2::text[]) = 0 OR status = ANY($2)) \
     AND ($4::bigint = 0 OR id IN (SELECT l.run_id FROM jsonb_each_text($5::jsonb) w \
       JOIN run_labels l ON l.key = w.key AND l.value = w.value \
       GROUP BY l.run_id HAVING count(*) = $4)) \
     AND ($6::text IS NULL OR spawned_by = $6) \
     AND ($7::bigint IS NULL OR ts_to_ms(created_at) >= $7) \
     AND ($8::bigint IS NULL OR ts_to_ms(created_at) < $8) \
     AND ($9::integer IS NULL OR agent_version = $9) \
     AND ($10::text IS NULL OR fingerprint = $10)"
    };
}

/// A run's creation time in milliseconds as the listing orders it: `ts_to_ms(created_at)`
/// written with immutable functions only, so that an index can hold it (`runs_listed`);
/// the text must stay the index's, for the planner to match the two.
macro_rules! listed_ms {
    () => {
        "(round(extract(epoch FROM (created_at AT TIME ZONE 'UTC')) * 1000)::bigint)"
    };
}

/// The listing's order, total: newest first by the millisecond, then by id as bytes
/// (`COLLATE "C"`, whatever the database's collation), as every store lists runs.
macro_rules! listed_order {
    () => {
        concat!(
            " ORDER BY ",
            listed_ms!(),
            " DESC, id COLLATE \"C\" DESC LIMIT $3"
        )
    };
}

/// `HistoryStore::list_runs` without `RunFilter::after`.
pub(crate) const LIST_RUNS: &str = concat!("SELECT ", run_cols!(), runs_filter!(), listed_order!());

/// `HistoryStore::list_runs` after a key (`$11` its milliseconds, `$12` its id): a seek in
/// `runs_listed`, so that a page reads its own rows, not the pages before it.
pub(crate) const LIST_RUNS_AFTER: &str = concat!(
    "SELECT ",
    run_cols!(),
    runs_filter!(),
    " AND (",
    listed_ms!(),
    ", id COLLATE \"C\") < ($11::bigint, $12::text)",
    listed_order!()
);

/// `HistoryStore::count_runs`: runs per status under the listing's filter (`$3` unused).
pub(crate) const COUNT_RUNS: &str = concat!(
    "SELECT status, count(*) AS n",
    runs_filter!(),
    " AND $3::bigint IS NULL GROUP BY status"
);

/// `HistoryStore::spend_by_day`: the runs of the listing's filter per agent and UTC day of
/// creation, with their spend (`jsonb`, absent where nothing was spent) summed (`$3` unused).
pub(crate) const SPEND_BY_DAY: &str = concat!(
    "SELECT agent, ts_to_ms(created_at) / 86400000 * 86400000 AS day, count(*) AS n, \
     COALESCE(sum((spend->>'input_tokens')::bigint), 0)::bigint AS input_tokens, \
     COALESCE(sum((spend->>'output_tokens')::bigint), 0)::bigint AS output_tokens, \
     COALESCE(sum((spend->>'cost_micros')::bigint), 0)::bigint AS cost_micros, \
     COALESCE(sum((spend->>'asks')::bigint), 0)::bigint AS asks, \
     COALESCE(sum((spend->>'tool_calls')::bigint), 0)::bigint AS tool_calls",
    runs_filter!(),
    " AND $3::bigint IS NULL GROUP BY agent, day ORDER BY agent COLLATE \"C\", day"
);

/// `HistoryStore::count_versions`: runs per agent version and fingerprint under the listing's
/// filter (`$3` unused).
pub(crate) const COUNT_VERSIONS: &str = concat!(
    "SELECT agent_version, fingerprint, count(*) AS n",
    runs_filter!(),
    " AND $3::bigint IS NULL GROUP BY agent_version, fingerprint \
     ORDER BY agent_version, fingerprint"
);

/// `HistoryStore::count_label_values`: the values of label `$11` on the runs of the
/// listing's filter (`$3` unused), by value as bytes, each with its runs and the newest
/// one's creation time.
pub(crate) const COUNT_LABEL_VALUES: &str = concat!(
    "SELECT l.value, count(*) AS n, max(r.ms) AS last_created_at FROM run_labels l \
     JOIN (SELECT id, ts_to_ms(created_at) AS ms",
    runs_filter!(),
    " AND $3::bigint IS NULL) r ON r.id = l.run_id WHERE l.key = $11::text \
     GROUP BY l.value ORDER BY l.value COLLATE \"C\""
);

/// Lock run `$1`'s row for an operator's action: nothing commits to it until the action's
/// transaction ends.
pub(crate) const LOCK_RUN: &str = "SELECT id FROM runs WHERE id = $1 FOR UPDATE";

/// `OperatorStore::cancel_run` under a live lease: the request, for the holder's next commit.
pub(crate) const REQUEST_CANCEL: &str = "UPDATE runs SET cancel_requested_by = $2, \
     cancel_reason = $3, updated_at = clock_timestamp() WHERE id = $1 \
     RETURNING ts_to_ms(updated_at) AS updated_at";

/// An operator's transition (`OperatorStore::cancel_run`, `terminate_run`, `accept_cancel`) inside
/// the transaction that locked the run: the new version, status and epoch (`$6`), the lease
/// kept (`$7`) or ended, the request cleared, and the transition with its note.
pub(crate) const OPERATOR_TRANSITION: &str = "WITH upd AS (UPDATE runs SET version = $2, \
     status = $3, error_code = $4, error_message = $5, epoch = $6, waiting_for = NULL, \
     wake_at = NULL, lease_owner = CASE WHEN $7 THEN lease_owner ELSE NULL END, \
     lease_expires_at = CASE WHEN $7 THEN lease_expires_at ELSE NULL END, \
     claims_without_progress = 0, last_hash = $8, patch_bytes = $9, \
     updated_at = clock_timestamp(), state = COALESCE($10::jsonb, state), \
     snapshot_version = CASE WHEN $10::jsonb IS NULL THEN snapshot_version ELSE $2 END, \
     cancel_requested_by = NULL, cancel_reason = NULL \
     WHERE id = $1 AND version = $2 - 1 \
     RETURNING id, version, status, epoch, lease_owner, lease_expires_at, updated_at), \
     tr AS (INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, \
     epoch, created_at, hash, payload_kind, payload, note_by, note_reason, error_code, \
     error_message) \
     SELECT id, version, $11::text, $12::text, $13::text, status, epoch, updated_at, $8::text, \
     $14::text, COALESCE($15::jsonb, $10::jsonb), $16::text, $17::text, $4::text, $5::text \
     FROM upd) \
     SELECT lease_owner, ts_to_ms(lease_expires_at) AS lease_expires_at, \
     ts_to_ms(updated_at) AS updated_at, pg_notify($18, id) AS notified FROM upd";

/// Sent under the run's row lock, as every write to a run: see [`RECORD_ENTRY`]. Without a
/// notification: the store wakes workers after the commit (`wake.rs`).
pub(crate) const SEND_SIGNAL: &str = "INSERT INTO signals (run_id, name, payload) \
     SELECT id, $2::text, $3::jsonb FROM runs WHERE id = $1 FOR NO KEY UPDATE \
     RETURNING id";

/// [`SEND_SIGNAL`] under dedup key `$4`, unless the run has a signal under it (the unique
/// index `signals_dedup`, which also decides between concurrent senders, whom the run
/// row's lock puts in line): no row then, as for no such run.
pub(crate) const SEND_SIGNAL_ONCE: &str = "INSERT INTO signals (run_id, name, payload, dedup_key) \
     SELECT id, $2::text, $3::text::jsonb, $4::text FROM runs WHERE id = $1 FOR NO KEY UPDATE \
     ON CONFLICT (run_id, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING \
     RETURNING id";

pub(crate) const SIGNAL_BY_KEY: &str =
    "SELECT id FROM signals WHERE run_id = $1 AND dedup_key = $2";

/// Several signals to different runs in one statement (group commit, `group_commit.rs`):
/// the same write as [`SEND_SIGNAL`] for each, one row of parameter arrays per signal (one
/// signal per run at most). The run rows are locked in the order of their ids, as by
/// [`RECORD_ENTRIES`], so that two such statements never wait for each other in a cycle.
/// A signal to a run that does not exist writes nothing and returns nothing; `n` (the
/// signal's place in the arrays, from 1) says which were stored, and `id` under which id.
pub(crate) const SEND_SIGNALS: &str = "WITH i AS (SELECT * FROM unnest($1::text[], \
       $2::text[], $3::jsonb[]) WITH ORDINALITY AS i(run_id, name, payload, n)), \
     fence AS (SELECT id FROM runs WHERE id IN (SELECT run_id FROM i) ORDER BY id \
       FOR NO KEY UPDATE), \
     s AS (INSERT INTO signals (run_id, name, payload) \
       SELECT i.run_id, i.name, i.payload FROM i JOIN fence ON fence.id = i.run_id \
       ORDER BY i.n RETURNING id, run_id) \
     SELECT i.n, s.id FROM s JOIN i ON i.run_id = s.run_id";

pub(crate) const PENDING_SIGNALS: &str = "SELECT id, run_id, name, payload, \
     ts_to_ms(created_at) AS created_at, consumed_at_version FROM signals \
     WHERE run_id = $1 AND consumed_at_version IS NULL ORDER BY id";

/// Signal `$2` of run `$1`, consumed or not (`OperatorStore::drop_signal` reads it under the run's
/// row lock).
pub(crate) const SIGNAL_OF_RUN: &str = "SELECT id, run_id, name, payload, \
     ts_to_ms(created_at) AS created_at, consumed_at_version FROM signals \
     WHERE run_id = $1 AND id = $2";

/// `OperatorStore::drop_signal` after its operator's transition `$4`: the run's wait put back on
/// the row and on the transition (which [`OPERATOR_TRANSITION`] clears), and signal `$5`
/// marked consumed at that version.
pub(crate) const KEEP_WAIT_DROP_SIGNAL: &str = "WITH upd AS (UPDATE runs SET waiting_for = $2, \
     wake_at = ms_to_ts($3) WHERE id = $1 AND version = $4 RETURNING id), \
     tr AS (UPDATE transitions SET waiting_for = $2, wake_at = ms_to_ts($3) \
     FROM upd WHERE transitions.run_id = upd.id AND transitions.version = $4) \
     UPDATE signals SET consumed_at_version = $4 WHERE id = $5 AND run_id = $1";

/// `RunStore::quarantine`: fenced by the epoch, no version written, the lease ended.
pub(crate) const QUARANTINE_UNDER_LEASE: &str = concat!(
    "WITH upd AS (UPDATE runs SET status = 'quarantined', error_code = $3, error_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = clock_timestamp() \
     WHERE id = $1 AND epoch = $2 RETURNING ",
    run_cols!(),
    "), ch AS (INSERT INTO status_changes (run_id, version, status, error_code, error_message) \
     SELECT id, version, status, error_code, error_message FROM upd) SELECT * FROM upd"
);

pub(crate) const SET_STATUS: &str = concat!(
    "WITH upd AS (UPDATE runs SET status = $2, \
     error_code = CASE WHEN $2 = 'running' THEN NULL ELSE $3 END, \
     error_message = CASE WHEN $2 = 'running' THEN NULL ELSE $4 END, \
     claims_without_progress = CASE WHEN $2 = 'running' THEN 0 ELSE claims_without_progress END, \
     wake_at = CASE WHEN $2 = 'running' THEN NULL ELSE wake_at END, \
     updated_at = clock_timestamp() \
     WHERE id = $1 AND NOT (lease_owner IS NOT NULL AND lease_expires_at > clock_timestamp()) \
     RETURNING ",
    run_cols!(),
    "), ch AS (INSERT INTO status_changes (run_id, version, status, error_code, error_message) \
     SELECT id, version, status, error_code, error_message FROM upd) \
     SELECT upd.*, pg_notify($5, upd.id) AS notified FROM upd"
);

/// `OperatorStore::set_budget`: the run's budget `$2` (JSON text or `NULL`).
pub(crate) const SET_BUDGET: &str = concat!(
    "UPDATE runs SET budget = $2::jsonb WHERE id = $1 RETURNING ",
    run_cols!()
);

pub(crate) const SET_TOOL: &str = "INSERT INTO tool_switches (tool, enabled, reason) VALUES ($1, $2, $3) \
     ON CONFLICT (tool) DO UPDATE SET enabled = EXCLUDED.enabled, reason = EXCLUDED.reason, \
     updated_at = clock_timestamp()";

pub(crate) const TOOL_SWITCHES: &str = "SELECT tool, enabled, reason, ts_to_ms(updated_at) AS updated_at \
     FROM tool_switches ORDER BY tool";

/// The last event position drawn: every position drawn so far is at or below the
/// sequence's last value (one below it while it was never drawn from: `last_value` is then
/// the next).
pub(crate) const LAST_POSITION: &str =
    "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM event_positions";

pub(crate) const STORAGE_BYTES: &str = "SELECT \
     (SELECT COALESCE(sum(pg_column_size(t.*)), 0) FROM transitions t WHERE t.run_id = $1) \
   + (SELECT COALESCE(sum(pg_column_size(j.*)), 0) FROM journal j WHERE j.run_id = $1) \
   + (SELECT COALESCE(sum(pg_column_size(o.*)), 0) FROM outputs o WHERE o.run_id = $1) \
   + (SELECT COALESCE(sum(pg_column_size(r.*)), 0) FROM runs r WHERE r.id = $1)";

/// Per-tool statistics of finished calls started at or after `$1` (ms); percentiles by
/// nearest rank, like `agent_core::store::compute_tool_stats`.
pub(crate) const TOOL_STATS: &str = "WITH calls AS (SELECT name, kind, status, duration_ms, \
       COALESCE(error_code, 'unknown') AS code FROM journal \
       WHERE started_at >= ms_to_ts($1) AND status <> 'started'), \
     agg AS (SELECT name, kind, count(*) AS calls, \
       count(*) FILTER (WHERE status = 'failed') AS failures, \
       avg(duration_ms)::float8 AS avg_ms, \
       percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50_ms, \
       percentile_disc(0.99) WITHIN GROUP (ORDER BY duration_ms) AS p99_ms \
       FROM calls GROUP BY name, kind), \
     errs AS (SELECT name, kind, jsonb_object_agg(code, n) AS by_code FROM ( \
       SELECT name, kind, code, count(*) AS n FROM calls WHERE status = 'failed' \
       GROUP BY name, kind, code) x GROUP BY name, kind) \
     SELECT agg.name, agg.kind, agg.calls, agg.failures, agg.avg_ms, agg.p50_ms, agg.p99_ms, \
       errs.by_code FROM agg LEFT JOIN errs ON errs.name = agg.name AND errs.kind = agg.kind \
     ORDER BY agg.name COLLATE \"C\", agg.kind COLLATE \"C\"";

/// `OperatorStore::repair_run`'s compare-and-set: the run still in the planned status (`$12`)
/// at the planned epoch and last stored version, no live lease; the row rewritten from the
/// restored or edited state, and the transition (kind `$13`, `repair` or `edited`) inserted
/// off its `RETURNING` (nothing when the row did not match).
pub(crate) const REPAIR_RUN: &str = "WITH upd AS (UPDATE runs SET state = $2::jsonb, \
     state_name = $3, version = $4, snapshot_version = $4, status = 'running', \
     waiting_for = NULL, wake_at = NULL, error_code = NULL, error_message = NULL, epoch = $5, \
     lease_owner = NULL, lease_expires_at = NULL, claims_without_progress = 0, \
     last_hash = $6, patch_bytes = 0, cancel_requested_by = NULL, cancel_reason = NULL, \
     updated_at = clock_timestamp() \
     WHERE id = $1 AND status = $12 AND epoch = $7 \
     AND (lease_owner IS NULL OR lease_expires_at <= clock_timestamp()) \
     AND (SELECT max(version) FROM transitions WHERE run_id = $1) = $8 \
     RETURNING id, version, epoch, updated_at, state) \
     INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, epoch, \
     created_at, hash, payload_kind, payload, note_by, note_reason) \
     SELECT id, version, $9, $3, $13, 'running', epoch, updated_at, $6, 'snapshot', state, \
     $10, $11 FROM upd";

/// `RunStore::migrate_run`, after [`OPERATOR_TRANSITION`] wrote the `migrated` version in the
/// same transaction: the run row's agent version (`$2`), fingerprint (`$3`), the version
/// migrated at (`$4`) and the resume base (`$5`), what the run waits for (`$6`, `$7`), on
/// the row and on the transition (for its events), and the mapped state's name (`$8`: an
/// operator's transition keeps the run's).
pub(crate) const MIGRATED_ROW: &str = "WITH upd AS (UPDATE runs SET agent_version = $2, \
     state_name = $8, \
     fingerprint = $3, migrated_at_version = $4, resume_base = $5, waiting_for = $6, \
     wake_at = ms_to_ts($7) WHERE id = $1 AND version = $4 RETURNING id) \
     UPDATE transitions SET waiting_for = $6, wake_at = ms_to_ts($7) \
     FROM upd WHERE transitions.run_id = upd.id AND transitions.version = $4";

/// `SqlReads::run_events_sql`.
pub(crate) static RUN_EVENTS: LazyLock<String> =
    LazyLock::new(|| event_statement(PG, "{a}.run_id = $1::text"));

/// `SqlReads::scope_events_sql`.
pub(crate) static SCOPE_EVENTS: LazyLock<String> =
    LazyLock::new(|| event_statement(PG, "($1::text IS NULL OR r.agent = $1::text)"));

/// How event statements are written on PostgreSQL.
const PG: Dialect = Dialect {
    ms: "ts_to_ms",
    is_true: "",
    typed: true,
};

/// `OperatorStore::prune`'s candidates ([`agent_sql::sql::prune_candidates`]).
pub(crate) static PRUNE_CANDIDATES: LazyLock<String> =
    LazyLock::new(|| agent_sql::sql::prune_candidates("ms_to_ts($3)"));

/// The final runs retention deletes ([`agent_sql::sql::expired_runs`]).
pub(crate) static EXPIRED_RUNS: LazyLock<String> =
    LazyLock::new(|| agent_sql::sql::expired_runs("ms_to_ts($1)"));

/// Retention's writes ([`agent_sql::sql::RetentionSql`]): ids, cutoffs and states bound
/// as arrays.
pub(crate) static RETENTION: LazyLock<RetentionSql> = LazyLock::new(|| {
    RetentionSql::new(
        "= ANY($1)",
        "ms_to_ts($2)",
        "unnest($1::text[], $2::bigint[]) AS c(id, cutoff)",
        "unnest($1::text[], $2::bigint[], $3::jsonb[]) AS c(id, cutoff, state)",
    )
});
