#!/usr/bin/env bash
# What a transition costs the PostgreSQL server, by part: the store's commit statement
# against the benchmark's floor, and against the same statement with either of its two rows
# as narrow as the floor's. pgbench (a C client) drives them, so the client's cost hardly
# counts; each variant starts from empty tables, and rounds rotate the order.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres agent-pg/benches/server-cost/run.sh
#
# Needs pgbench and psql. "Machine CPU" is the busy time of the whole machine per
# transaction (/proc/stat: the server and pgbench, and anything else running), meaningful
# when the server runs here and the machine is otherwise quiet. (Backends exit with
# pgbench's connections, so their own counters cannot be read after a run.)
# The statements mirror agent_pg's COMMIT_STEP (sql.rs) and the floor of
# benches/store_throughput.rs, with literals for the parameters and `version = version + 1`
# for the compare-and-set (pgbench keeps no state between transactions); the `epoch` check
# stays.
set -euo pipefail
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL server}"
for tool in psql pgbench; do
    command -v "$tool" >/dev/null || { echo "$tool not found: install the PostgreSQL client tools" >&2; exit 1; }
done
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
ROUNDS="${ROUNDS:-3}"
CLIENTS=32
migrations="$(cd "$(dirname "$0")/../../migrations" && pwd)"
schema="server_cost_$$"
work="$(mktemp -d)"
q() { psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 "$@"; }
trap 'q -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; rm -rf "$work"' EXIT

{
    echo "CREATE SCHEMA $schema; SET search_path TO $schema;"
    for m in "$migrations"/*.sql; do echo "\\i $m"; done
    cat <<SQL
CREATE TABLE floor_runs (id text PRIMARY KEY, version bigint NOT NULL, state jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE floor_transitions (run_id text NOT NULL, version bigint NOT NULL,
    from_state text NOT NULL, to_state text NOT NULL, created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, version));
INSERT INTO floor_runs SELECT 'r' || i, 0, '{}' FROM generate_series(1, $CLIENTS) i;
INSERT INTO runs (id, agent, fingerprint, state_name, state, creation_hash, last_hash, epoch,
    lease_owner, lease_expires_at)
  SELECT 'r' || i, 'Bench', 'fp', 'Browsing', '{}', 'x', 'y', 1, 'w',
    clock_timestamp() + interval '1 day' FROM generate_series(1, $CLIENTS) i;
SQL
} > "$work/setup.sql"
q -f "$work/setup.sql" >/dev/null

S='{"cart":["apple","pear","plum"],"step":5,"note":"step 5"}'
H=$(printf '%064d' 0)
id="'r' || :n"
run_full="UPDATE $schema.runs SET version = version + 1, state_name = 'Browsing',
  state = COALESCE('$S'::jsonb, state), snapshot_version = version + 1, status = 'running',
  waiting_for = NULL, wake_at = $schema.ms_to_ts(NULL), error_code = NULL, error_message = NULL,
  claims_without_progress = 0, last_hash = '$H', patch_bytes = 0, updated_at = clock_timestamp()
  WHERE id = $id AND epoch = 1
  RETURNING id, version, status, epoch, lease_owner, lease_expires_at, updated_at"
run_narrow="UPDATE $schema.runs SET version = version + 1, state = '$S'::jsonb,
  updated_at = clock_timestamp() WHERE id = $id AND epoch = 1
  RETURNING id, version, status, epoch, lease_owner, lease_expires_at, updated_at"
tr_full="INSERT INTO $schema.transitions (run_id, version, from_state, to_state, kind, status,
  epoch, created_at, hash, payload_kind, payload)
  SELECT id, version, 'Browsing', 'Browsing', 'step', status, epoch, updated_at, '$H',
  'snapshot', '$S'::jsonb FROM upd"
tr_narrow="INSERT INTO $schema.floor_transitions (run_id, version, from_state, to_state, created_at)
  SELECT id, version, 'Browsing', 'Browsing', updated_at FROM upd"
answer="SELECT lease_owner, $schema.ts_to_ms(lease_expires_at) AS lease_expires_at,
  $schema.ts_to_ms(updated_at) AS updated_at FROM upd"
script() { printf '\\set n :client_id + 1\n%s;\n' "$(echo "$2" | tr '\n' ' ')" > "$work/$1.sql"; }
script floor "WITH upd AS (UPDATE $schema.floor_runs SET version = version + 1, state = '$S'::jsonb,
  updated_at = clock_timestamp() WHERE id = $id RETURNING id, version, updated_at) $tr_narrow"
script commit "WITH upd AS ($run_full), tr AS ($tr_full) $answer"
script commit_narrow_run "WITH upd AS ($run_narrow), tr AS ($tr_full) $answer"
script commit_narrow_transition "WITH upd AS ($run_full), tr AS ($tr_narrow) $answer"
variants=(floor commit commit_narrow_run commit_narrow_transition)

busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat 2>/dev/null || echo 0; }
reset() {
    q -c "TRUNCATE $schema.transitions, $schema.floor_transitions" \
      -c "UPDATE $schema.runs SET version = 0" -c "UPDATE $schema.floor_runs SET version = 0" \
      -c "VACUUM $schema.runs" -c "VACUUM $schema.floor_runs" -c "CHECKPOINT" >/dev/null
}
declare -A tps cpu
echo "PostgreSQL $(q -Atc 'SHOW server_version'), $CLIENTS clients, ${SECONDS_PER_RUN}s per run, $ROUNDS rounds"
for ((round = 0; round < ROUNDS; round++)); do
    for ((k = 0; k < ${#variants[@]}; k++)); do
        v=${variants[$(((k + round) % ${#variants[@]}))]}
        reset
        before=$(busy_ticks)
        out=$(pgbench "$DATABASE_URL" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" -f "$work/$v.sql" 2>&1) \
            || { echo "$out" >&2; exit 1; }
        after=$(busy_ticks)
        tx=$(echo "$out" | awk -F': ' '/actually processed/ { split($2, a, "/"); print a[1] }')
        tps[$v,$round]=$(echo "$out" | awk '/^tps/ { printf "%.0f", $3 }')
        cpu[$v,$round]=$(( (after - before) * 1000000 / $(getconf CLK_TCK) / (tx > 0 ? tx : 1) ))
    done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf '%-26s %10s %8s %22s\n' variant "tx/s" "vs floor" "machine CPU µs/tx"
for v in "${variants[@]}"; do
    ratios=(); ts=(); cs=()
    for ((round = 0; round < ROUNDS; round++)); do
        ratios+=("$(awk -v a="${tps[$v,$round]}" -v b="${tps[floor,$round]}" 'BEGIN { printf "%.3f", a / b }')")
        ts+=("${tps[$v,$round]}"); cs+=("${cpu[$v,$round]}")
    done
    printf '%-26s %10s %8s %22s\n' "$v" "$(median "${ts[@]}")" "$(median "${ratios[@]}")" "$(median "${cs[@]}")"
done
echo "(medians over the rounds; the ratio is taken within each round)"
