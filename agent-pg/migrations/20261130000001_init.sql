-- The schema of agent-pg. Applied by `PgStore::migrate()` into the store's own schema (the
-- connection's search_path), so unqualified names below land there. Never edit once
-- released: add a new timestamped file instead.

-- Millisecond conversions used by the store's queries (the Rust side speaks milliseconds).
CREATE FUNCTION ms_to_ts(ms bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT to_timestamp(ms / 1000.0) $$;

CREATE FUNCTION ts_to_ms(ts timestamptz) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT round(extract(epoch FROM ts) * 1000)::bigint $$;

-- Each agent's graph, stored when the agent is first used, so tools without the agent's code
-- (agentctl) can draw it.
CREATE TABLE agents (
    agent         text        NOT NULL,
    fingerprint   text        NOT NULL,
    graph         jsonb       NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    seq           bigserial   NOT NULL,
    PRIMARY KEY (agent, fingerprint)
);

-- One row per run: its current state and version, status, and lease.
CREATE TABLE runs (
    id                      text        PRIMARY KEY,
    agent                   text        NOT NULL,
    fingerprint             text        NOT NULL,
    state_name              text        NOT NULL,
    state                   jsonb       NOT NULL,
    version                 bigint      NOT NULL DEFAULT 0,
    status                  text        NOT NULL DEFAULT 'running',
    waiting_for             text,
    wake_at                 timestamptz,
    error_code              text,
    error_message           text,
    -- Lease: the fencing epoch increases on every claim; commits check it.
    epoch                   bigint      NOT NULL DEFAULT 0,
    lease_owner             text,
    lease_expires_at        timestamptz,
    claims_without_progress integer     NOT NULL DEFAULT 0,
    parent_id               text,
    parent_version          bigint,
    -- What makes a repeated create_run "the same run" (agent_core::store::creation_hash).
    creation_hash           text        NOT NULL,
    -- Hash of the latest transition, the head of the chain.
    last_hash               text        NOT NULL,
    -- Patch bytes written since the last snapshot (agent_core::store::history::encode).
    patch_bytes             bigint      NOT NULL DEFAULT 0,
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    seq                     bigserial   NOT NULL
);

-- claim_next: runnable or possibly-waking runs, oldest first.
CREATE INDEX runs_claimable ON runs (created_at, seq)
    WHERE status IN ('running', 'compensating', 'waiting');
-- list_runs by status / by agent, newest first.
CREATE INDEX runs_status ON runs (status, created_at DESC);
CREATE INDEX runs_agent ON runs (agent, created_at DESC);
-- Which worker holds which lease.
CREATE INDEX runs_lease_owner ON runs (lease_owner, lease_expires_at)
    WHERE lease_owner IS NOT NULL;
-- Forks of a run.
CREATE INDEX runs_parent ON runs (parent_id, parent_version) WHERE parent_id IS NOT NULL;

-- One row per committed version: the transition record and the state, stored as a JSON
-- Patch from the previous version or, spaced by size, a full snapshot.
CREATE TABLE transitions (
    run_id       text        NOT NULL,
    version      bigint      NOT NULL,
    from_state   text        NOT NULL,
    to_state     text        NOT NULL,
    kind         text        NOT NULL,
    status       text        NOT NULL,
    epoch        bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    hash         text        NOT NULL,
    payload_kind text        NOT NULL,
    payload      jsonb       NOT NULL,
    PRIMARY KEY (run_id, version)
);
-- state_at: the nearest snapshot at or before a version.
CREATE INDEX transitions_snapshots ON transitions (run_id, version)
    WHERE payload_kind = 'snapshot';

-- The journal: every tool call, router decision and compensation, recorded before the step
-- commits. Keyed by the version the step started from and the call's index in the step.
CREATE TABLE journal (
    run_id          text        NOT NULL,
    version         bigint      NOT NULL,
    seq             integer     NOT NULL,
    kind            text        NOT NULL,
    state           text        NOT NULL,
    name            text        NOT NULL,
    tool_kind       text,
    input_hash      text        NOT NULL,
    input           jsonb       NOT NULL,
    idempotency_key text,
    status          text        NOT NULL,
    -- Small outputs inline; large ones in `outputs` (output_external) with a summary here.
    output          jsonb,
    output_external boolean     NOT NULL DEFAULT false,
    output_summary  text,
    output_bytes    integer,
    error_class     text,
    error_code      text,
    error_message   text,
    attempts        integer     NOT NULL,
    duration_ms     bigint      NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    -- The state version the call belongs to and the one its step creates.
    version_after   bigint      GENERATED ALWAYS AS (version + 1) STORED,
    PRIMARY KEY (run_id, version, seq)
);
-- Per-tool latency statistics over a time window.
CREATE INDEX journal_tool_started ON journal (name, started_at) WHERE kind <> 'decision';
-- Failures by error code in a time window.
CREATE INDEX journal_failures ON journal (started_at, error_code) WHERE status = 'failed';
-- Timed-out calls to replay.
CREATE INDEX journal_timeouts ON journal (started_at) WHERE error_class = 'timeout';
-- Look a write up by its idempotency key.
CREATE INDEX journal_idempotency ON journal (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Large tool outputs, out of the journal's hot pages.
CREATE TABLE outputs (
    run_id  text    NOT NULL,
    version bigint  NOT NULL,
    seq     integer NOT NULL,
    output  jsonb   NOT NULL,
    PRIMARY KEY (run_id, version, seq)
);

-- Signals, kept until a step consumes them.
CREATE TABLE signals (
    id                  bigserial   PRIMARY KEY,
    run_id              text        NOT NULL,
    name                text        NOT NULL,
    payload             jsonb       NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    consumed_at_version bigint
);
CREATE INDEX signals_pending ON signals (run_id, name, id) WHERE consumed_at_version IS NULL;

-- The tool registry (kill switch). Tools without a row are enabled.
CREATE TABLE tool_switches (
    tool       text        PRIMARY KEY,
    enabled    boolean     NOT NULL,
    reason     text,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
