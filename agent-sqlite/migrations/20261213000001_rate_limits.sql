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

-- `runs_unleased` keeps the runs with a timer here (on PostgreSQL it leaves them out): a
-- same-status commit assigns `wake_at`, and SQLite rewrites every index whose definition
-- names an assigned column, so an index naming `wake_at` would be rewritten by every step
-- (a quarter of the throughput with 64 runs in flight). The claim filters them instead.
