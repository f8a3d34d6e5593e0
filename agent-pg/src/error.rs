//! The driver's errors as the store's: which are transient, and what a reader is told.

use agent_core::store::{BackendError, StoreError};
use sqlx::postgres::PgDatabaseError;

/// Map a driver error: connection-level failures are transient ([`StoreError::Unavailable`]).
// By value: it is passed to `map_err` as a function.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            c.starts_with("08")
                || c.starts_with("57P")
                || c.starts_with("53")
                || c == "40001"
                || c == "40P01"
                || c == "25006"
        }),
        _ => false,
    };
    if transient {
        StoreError::Unavailable(BackendError::with_source(describe(&e), e))
    } else {
        StoreError::Backend(BackendError::with_source(describe(&e), e))
    }
}

/// A driver error as a sentence: for an error the server sent, its message with its detail
/// and hint, without sqlx's "error returned from database" and without the server's
/// source position (`at line 334`), which says where in PostgreSQL's C code it was raised
/// and nothing to the reader.
pub(crate) fn describe(e: &sqlx::Error) -> String {
    let sqlx::Error::Database(db) = e else {
        return e.to_string();
    };
    let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() else {
        return db.message().to_owned();
    };
    let mut text = pg.message().to_owned();
    if let Some(detail) = pg.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(hint) = pg.hint() {
        text.push_str(" (");
        text.push_str(hint);
        text.push(')');
    }
    text
}
