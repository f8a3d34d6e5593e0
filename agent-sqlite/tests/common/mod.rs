//! What the integration tests share: a database file of their own, removed afterwards.
// Each test binary uses what it needs of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A path for a new database file, unique to the call, in the tests' temporary folder.
pub(crate) fn new_db_path(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("agent-sqlite-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{prefix}{}.db", uuid::Uuid::new_v4().simple()))
}

/// Remove a database file with its write-ahead log and shared memory (close its stores
/// first).
pub(crate) fn remove_db_files(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.to_path_buf().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}
