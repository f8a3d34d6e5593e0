//! Opening the store the workers use: PostgreSQL for `postgres://` URLs, else a SQLite file.

use std::path::Path;
use std::sync::Arc;

use agent_core::store::Store;

use crate::cli::{DEFAULT_DB, Global};
use crate::error::{CliError, Result};

/// Where the store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A PostgreSQL URL.
    Postgres(String),
    /// A SQLite file.
    Sqlite(String),
}

impl Location {
    /// From the options: `--database-url`/`DATABASE_URL` when it is a PostgreSQL URL, then
    /// `--db`/`AGENT_DB`, then a `sqlite:` URL in `DATABASE_URL`, then the default file.
    pub(crate) fn from_global(global: &Global) -> Self {
        if let Some(url) = &global.database_url
            && is_postgres(url)
        {
            return Self::Postgres(url.clone());
        }
        if let Some(db) = &global.db {
            return Self::parse(db);
        }
        if let Some(url) = &global.database_url {
            return Self::parse(url);
        }
        Self::Sqlite(DEFAULT_DB.to_owned())
    }

    /// A URL or a path.
    pub(crate) fn parse(s: &str) -> Self {
        if is_postgres(s) {
            return Self::Postgres(s.to_owned());
        }
        let path = s
            .strip_prefix("sqlite://")
            .or_else(|| s.strip_prefix("sqlite:"))
            .unwrap_or(s);
        let path = path.split('?').next().unwrap_or(path);
        Self::Sqlite(path.to_owned())
    }
}

fn is_postgres(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Open the store named by the options. A SQLite file must exist: `agentctl` never creates
/// an empty database by accident.
pub(crate) async fn open_store(global: &Global) -> Result<Arc<dyn Store>> {
    open_location(&Location::from_global(global), &global.pg_schema).await
}

/// Open `location`.
pub(crate) async fn open_location(location: &Location, pg_schema: &str) -> Result<Arc<dyn Store>> {
    match location {
        Location::Postgres(url) => {
            let store = agent_pg::PgStore::connect(url, pg_schema)
                .await
                .map_err(|e| {
                    CliError::failed(format!("cannot open PostgreSQL store: {e}")).hint(
                        "check DATABASE_URL / --database-url (postgres://user:password@host:5432/db) \
                         and that the server is up",
                    )
                })?;
            store.migrate().await.map_err(|e| {
                CliError::failed(format!(
                    "cannot migrate PostgreSQL schema `{pg_schema}`: {e}"
                ))
            })?;
            Ok(Arc::new(store))
        }
        Location::Sqlite(path) => {
            if !Path::new(path).is_file() {
                let hint = if path == DEFAULT_DB {
                    "run an example first (cargo run --example checkout) or pass --db PATH / \
                     AGENT_DB, or DATABASE_URL for PostgreSQL"
                        .to_owned()
                } else {
                    "check the path given with --db / AGENT_DB".to_owned()
                };
                return Err(CliError::not_found(format!("no database at {path}")).hint(hint));
            }
            open_sqlite(path).await
        }
    }
}

async fn open_sqlite(path: &str) -> Result<Arc<dyn Store>> {
    let store = agent_sqlite::SqliteStore::open(path).await.map_err(|e| {
        CliError::failed(format!("cannot open the SQLite store at {path}: {e}"))
            .hint("is it an agent database? the workers create it (see --db / AGENT_DB)")
    })?;
    Ok(Arc::new(store))
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

    #[test]
    fn postgres_url_wins_then_db_then_default() {
        let pg = "postgres://u@h/db";
        assert_eq!(
            Location::from_global(&global(Some("x.db"), Some(pg))),
            Location::Postgres(pg.into())
        );
        assert_eq!(
            Location::from_global(&global(Some("x.db"), Some("sqlite:y.db"))),
            Location::Sqlite("x.db".into())
        );
        assert_eq!(
            Location::from_global(&global(None, Some("sqlite:y.db"))),
            Location::Sqlite("y.db".into())
        );
        assert_eq!(
            Location::from_global(&global(None, None)),
            Location::Sqlite(DEFAULT_DB.into())
        );
    }

    #[test]
    fn locations_parse() {
        assert_eq!(
            Location::parse("postgres://u@h/db"),
            Location::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            Location::parse("sqlite://runs.db?mode=rwc"),
            Location::Sqlite("runs.db".into())
        );
        assert_eq!(
            Location::parse("x/y.sqlite3"),
            Location::Sqlite("x/y.sqlite3".into())
        );
    }
}
