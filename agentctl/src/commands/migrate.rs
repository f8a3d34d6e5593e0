//! `agentctl migrate`: create a store, or bring it to this version's migrations.

use std::process::ExitCode;

use agent_core::store::location::StoreLocation;
use agent_pg::PgStore;
use agent_sqlite::SqliteStore;

use crate::cli::Global;
use crate::error::{CliError, Result};
use crate::output::{Output, outln};
use crate::store::{location, pg_error};

pub(super) async fn run(global: &Global, out: Output) -> Result<ExitCode> {
    let (what, target) = match location(global)? {
        StoreLocation::Postgres(url) => {
            let store = PgStore::connect(&url, &global.pg_schema)
                .await
                .map_err(|e| pg_error(&e))?;
            store.migrate().await.map_err(|e| {
                CliError::failed(format!(
                    "cannot migrate schema `{}` of PostgreSQL database {}: {e}",
                    global.pg_schema,
                    store.database()
                ))
            })?;
            (
                "PostgreSQL",
                format!("schema `{}` of {}", global.pg_schema, store.database()),
            )
        }
        StoreLocation::Sqlite(path) => {
            // The worker's open: it takes the file's worker lock, so it refuses to migrate
            // under a worker that is running.
            let store = SqliteStore::open(&path).await.map_err(|e| {
                CliError::failed(format!("cannot migrate the SQLite store at {path}: {e}"))
            })?;
            store.close().await;
            ("SQLite", path)
        }
    };
    if out.json {
        out.print_json(&serde_json::json!({ "store": what, "at": target, "migrated": true }));
    } else {
        outln!("the {what} store at {target} is at this version's migrations");
    }
    Ok(ExitCode::SUCCESS)
}
