//! `agentctl backup DEST [--force]`: one whole copy of a SQLite store, taken while it is in
//! use; for PostgreSQL, the `pg_dump` command that does it.
//!
//! DEST is refused, `--force` or not, when it is the store itself (by any name: a symlink,
//! a hard link, its `-wal`, `-shm` or `.lock` file) or a database file in use (a worker's
//! lock on it, or a `-wal`/`-shm` beside it): replacing such a file under the process that
//! has it open loses what it wrote.

use std::fs::TryLockError;
use std::path::{Path, PathBuf};
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
    refuse_destination(Path::new(&path), dest)?;
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

/// `path` with `suffix` appended to its file name (`x.db` → `x.db-wal`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `path` with its directory resolved (symlinks, `..`), also when the file does not exist.
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(dir.canonicalize().ok()?.join(path.file_name()?))
}

/// Whether `a` and `b` are the same file (one inode), however named.
#[cfg(unix)]
fn same_inode(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_inode(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    false
}

/// Refuse a destination that is the store `source` itself or one of its files, by whatever
/// name, or a SQLite file another process has open.
fn refuse_destination(source: &Path, dest: &Path) -> Result<()> {
    let own = |what: &str| {
        CliError::failed(format!(
            "{} is {what} of the store being backed up: writing there would replace the \
             store under the workers that have it open",
            dest.display()
        ))
        .hint("back up to a new file outside the store's own files")
    };
    let dest_meta = std::fs::metadata(dest).ok();
    let dest_resolved = resolved(dest);
    for (suffix, what) in [
        ("", "the database file"),
        ("-wal", "the write-ahead log"),
        ("-shm", "the shared-memory file"),
        (".lock", "the lock file"),
    ] {
        let file = sibling(source, suffix);
        if dest_resolved.is_some() && resolved(&file) == dest_resolved {
            return Err(own(what));
        }
        if let (Some(d), Ok(f)) = (&dest_meta, std::fs::metadata(&file))
            && same_inode(d, &f)
        {
            return Err(own(what));
        }
    }
    let Some(dest_meta) = dest_meta else {
        return Ok(());
    };
    if !dest_meta.is_file() {
        return Err(CliError::failed(format!(
            "{} exists and is not a file",
            dest.display()
        )));
    }
    // A worker holds `DEST.lock` with the OS's file lock for as long as it has the store
    // open (`SqliteStore::open`); a lock nobody holds is what a stopped worker left behind.
    if let Ok(lock) = std::fs::File::open(sibling(dest, ".lock"))
        && matches!(lock.try_lock_shared(), Err(TryLockError::WouldBlock))
    {
        return Err(CliError::failed(format!(
            "{} is a store a running worker has open (it holds {}.lock)",
            dest.display(),
            dest.display()
        ))
        .hint("stop the worker first, or back up to a new file"));
    }
    for suffix in ["-wal", "-shm"] {
        let beside = sibling(dest, suffix);
        if beside.exists() {
            return Err(CliError::failed(format!(
                "{} is a SQLite database in use: {} is beside it",
                dest.display(),
                beside.display()
            ))
            .hint(
                "a connection has it open, or did not close it cleanly (its log would be \
                 applied to the new file); close it, or back up to a new file",
            ));
        }
    }
    Ok(())
}
