//! Opening a store: the worker's open (create, lock the file for this process, migrate),
//! the open of an existing store that writes nothing (`agentctl`), closing with a
//! checkpoint, and whole-file backups.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use agent_core::store::WakeHub;
use agent_core::store::location::StoreLocation;
use agent_sql::heads::HeadCache;
use agent_sql::migrations::{Applied, applied_sql};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::Notify;

use crate::SqliteStore;
use crate::group_commit::{MAX_BATCH, group_commit};

/// The sentence a second process gets.
const ONE_PROCESS: &str = "SQLite serves one process; use PostgreSQL for several";

/// Errors of opening a [`SqliteStore`].
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    /// The file could not be opened or created.
    #[error("cannot open SQLite database: {}", describe(.0))]
    Open(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Another process opened the file as a worker ([`SqliteStore::open`]).
    #[error("another process{} is working on {}: {ONE_PROCESS}", holder(.pid), .path.display())]
    InUse {
        /// The database file.
        path: PathBuf,
        /// The process holding it, when it wrote its id.
        pid: Option<u32>,
    },
    /// The lock file next to the database could not be created or locked.
    #[error("cannot create or lock {} next to the database: {source}", .path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// [`SqliteStore::open_existing`]: there is no file.
    #[error("no database at {}", .0.display())]
    NotFound(PathBuf),
    /// [`SqliteStore::open_existing`]: the file is not an agent store.
    #[error("{} is not an agent store ({reason})", .path.display())]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// [`SqliteStore::open_existing`]: the store's migrations are not this binary's.
    #[error("the agent store at {}: {problem}", .path.display())]
    Level {
        /// The file.
        path: PathBuf,
        /// How its migrations differ from this binary's, and what to do.
        problem: String,
    },
    /// A URL that does not name a SQLite file ([`SqliteStore::open_url`]).
    #[error("not a SQLite location: {0}")]
    NotSqlite(String),
}

