//! The database the crate's unit tests use.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

/// The options of `DATABASE_URL`, or `None` when it is unset: the test is then skipped,
/// except under CI, where it fails (the integration tests say so loudly too).
pub(crate) fn options() -> Option<PgConnectOptions> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var("CI").is_err(),
            "DATABASE_URL is not set under CI"
        );
        return None;
    };
    Some(PgConnectOptions::from_str(&url).expect("DATABASE_URL does not parse"))
}
