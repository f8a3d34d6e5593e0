//! Which store the examples use, by the project's one rule for locations
//! ([`StoreLocation`]): `DATABASE_URL=postgres://…` is PostgreSQL, `DATABASE_URL=sqlite:PATH`
//! or no `DATABASE_URL` is SQLite (the embedded default, at `--db`), anything else is
//! refused by name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use durable_agents::postgres::PgStore;
use durable_agents::sqlite::SqliteStore;
use durable_agents::store::Store;
use durable_agents::store::location::StoreLocation;

/// The SQLite file the examples and `agentctl` use when nothing else is said.
pub const DEFAULT_DB: &str = "agent-runs.sqlite3";

/// The PostgreSQL schema the examples use.
pub const PG_SCHEMA: &str = "agents";

/// An opened store.
#[derive(Debug)]
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// One line for a person.
    pub description: String,
    /// The file or database, short.
    pub short: String,
    /// Where the example's shop keeps its state, next to the runs.
    pub shop_path: PathBuf,
    /// The SQLite store behind `store`, to close cleanly.
    sqlite: Option<Arc<SqliteStore>>,
}

impl Opened {
    /// The SQLite file, when the store is one.
    #[must_use]
    pub fn sqlite_path(&self) -> Option<&str> {
        self.sqlite.as_ref().map(|_| self.short.as_str())
    }

    /// Close the store before the process exits: a SQLite file then holds every run by
    /// itself, with nothing left in its `-wal` file.
    pub async fn close(&self) {
        if let Some(sqlite) = &self.sqlite {
            sqlite.close().await;
        }
    }
}

/// Errors opening a store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `DATABASE_URL` names no store the examples can use.
    #[error("DATABASE_URL: {0}")]
    Location(String),
    /// SQLite could not be opened (or another process works on the file).
    #[error("{0}")]
    Sqlite(String),
    /// PostgreSQL could not be reached or migrated.
    #[error("cannot use PostgreSQL from DATABASE_URL: {0} (unset DATABASE_URL to use SQLite)")]
    Postgres(String),
}

/// Open the store `database_url` names (PostgreSQL, or a SQLite file), else the SQLite
/// file `db`, creating and migrating it as a worker does.
///
/// # Errors
/// [`OpenError`] saying what to do.
pub async fn open(database_url: Option<&str>, db: &Path) -> Result<Opened, OpenError> {
    let location = match database_url.filter(|u| !u.trim().is_empty()) {
        Some(url) => url
            .parse::<StoreLocation>()
            .map_err(|e| OpenError::Location(e.to_string()))?,
        None => StoreLocation::Sqlite(db.display().to_string()),
    };
    match location {
        StoreLocation::Postgres(url) => {
            let store = PgStore::connect(&url, PG_SCHEMA)
                .await
                .map_err(|e| OpenError::Postgres(e.to_string()))?;
            store
                .migrate()
                .await
                .map_err(|e| OpenError::Postgres(e.to_string()))?;
            Ok(Opened {
                store: Arc::new(store),
                description: format!("PostgreSQL (schema `{PG_SCHEMA}`, from DATABASE_URL)"),
                short: "PostgreSQL".to_owned(),
                shop_path: PathBuf::from("checkout-shop.json"),
                sqlite: None,
            })
        }
        StoreLocation::Sqlite(path) => {
            let store = SqliteStore::open(&path).await.map_err(|e| match e {
                // Already one sentence naming the file and what to do.
                durable_agents::sqlite::SqliteOpenError::InUse { .. } => {
                    OpenError::Sqlite(e.to_string())
                }
                other => {
                    OpenError::Sqlite(format!("cannot open the SQLite store at {path}: {other}"))
                }
            })?;
            let store = Arc::new(store);
            let mut shop_path = std::ffi::OsString::from(&path);
            shop_path.push(".shop.json");
            Ok(Opened {
                store: Arc::clone(&store) as Arc<dyn Store>,
                description: format!(
                    "SQLite file {path} (the embedded default; set DATABASE_URL=postgres://… for PostgreSQL)"
                ),
                short: path,
                shop_path: PathBuf::from(shop_path),
                sqlite: Some(store),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn other_schemes_are_refused_by_name() {
        let dir = std::env::temp_dir();
        let err = open(Some("mysql://root@localhost/agents"), &dir.join("x.db"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "DATABASE_URL: unsupported database URL scheme `mysql`: use postgres://… or a SQLite path"
        );
    }
}
