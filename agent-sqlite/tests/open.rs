//! Opening and closing within one process: stores opened at once on a fresh file migrate
//! one after the other; the open of an existing store creates nothing; a clean close leaves
//! every run in the database file itself.

use std::path::Path;

use agent_core::store::{HistoryStore, NewRun, RunFilter, RunStore};
use agent_sqlite::{Access, SqliteOpenError, SqliteStore};

fn run(id: &str) -> NewRun {
    NewRun::new(id, "A", "fp", "Start", serde_json::json!({ "id": id }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opened_at_once_on_a_fresh_file_all_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.sqlite3");
    let opens: Vec<_> = (0..4)
        .map(|_| tokio::spawn(SqliteStore::open(path.clone())))
        .collect();
    for open in opens {
        open.await
            .expect("task")
            .expect("every open succeeds, migrations included");
    }
}

#[tokio::test]
async fn opening_an_existing_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sqlite3");
    assert!(matches!(
        SqliteStore::open_existing(&missing, Access::ReadOnly).await,
        Err(SqliteOpenError::NotFound(_))
    ));
    assert!(!missing.exists());

    let empty = dir.path().join("empty.sqlite3");
    std::fs::File::create(&empty).unwrap();
    for access in [Access::ReadOnly, Access::ReadWrite] {
        let err = SqliteStore::open_existing(&empty, access)
            .await
            .unwrap_err();
        assert!(
            matches!(err, SqliteOpenError::NotAStore { .. }),
            "{access:?}: {err}"
        );
    }
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "tables were created"
    );
}

#[tokio::test]
async fn a_read_only_store_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite3");
    let worker = SqliteStore::open(&path).await.unwrap();
    worker.create_run(run("a")).await.unwrap();
    let reader = SqliteStore::open_existing(&path, Access::ReadOnly)
        .await
        .unwrap();
    assert_eq!(reader.load_run("a").await.unwrap().unwrap().id, "a");
    assert!(reader.create_run(run("b")).await.is_err());
    reader.close().await;
    worker.close().await;
}

/// How many runs the database file `path` holds by itself: copied alone (no `-wal`, no
/// `-shm`) into a directory of its own and opened there.
async fn runs_in_the_file_alone(path: &Path) -> usize {
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("copy.sqlite3");
    std::fs::copy(path, &copy).unwrap();
    let copied = SqliteStore::open_existing(&copy, Access::ReadOnly)
        .await
        .expect("the file opens alone");
    let runs = copied.list_runs(&RunFilter::default()).await.unwrap().len();
    copied.close().await;
    runs
}

fn wal_of(path: &Path) -> std::path::PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

#[tokio::test]
async fn a_clean_close_leaves_every_run_in_the_file_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite3");
    let store = SqliteStore::open(&path).await.unwrap();
    for i in 0..6 {
        store.create_run(run(&format!("r{i}"))).await.unwrap();
    }
    assert!(
        std::fs::metadata(wal_of(&path)).is_ok_and(|m| m.len() > 0),
        "the runs should be in the -wal file before the close"
    );
    store.close().await;
    assert!(
        std::fs::metadata(wal_of(&path)).map_or(true, |m| m.len() == 0),
        "the close left pages in the -wal file"
    );

    // The file alone, as a backup made by copying it would be.
    assert_eq!(runs_in_the_file_alone(&path).await, 6);
}

#[tokio::test]
async fn a_backup_taken_while_open_is_whole_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite3");
    let store = SqliteStore::open(&path).await.unwrap();
    for i in 0..6 {
        store.create_run(run(&format!("r{i}"))).await.unwrap();
    }
    let dest = dir.path().join("backup.sqlite3");
    assert_eq!(store.backup(&dest).await.unwrap(), 6);
    assert!(matches!(
        store.backup(&dest).await,
        Err(agent_sqlite::SqliteBackupError::Exists(_))
    ));
    assert_eq!(runs_in_the_file_alone(&dest).await, 6);
    store.close().await;
}
