//! Two processes on one SQLite file, for real: the test binary starts itself twice as a
//! worker on a fresh file. Exactly one opens it (and migrates it); the other is told in one
//! sentence that SQLite serves one process, and no migration fails. Readers open beside
//! the worker; once it exits, the file is free again.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use agent_core::store::{HistoryStore, NewRun, RunFilter, RunStore};
use agent_sqlite::{Access, SqliteOpenError, SqliteStore};

/// Set in the child processes: the file to open as a worker.
const CHILD_DB: &str = "AGENT_SQLITE_TEST_CHILD_DB";
/// What a child's own output starts with, among libtest's.
const MARK: &str = "CHILD: ";
const TEST: &str = "two_workers_on_one_fresh_file";

/// The child: open `path` as a worker, say how it went, and hold the store until stdin
/// closes.
async fn child(path: &Path) {
    match SqliteStore::open(path).await {
        Ok(store) => {
            let id = format!("run-of-{}", std::process::id());
            store
                .create_run(NewRun::new(id, "A", "fp", "Start", serde_json::json!({})))
                .await
                .expect("the worker writes");
            println!("{MARK}opened");
            let _ = std::io::stdin().lines().count();
            store.close().await;
        }
        Err(e) => println!("{MARK}error: {e}"),
    }
}

fn spawn(path: &Path) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_DB, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn a worker process");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    (child, out)
}

/// The child's line, without the mark.
fn said(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read the child's output");
        assert!(n > 0, "the child ended without saying how its open went");
        // libtest may have written `test NAME ... ` before it on the same line.
        if let Some((_, rest)) = line.split_once(MARK) {
            return rest.trim_end().to_owned();
        }
    }
}

fn fresh_file(dir: &Path, round: usize) -> PathBuf {
    dir.join(format!("round-{round}.sqlite3"))
}

#[tokio::test]
async fn two_workers_on_one_fresh_file() {
    if let Some(path) = std::env::var_os(CHILD_DB) {
        return child(Path::new(&path)).await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for round in 0..3 {
        let path = fresh_file(dir.path(), round);
        // Both start at once on a file that does not exist yet.
        let mut a = spawn(&path);
        let mut b = spawn(&path);
        let (said_a, said_b) = (said(&mut a.1), said(&mut b.1));
        let (mut winner, mut loser, lost) = match (said_a.as_str(), said_b.as_str()) {
            ("opened", _) => (a, b, said_b),
            (_, "opened") => (b, a, said_a),
            _ => panic!("neither worker opened the file:\n{said_a}\n{said_b}"),
        };
        assert_eq!(
            lost,
            format!(
                "error: another process (pid {}) is working on {}: \
                 SQLite serves one process; use PostgreSQL for several",
                winner.0.id(),
                path.display()
            )
        );
        assert!(loser.0.wait().expect("the loser ends").success());

        // Beside the worker: readers open, a second worker open in this process does not.
        let reader = SqliteStore::open_existing(&path, Access::ReadOnly)
            .await
            .expect("a reader opens beside the worker");
        let runs = reader.list_runs(&RunFilter::default()).await.expect("read");
        assert_eq!(runs.len(), 1, "{runs:?}");
        reader.close().await;
        assert!(matches!(
            SqliteStore::open(&path).await,
            Err(SqliteOpenError::InUse { .. })
        ));

        // The worker exits (its stdin closes): the file is free for the next one.
        drop(winner.0.stdin.take());
        assert!(winner.0.wait().expect("the worker ends").success());
        let next = SqliteStore::open(&path)
            .await
            .expect("the file is free once the worker is gone");
        assert_eq!(
            next.list_runs(&RunFilter::default()).await.unwrap().len(),
            1
        );
        next.close().await;
    }
}
