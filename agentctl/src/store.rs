//! Opening the store the workers use, by the project's one rule for locations
//! ([`StoreLocation`]): PostgreSQL for `postgres://` URLs, a SQLite file for `sqlite:` URLs
//! and paths, anything else refused by name.
//!
//! `agentctl` never creates or migrates a store by accident: every command but `migrate`
//! opens an existing one and checks that it holds this binary's migrations, and commands
//! that only read open a SQLite file read-only.

use std::sync::Arc;

use agent_core::store::Store;
use agent_core::store::location::StoreLocation;
use agent_pg::{PgSetupError, PgStore};
use agent_sqlite::{Access, SqliteOpenError, SqliteStore};

use crate::cli::{DEFAULT_DB, Global};
use crate::error::{CliError, Result};

/// Where the store is, from the options: `--database-url`/`DATABASE_URL` when it is a
/// PostgreSQL URL, then `--db`/`AGENT_DB`, then a SQLite location in `DATABASE_URL`, then
/// the default file. A location with another scheme is refused wherever it is given.
pub(crate) fn location(global: &Global) -> Result<StoreLocation> {
    let parse = |s: &str, from: &str| {
        s.parse::<StoreLocation>().map_err(|e| {
            CliError::usage(e.to_string()).hint(format!(
                "check {from}: postgres://user@host:5432/db for PostgreSQL, a file path for SQLite"
            ))
        })
    };
    let from_url = global
        .database_url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
        .map(|u| parse(u, "--database-url / DATABASE_URL"))
        .transpose()?;
    if let Some(pg @ StoreLocation::Postgres(_)) = from_url {
        return Ok(pg);
    }
    if let Some(db) = global.db.as_deref().filter(|d| !d.trim().is_empty()) {
        return parse(db, "--db / AGENT_DB");
    }
    Ok(from_url.unwrap_or_else(|| StoreLocation::Sqlite(DEFAULT_DB.to_owned())))
}

/// Open the existing store named by the options, without migrating it.
pub(crate) async fn open_store(global: &Global, access: Access) -> Result<Arc<dyn Store>> {
    Ok(match location(global)? {
        StoreLocation::Postgres(url) => Arc::new(open_pg(&url, &global.pg_schema).await?),
        StoreLocation::Sqlite(path) => Arc::new(open_sqlite(&path, access).await?),
    })
}

/// Connect to the PostgreSQL store in `schema` and check it, creating nothing.
pub(crate) async fn open_pg(url: &str, schema: &str) -> Result<PgStore> {
    PgStore::open_existing(url, schema)
        .await
        .map_err(|e| pg_error(&e))
}

/// Open the SQLite store a worker created at `path`, creating nothing.
pub(crate) async fn open_sqlite(path: &str, access: Access) -> Result<SqliteStore> {
    SqliteStore::open_existing(path, access)
        .await
        .map_err(|e| sqlite_error(&e, path))
}

/// A PostgreSQL setup error, with what to do about it.
pub(crate) fn pg_error(e: &PgSetupError) -> CliError {
    let failed = CliError::failed(format!("cannot open the PostgreSQL store: {e}"));
    match e {
        PgSetupError::Refused { .. } => failed.hint(
            "check the host and port in --database-url / DATABASE_URL, and that PostgreSQL runs there",
        ),
        PgSetupError::Auth { .. } => {
            failed.hint("check the user and password in --database-url / DATABASE_URL")
        }
        PgSetupError::NoSchema { .. } | PgSetupError::NotAStore { .. } => failed.hint(
            "check --pg-schema / AGENT_PG_SCHEMA (default `agents`); agentctl creates no store: \
             a worker does when it starts, or `agentctl migrate` for an empty one",
        ),
        PgSetupError::Level { .. } => failed.hint(
            "a store behind this binary is migrated by `agentctl migrate` (or a worker of this \
             version); for one ahead of it, use the newer agentctl",
        ),
        PgSetupError::InvalidSchema(_) => failed.hint("check --pg-schema / AGENT_PG_SCHEMA"),
        _ => failed.hint("check --database-url / DATABASE_URL (postgres://user:password@host:5432/db)"),
    }
}

pub(crate) fn sqlite_error(e: &SqliteOpenError, path: &str) -> CliError {
    match e {
        SqliteOpenError::NotFound(_) => {
            let hint = if path == DEFAULT_DB {
                "run an example first (cargo run --example checkout) or pass --db PATH / \
                 AGENT_DB, or DATABASE_URL for PostgreSQL"
            } else {
                "check the path given with --db / AGENT_DB"
            };
            CliError::not_found(e.to_string()).hint(hint)
        }
        SqliteOpenError::NotAStore { .. } => CliError::failed(e.to_string())
            .hint("pass the file the workers write (--db / AGENT_DB); agentctl creates no store"),
        SqliteOpenError::Level { .. } => CliError::failed(e.to_string()).hint(
            "a store behind this binary is migrated by `agentctl migrate` (or a worker of this \
             version); for one ahead of it, use the newer agentctl",
        ),
        _ => CliError::failed(format!("cannot open the SQLite store at {path}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ColorChoice;

    fn global(db: Option<&str>, url: Option<&str>) -> Global {
        Global {
            db: db.map(str::to_owned),
            database_url: url.map(str::to_owned),
            pg_schema: "agents".into(),
            json: false,
            color: ColorChoice::Never,
            width: None,
        }
    }

    fn at(db: Option<&str>, url: Option<&str>) -> StoreLocation {
        location(&global(db, url)).expect("a location")
    }

    #[test]
    fn postgres_url_wins_then_db_then_default() {
        let pg = "postgres://u@h/db";
        assert_eq!(
            at(Some("x.db"), Some(pg)),
            StoreLocation::Postgres(pg.into())
        );
        assert_eq!(
            at(Some("x.db"), Some("sqlite:y.db")),
            StoreLocation::Sqlite("x.db".into())
        );
        assert_eq!(
            at(None, Some("sqlite:y.db")),
            StoreLocation::Sqlite("y.db".into())
        );
        assert_eq!(at(None, Some("")), StoreLocation::Sqlite(DEFAULT_DB.into()));
        assert_eq!(at(None, None), StoreLocation::Sqlite(DEFAULT_DB.into()));
    }

    #[test]
    fn other_schemes_are_refused_wherever_given() {
        for (db, url) in [
            (None, Some("mysql://root@h/agents")),
            (Some("x.db"), Some("mysql://root@h/agents")),
            (Some("mysql://root@h/agents"), None),
        ] {
            let err = location(&global(db, url)).unwrap_err();
            assert_eq!(
                err.message,
                "unsupported database URL scheme `mysql`: use postgres://… or a SQLite path"
            );
        }
    }
}
