//! `agentctl backup DEST [--force]`: one whole copy of a SQLite store, taken while it is in
//! use; for PostgreSQL, the `pg_dump` command that does it.

use std::process::ExitCode;

use agent_core::store::location::{StoreLocation, without_password};
use agent_sqlite::{Access, SqliteBackupError};

use crate::cli::{BackupArgs, Global};
use crate::error::{CliError, Result};
use crate::output::{Output, outln};
use crate::store::{location, open_sqlite};

pub(super) async fn run(global: &Global, out: Output, args: &BackupArgs) -> Result<ExitCode> {
    let dest = &args.dest;
    let path = match location(global)? {
        StoreLocation::Sqlite(path) => path,
        StoreLocation::Postgres(url) => {
            return Err(CliError::usage(
                "agentctl backs up SQLite stores; back a PostgreSQL store up with pg_dump",
            )
            .hint(format!(
                "pg_dump --schema={} --format=custom --file={} '{}' \
                 (the password from PGPASSWORD or ~/.pgpass; restore with pg_restore)",
                global.pg_schema,
                dest.display(),
                without_password(&url)
            )));
        }
    };
    let store = open_sqlite(&path, Access::ReadOnly).await?;
    if args.force && dest.exists() {
        std::fs::remove_file(dest)
            .map_err(|e| CliError::failed(format!("cannot replace {}: {e}", dest.display())))?;
    }
    let result = store.backup(dest).await;
    store.close().await;
    let runs = result.map_err(|e| match e {
        SqliteBackupError::Exists(_) => CliError::failed(format!("{} exists", dest.display()))
            .hint("choose a new file, or pass --force to replace it"),
        other => CliError::failed(other.to_string()),
    })?;
    if out.json {
        out.print_json(&serde_json::json!({
            "from": path,
            "to": dest.display().to_string(),
            "runs": runs,
        }));
    } else {
        outln!(
            "backed up {runs} runs from {path} to {}: one file, whole without a -wal file",
            dest.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
