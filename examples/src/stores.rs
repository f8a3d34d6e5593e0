//! Which store the examples use: SQLite (the embedded default) unless `DATABASE_URL` names
//! a PostgreSQL database.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use durable_agents::store::Store;

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
}

/// Errors opening a store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// SQLite could not be opened.
    #[error("cannot open the SQLite store at {path}: {message}")]
    Sqlite {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// PostgreSQL could not be reached or migrated.
    #[error(
        "cannot use PostgreSQL at DATABASE_URL: {0} (is the server running? unset DATABASE_URL to use SQLite)"
    )]
    Postgres(String),
}

/// Open PostgreSQL when `database_url` is given, else the SQLite file `db`.
///
/// # Errors
/// [`OpenError`] saying what to do.
pub async fn open(database_url: Option<&str>, db: &Path) -> Result<Opened, OpenError> {
    if let Some(url) = database_url.filter(|u| !u.is_empty()) {
        let store = durable_agents::postgres::PgStore::connect(url, PG_SCHEMA)
            .await
            .map_err(|e| OpenError::Postgres(e.to_string()))?;
        store
            .migrate()
            .await
            .map_err(|e| OpenError::Postgres(e.to_string()))?;
        return Ok(Opened {
            store: Arc::new(store),
            description: format!("PostgreSQL (schema `{PG_SCHEMA}`, from DATABASE_URL)"),
            short: "PostgreSQL".to_owned(),
            shop_path: PathBuf::from("checkout-shop.json"),
        });
    }
    let store = durable_agents::sqlite::SqliteStore::open(db)
        .await
        .map_err(|e| OpenError::Sqlite {
            path: db.display().to_string(),
            message: e.to_string(),
        })?;
    let mut shop_path = db.as_os_str().to_owned();
    shop_path.push(".shop.json");
    Ok(Opened {
        store: Arc::new(store),
        description: format!(
            "SQLite file {} (the embedded default; set DATABASE_URL=postgres://… for PostgreSQL)",
            db.display()
        ),
        short: db.display().to_string(),
        shop_path: PathBuf::from(shop_path),
    })
}
