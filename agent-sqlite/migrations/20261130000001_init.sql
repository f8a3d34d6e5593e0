-- The schema of agent-sqlite: the same model as agent-pg, with times as INTEGER
-- milliseconds since the Unix epoch and JSON as TEXT. Never edit once released: add a new
-- timestamped file instead.

CREATE TABLE agents (
    agent         TEXT    NOT NULL,
    fingerprint   TEXT    NOT NULL,
    graph         TEXT    NOT NULL,
    registered_at INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    PRIMARY KEY (agent, fingerprint)
);

CREATE TABLE runs (
    id                      TEXT    PRIMARY KEY,
    agent                   TEXT    NOT NULL,
    fingerprint             TEXT    NOT NULL,
    state_name              TEXT    NOT NULL,
    state                   TEXT    NOT NULL,
    version                 INTEGER NOT NULL DEFAULT 0,
    status                  TEXT    NOT NULL DEFAULT 'running',
    waiting_for             TEXT,
    wake_at                 INTEGER,
    error_code              TEXT,
    error_message           TEXT,
    epoch                   INTEGER NOT NULL DEFAULT 0,
    lease_owner             TEXT,
    lease_expires_at        INTEGER,
    claims_without_progress INTEGER NOT NULL DEFAULT 0,
    parent_id               TEXT,
    parent_version          INTEGER,
    creation_hash           TEXT    NOT NULL,
    last_hash               TEXT    NOT NULL,
    patch_bytes             INTEGER NOT NULL DEFAULT 0,
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL,
    seq                     INTEGER NOT NULL
);
CREATE INDEX runs_claimable ON runs (created_at, seq)
    WHERE status IN ('running', 'compensating', 'waiting');
CREATE INDEX runs_status ON runs (status, created_at DESC);
CREATE INDEX runs_agent ON runs (agent, created_at DESC);
CREATE INDEX runs_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE transitions (
    run_id       TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    from_state   TEXT    NOT NULL,
    to_state     TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    epoch        INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    hash         TEXT    NOT NULL,
    payload_kind TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    PRIMARY KEY (run_id, version)
) WITHOUT ROWID;

CREATE TABLE journal (
    run_id          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    seq             INTEGER NOT NULL,
    kind            TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    tool_kind       TEXT,
    input_hash      TEXT    NOT NULL,
    input           TEXT    NOT NULL,
    idempotency_key TEXT,
    status          TEXT    NOT NULL,
    output          TEXT,
    output_external INTEGER NOT NULL DEFAULT 0,
    output_summary  TEXT,
    output_bytes    INTEGER,
    error_class     TEXT,
    error_code      TEXT,
    error_message   TEXT,
    attempts        INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    started_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    PRIMARY KEY (run_id, version, seq)
);
CREATE INDEX journal_tool_started ON journal (name, started_at) WHERE kind <> 'decision';
CREATE INDEX journal_failures ON journal (started_at, error_code) WHERE status = 'failed';
CREATE INDEX journal_timeouts ON journal (started_at) WHERE error_class = 'timeout';

CREATE TABLE outputs (
    run_id  TEXT    NOT NULL,
    version INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    output  TEXT    NOT NULL,
    PRIMARY KEY (run_id, version, seq)
);

CREATE TABLE signals (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id              TEXT    NOT NULL,
    name                TEXT    NOT NULL,
    payload             TEXT    NOT NULL,
    created_at          INTEGER NOT NULL,
    consumed_at_version INTEGER
);
CREATE INDEX signals_pending ON signals (run_id, name, id) WHERE consumed_at_version IS NULL;

CREATE TABLE tool_switches (
    tool       TEXT    PRIMARY KEY,
    enabled    INTEGER NOT NULL,
    reason     TEXT,
    updated_at INTEGER NOT NULL
);
