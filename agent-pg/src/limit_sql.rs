//! The flow-control role's statements in PostgreSQL ([`agent_sql::limits`]). Each change
//! is one `UPDATE` of the limit's row: its lock orders the workers that take at once.

/// A limit's rate, in units per millisecond.
macro_rules! rate {
    () => {
        "(CAST(amount AS double precision) / period_ms)"
    };
}

/// Its level at `$3`, refilled since `at` up to the burst.
macro_rules! level_now {
    () => {
        concat!(
            "LEAST(CAST(burst AS double precision), level + GREATEST(0, CAST($3 AS bigint) - at) * ",
            rate!(),
            ")"
        )
    };
}

macro_rules! limit_cols {
    () => {
        concat!(
            "name, ",
            rate!(),
            " AS rate, CAST(burst AS double precision) AS burst, level, at"
        )
    };
}

pub(crate) const DEFINE_LIMIT: &str = "INSERT INTO rate_limits \
     (name, amount, period_ms, burst, level, at) VALUES ($1, CAST($2 AS bigint), CAST($3 AS bigint), CAST($4 AS bigint), \
     CAST($4 AS bigint), CAST($5 AS bigint)) \
     ON CONFLICT (name) DO UPDATE SET amount = excluded.amount, \
     period_ms = excluded.period_ms, burst = excluded.burst, \
     level = LEAST(rate_limits.level, excluded.burst)";

pub(crate) const TAKE_CAPACITY: &str = concat!(
    "UPDATE rate_limits SET level = ",
    level_now!(),
    " - CAST($2 AS bigint), at = GREATEST(at, CAST($3 AS bigint)) WHERE name = $1 RETURNING ",
    limit_cols!()
);

pub(crate) const PAUSE_LIMIT: &str = concat!(
    "UPDATE rate_limits SET level = LEAST(",
    level_now!(),
    ", -(CAST($2 AS bigint) * ",
    rate!(),
    ")), at = GREATEST(at, CAST($3 AS bigint)) WHERE name = $1"
);

pub(crate) const LIMITS: &str = concat!(
    "SELECT ",
    limit_cols!(),
    " FROM rate_limits ORDER BY name COLLATE \"C\""
);