// By reference: thiserror hands the fields of the message to it so.
#[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)]
fn holder(pid: &Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

/// A driver error without sqlx's "error returned from database" prefix.
pub(crate) fn describe(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
}

/// Errors of [`SqliteStore::backup`].
#[derive(Debug, thiserror::Error)]
pub enum SqliteBackupError {
    /// The destination exists (the caller decides whether to replace it).
    #[error("{} exists", .0.display())]
    Exists(PathBuf),
    /// SQLite could not write the copy.
    #[error("cannot write the backup to {}: {}", .path.display(), describe(.source))]
    Copy {
        /// The destination.
        path: PathBuf,
        /// Why.
        source: sqlx::Error,
    },
    /// The copy does not open as a store, or holds other runs than the store.
    #[error("the backup at {} is not whole: {message}", .path.display())]
    Verify {
        /// The destination.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// What [`SqliteStore::open_existing`] may do to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only: the connection is opened read-only, so nothing can be written.
    ReadOnly,
    /// Read and write rows (signals, tool switches, retries), never the schema.
    ReadWrite,
}

fn migrator() -> Migrator {
    sqlx::migrate!("./migrations")
}

/// Apply the embedded migrations in one write transaction: a start that fails part-way
/// leaves the file as it found it (no migrations table, no half of the migrations), as
/// when the file is another application's database holding a table of the same name.
async fn migrate(pool: &sqlx::SqlitePool) -> Result<(), SqliteOpenError> {
    let mut conn = pool.acquire().await.map_err(SqliteOpenError::Open)?;
    // Immediate: the write lock from the start, so that no other writer slips in between
    // the migrator's reads and its writes.
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE")
        .await
        .map_err(SqliteOpenError::Open)?;
    // The migrator's own run, on the transaction's connection: each migration's
    // transaction becomes a savepoint of this one, which commits them all or none.
    migrator().run_direct(None, &mut *tx, false).await?;
    tx.commit().await.map_err(SqliteOpenError::Open)?;
    Ok(())
}

/// The lock a worker process holds on a database file for as long as one of its stores
/// on that file is open.
///
/// Why a lock file held with the OS's file lock rather than SQLite's own locks: a second
/// worker must be told at once and in one sentence, not after a busy timeout, and before it
/// touches the file at all (switching a fresh file to WAL takes an exclusive lock that the
/// busy timeout does not wait for, and sqlx's migrator checks and applies each migration in
/// its own transaction, so two processes migrating at once both apply the same one:
/// "duplicate column name"). SQLite's `locking_mode = EXCLUSIVE` would keep others out too,
/// but also `agentctl`, which must be able to read while a worker runs. The OS drops the
/// lock when the process ends however it ends, so a crash leaves no stale lock behind (the
/// file itself stays, harmlessly).
#[derive(Debug)]
pub(crate) struct ProcessLock {
    _file: File,
    /// Held while one of this process's opens connects and migrates, so that two stores
    /// opened at once on one file do both one after the other.
    opening: tokio::sync::Mutex<()>,
}

/// The locks this process holds, by lock file: a process may open several stores on one
/// file (tests, a restart in place), and they share the lock.
static HELD: Mutex<Option<HashMap<PathBuf, Weak<ProcessLock>>>> = Mutex::new(None);

/// How often (5 ms apart) an open waits for this process's own closing store to let its
/// lock go.
const CLOSING_RETRIES: u32 = 200;

/// The lock file of the database `db`: `db` with `.lock` appended.
fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Take (or share, within this process) the worker lock of `db`.
fn lock(db: &Path) -> Result<Arc<ProcessLock>, SqliteOpenError> {
    let path = lock_path(db);
    let lock_err = |source| SqliteOpenError::Lock {
        path: path.clone(),
        source,
    };
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_err)?;
    // The same file under another name (`./x.db`, an absolute path) is the same lock.
    let key = path.canonicalize().map_err(lock_err)?;
    let mut attempt = 0;
    let mut guard = loop {
        let mut guard = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        let held = guard.get_or_insert_with(HashMap::new);
        if let Some(lock) = held.get(&key).and_then(Weak::upgrade) {
            return Ok(lock);
        }
        // A dead entry: this process's last store on the file is being dropped, and its lock
        // file closes a moment after the count reached zero. Until it has, the OS still
        // sees the lock as taken: wait for it rather than blaming another process.
        let ours_closing = held.contains_key(&key);
        match file.try_lock() {
            Ok(()) => break guard,
            Err(std::fs::TryLockError::WouldBlock) if ours_closing && attempt < CLOSING_RETRIES => {
                drop(guard);
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SqliteOpenError::InUse {
                    path: db.to_owned(),
                    pid: holder_pid(&mut file),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(lock_err(e)),
        }
    };
    let held = guard.get_or_insert_with(HashMap::new);
    // Who holds it, for the message of the next one; the lock does not depend on it.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| write!(file, "{}", std::process::id()));
    let lock = Arc::new(ProcessLock {
        _file: file,
        opening: tokio::sync::Mutex::new(()),
    });
    held.retain(|_, l| l.strong_count() > 0);
    held.insert(key, Arc::downgrade(&lock));
    Ok(lock)
}

/// The process id the holder of the lock wrote into `file`. A holder that has just taken
/// the lock may not have written it yet: look again a few times, briefly, since the id only
/// makes the message better and must not delay it.
fn holder_pid(file: &mut File) -> Option<u32> {
    for _ in 0..10 {
        let mut text = String::new();
        if file.rewind().is_ok()
            && file.read_to_string(&mut text).is_ok()
            && let Ok(pid) = text.trim().parse()
        {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

impl SqliteStore {
    /// Open the database file at `path` as this process's worker store: create it if
    /// needed, lock it for this process, and apply the embedded migrations.
    ///
    /// Only one process may have a file open this way (the lock is the file `PATH.lock`,
    /// released by the OS when the process ends); stores opened by the same process share
    /// it, and migrate one after the other. Read the file from other processes with
    /// [`Self::open_existing`].
    ///
    /// # Errors
    /// [`SqliteOpenError::InUse`] when another process has the file open as a worker
    /// ("SQLite serves one process; use PostgreSQL for several");
    /// [`SqliteOpenError::Lock`] when the lock file cannot be created;
    /// [`SqliteOpenError::Open`] when the file cannot be opened or created;
    /// [`SqliteOpenError::Migrate`] when a migration fails.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref().to_path_buf();
        let lock = lock(&path)?;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        // Connecting switches a fresh file to WAL, which takes an exclusive lock the busy
        // timeout does not wait for: stores opened at once connect one after the other
        // too, not only migrate.
        let store = {
            let _opening = lock.opening.lock().await;
            let store = Self::connect(options, Some(path), false).await?;
            migrate(&store.pool).await?;
            store
        };
        Ok(Self {
            _worker_lock: Some(lock),
            ..store
        })
    }

    /// Open the file a `sqlite:` URL or a plain path names (the rule of
    /// [`StoreLocation`]), as [`Self::open`] does. A `?query` is ignored: the store sets
    /// its own pragmas.
    ///
    /// # Errors
    /// [`SqliteOpenError::NotSqlite`] for a PostgreSQL URL or an unsupported scheme; else
    /// as [`Self::open`].
    pub async fn open_url(url: &str) -> Result<Self, SqliteOpenError> {
        match url.parse::<StoreLocation>() {
            Ok(StoreLocation::Sqlite(path)) => Self::open(path).await,
            Ok(other) => Err(SqliteOpenError::NotSqlite(other.to_string())),
            Err(e) => Err(SqliteOpenError::NotSqlite(e.to_string())),
        }
    }

    /// Open the store a worker created at `path`, creating and migrating nothing: the file
    /// must exist and hold exactly this binary's migrations. It takes no worker lock, so it
    /// works while a worker runs (writes with [`Access::ReadWrite`] then wait for the
    /// worker's transactions, up to the busy timeout).
    ///
    /// # Errors
    /// [`SqliteOpenError::NotFound`] when there is no file;
    /// [`SqliteOpenError::NotAStore`] for a file that is not SQLite or has no store tables;
    /// [`SqliteOpenError::Level`] for a store behind or ahead of this binary;
    /// [`SqliteOpenError::Open`] when the file cannot be opened.
    pub async fn open_existing(
        path: impl AsRef<Path>,
        access: Access,
    ) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(SqliteOpenError::NotFound(path));
        }
        let read_only = access == Access::ReadOnly;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(false)
            .read_only(read_only)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let options = if read_only {
            options
        } else {
            options.synchronous(SqliteSynchronous::Full)
        };
        let store = Self::connect(options, Some(path.clone()), read_only).await?;
        let not_a_store = |reason: String| SqliteOpenError::NotAStore {
            path: path.clone(),
            reason,
        };
        let tables: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sqlite_master \
             WHERE type = 'table' AND name IN ('_sqlx_migrations', 'runs')",
        )
        .fetch_one(&store.pool)
        .await
        .map_err(|e| not_a_store(describe(&e)))?;
        if tables != 2 {
            return Err(not_a_store(
                "no `_sqlx_migrations` and `runs` tables".to_owned(),
            ));
        }
        let applied: Vec<Applied> =
            sqlx::query_as(sqlx::AssertSqlSafe(applied_sql("_sqlx_migrations")))
                .fetch_all(&store.pool)
                .await
                .map_err(SqliteOpenError::Open)?;
        if let Some(mismatch) = agent_sql::migrations::compare(&migrator(), &applied) {
            return Err(SqliteOpenError::Level {
                path,
                problem: mismatch.to_string(),
            });
        }
        Ok(store)
    }

    async fn connect(
        options: SqliteConnectOptions,
        path: Option<PathBuf>,
        read_only: bool,
    ) -> Result<Self, SqliteOpenError> {
        // One connection: SQLite has one writer anyway, and queueing in the pool is cheaper
        // than busy-waiting on the file lock.
        let readers = SqlitePoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .connect_lazy_with(options.clone().read_only(true));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(SqliteOpenError::Open)?;
        Ok(Self {
            group: Arc::new(group_commit(pool.clone(), MAX_BATCH)),
            pool,
            readers,
            path,
            read_only,
            _worker_lock: None,
            work: Notify::new(),
            events: WakeHub::new(),
            heads: HeadCache::default(),
        })
    }

    /// Close the store: move everything in the write-ahead log into the database file
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`), so that the file alone holds every run, then
    /// close the connection. Call it before a worker process exits.
    pub async fn close(&self) {
        // Readers first: an open read transaction would keep the checkpoint from finishing.
        self.readers.close().await;
        if !self.read_only && !self.pool.is_closed() {
            // (busy, log frames, checkpointed frames): busy = 1 when a reader in another
            // process kept the checkpoint from finishing; the WAL then stays, still valid.
            match sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(TRUNCATE)")
                .fetch_one(&self.pool)
                .await
            {
                Ok((0, _, _)) => {}
                Ok(_) => tracing::warn!(
                    "the checkpoint on close was blocked by a reader; the -wal file stays"
                ),
                Err(e) => tracing::warn!(error = %e, "checkpoint on close failed"),
            }
        }
        self.pool.close().await;
    }

    /// Copy the whole store to the new file `dest` while it is open (SQLite's
    /// `VACUUM INTO`: one consistent snapshot, the write-ahead log included, with no WAL of
    /// its own), then check that the copy opens as a store on its own and holds the runs
    /// the store held. Returns how many runs the copy holds.
    ///
    /// # Errors
    /// [`SqliteBackupError::Exists`] when `dest` exists; [`SqliteBackupError::Copy`] when
    /// SQLite cannot write it; [`SqliteBackupError::Verify`] when the copy does not check.
    pub async fn backup(&self, dest: impl AsRef<Path>) -> Result<u64, SqliteBackupError> {
        let dest = dest.as_ref().to_path_buf();
        if dest.exists() {
            return Err(SqliteBackupError::Exists(dest));
        }
        let copy_err = |source| SqliteBackupError::Copy {
            path: dest.clone(),
            source,
        };
        let verify_err = |message: String| SqliteBackupError::Verify {
            path: dest.clone(),
            message,
        };
        let count = "SELECT count(*) FROM runs";
        // A worker may add runs meanwhile: the snapshot holds at least the runs there were
        // before it and at most those there are after it.
        let before: i64 = sqlx::query_scalar(count)
            .fetch_one(&self.pool)
            .await
            .map_err(copy_err)?;
        sqlx::query("VACUUM INTO ?")
            .bind(dest.to_string_lossy().into_owned())
            .execute(&self.pool)
            .await
            .map_err(copy_err)?;
        let after: i64 = sqlx::query_scalar(count)
            .fetch_one(&self.pool)
            .await
            .map_err(copy_err)?;
        let copy = Self::open_existing(&dest, Access::ReadOnly)
            .await
            .map_err(|e| verify_err(e.to_string()))?;
        let copied: Result<i64, _> = sqlx::query_scalar(count).fetch_one(&copy.pool).await;
        copy.close().await;
        let copied = copied.map_err(|e| verify_err(describe(&e)))?;
        if copied < before || copied > after {
            return Err(verify_err(format!(
                "it holds {copied} runs, the store held {before} before the copy and {after} after"
            )));
        }
        Ok(u64::try_from(copied).unwrap_or(0))
    }
}
