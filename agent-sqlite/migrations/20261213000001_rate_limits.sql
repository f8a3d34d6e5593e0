-- Rate limits every worker draws from (`LimitStore`): one token bucket per limit, `amount`
-- units per `period_ms`, at most `burst` at once; `level` is what it held at `at` (epoch
-- milliseconds), below zero when units were taken ahead or a provider paused it.
CREATE TABLE rate_limits (
    name      TEXT PRIMARY KEY,
    amount    INTEGER NOT NULL CHECK (amount > 0),
    period_ms INTEGER NOT NULL CHECK (period_ms > 0),
    burst     INTEGER NOT NULL CHECK (burst > 0),
    level     REAL NOT NULL,
    at        INTEGER NOT NULL
);

-- A running run handed back until a rate limit has room for it is due at its `wake_at`,
-- and found by `runs_waiting_wake`: `runs_unleased` leaves out runs with a timer, so that
-- ten thousand runs waiting for capacity are not read by every claim.
DROP INDEX runs_unleased;
CREATE INDEX runs_unleased ON runs (created_at, seq)
    WHERE status IN ('running', 'compensating') AND lease_owner IS NULL AND wake_at IS NULL;
