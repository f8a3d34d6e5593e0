//! The flow-control role's statements in SQLite ([`agent_sql::limits`]). Each change
//! is one `UPDATE` of the limit's row: its lock orders the workers that take at once.

/// A limit's rate, in units per millisecond.
macro_rules! rate {
    () => {
        "(CAST(amount AS REAL) / period_ms)"
    };
}

/// Its level at `$3`, refilled since `at` up to the burst.
macro_rules! level_now {
    () => {
        concat!(
            "MIN(CAST(burst AS REAL), level + MAX(0, $3 - at) * ",
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
            " AS rate, CAST(burst AS REAL) AS burst, level, at"
        )
    };
}

pub(crate) const DEFINE_LIMIT: &str = "INSERT INTO rate_limits \
     (name, amount, period_ms, burst, level, at) VALUES ($1, $2, $3, $4, $4, $5) \
     ON CONFLICT (name) DO UPDATE SET amount = excluded.amount, \
     period_ms = excluded.period_ms, burst = excluded.burst, \
     level = MIN(rate_limits.level, excluded.burst)";

pub(crate) const TAKE_CAPACITY: &str = concat!(
    "UPDATE rate_limits SET level = ",
    level_now!(),
    " - $2, at = MAX(at, $3) WHERE name = $1 RETURNING ",
    limit_cols!()
);

pub(crate) const PAUSE_LIMIT: &str = concat!(
    "UPDATE rate_limits SET level = MIN(",
    level_now!(),
    ", -($2 * ",
    rate!(),
    ")), at = MAX(at, $3) WHERE name = $1"
);

pub(crate) const LIMITS: &str =
    concat!("SELECT ", limit_cols!(), " FROM rate_limits ORDER BY name");
