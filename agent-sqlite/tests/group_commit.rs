//! Group commit on SQLite: step commits of different runs that arrive while the writer is
//! busy share one transaction, and each keeps its own compare-and-set. A stale commit in a
//! batch is refused, alone; the others of the batch are committed.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use agent_conformance::store_checks::step;
use agent_core::store::verify::verify_run;
use agent_core::store::{
    Claimed, HistoryStore, Lease, NewRun, RunRecord, RunStatus, RunStore, StoreError,
};
use agent_sqlite::SqliteStore;
use futures::future::join_all;
use serde_json::json;

const RUNS: usize = 16;

/// A store on a new file holding `RUNS` claimed runs at version 1 (the head each commit
/// starts from is the one the store remembers).
async fn claimed_runs() -> (SqliteStore, Vec<Lease>, PathBuf) {
    let path = common::new_db_path("");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut leases = Vec::new();
    for i in 0..RUNS {
        let id = format!("r{i}");
        store
            .create_run(NewRun::new(&id, "A", "fp", "Start", json!({ "n": 0 })))
            .await
            .unwrap();
        let Claimed { lease, .. } = store
            .claim_run(&id, "w", Duration::from_hours(1))
            .await
            .unwrap()
            .unwrap();
        store
            .commit_step(&lease, &step(0, json!({ "n": 1 })), &[])
            .await
            .unwrap();
        leases.push(lease);
    }
    (store, leases, path)
}

/// Commit every run's next step at once (state `{"n": 2, "run": i}`): the first writes
/// its own transaction, the others queue behind it and go together.
async fn commit_all_at_once(
    store: &SqliteStore,
    leases: &[Lease],
) -> Vec<Result<RunRecord, StoreError>> {
    join_all(leases.iter().enumerate().map(|(i, lease)| {
        let commit = step(1, json!({ "n": 2, "run": i }));
        async move { store.commit_step(lease, &commit, &[]).await }
    }))
    .await
}

/// Run `i`'s commit from [`commit_all_at_once`] applied, and its hash chain verifies.
async fn assert_committed(store: &SqliteStore, i: usize, outcome: Result<RunRecord, StoreError>) {
    let record = outcome.unwrap_or_else(|e| panic!("run {i}'s commit failed: {e}"));
    assert_eq!(record.version, 2);
    let run = store.load_run(&format!("r{i}")).await.unwrap().unwrap();
    assert_eq!((run.version, &run.state), (2, &json!({ "n": 2, "run": i })));
    let report = verify_run(store, &run).await.unwrap();
    assert!(
        report.ok,
        "run {i}'s hash chain does not verify: {report:?}"
    );
}

async fn remove(store: SqliteStore, path: PathBuf) {
    store.close().await;
    common::remove_db_files(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_commit_in_a_batch_is_refused_and_the_others_commit() {
    let (store, leases, path) = claimed_runs().await;
    let stale = RUNS / 2;
    // Another store on the file moves one run to version 2: `store` still remembers it at
    // version 1, so its commit of that run enters the batch and must be refused there.
    let other = SqliteStore::open(&path).await.unwrap();
    other
        .commit_step(&leases[stale], &step(1, json!({ "n": "other" })), &[])
        .await
        .unwrap();
    other.close().await;
    let before = store.group_commit_stats();
    let outcomes = commit_all_at_once(&store, &leases).await;
    let after = store.group_commit_stats();
    let commits = after.commits - before.commits;
    let transactions = after.transactions - before.transactions;
    assert_eq!(commits, RUNS as u64);
    assert!(
        transactions < commits,
        "{commits} concurrent commits took {transactions} transactions: nothing was grouped"
    );
    assert!(after.waited > before.waited, "no commit waited for a batch");

    for (i, outcome) in outcomes.into_iter().enumerate() {
        let run = store.load_run(&format!("r{i}")).await.unwrap().unwrap();
        if i == stale {
            match outcome {
                Err(StoreError::Conflict {
                    expected: 1,
                    found: 2,
                    ..
                }) => {}
                other => panic!("the stale commit must be a conflict, got {other:?}"),
            }
            assert_eq!((run.version, &run.state), (2, &json!({ "n": "other" })));
        } else {
            let record = outcome.unwrap_or_else(|e| panic!("run {i}'s commit failed: {e}"));
            assert_eq!(record.version, 2);
            assert_eq!((run.version, &run.state), (2, &json!({ "n": 2, "run": i })));
        }
        let versions: Vec<u64> = store
            .history(&run.id)
            .await
            .unwrap()
            .iter()
            .map(|t| t.version)
            .collect();
        assert_eq!(versions, (0..=run.version).collect::<Vec<_>>());
        let report = verify_run(&store, &run).await.unwrap();
        assert!(
            report.ok,
            "run {i}'s hash chain does not verify: {report:?}"
        );
    }
    remove(store, path).await;
}

/// Fencing holds inside a batch: a commit under a lease another claim replaced is refused
/// with `LeaseLost`, and a final status ends the lease of the run it commits, while the
/// other commits of the batch go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_fencing_and_final_statuses_end_leases() {
    let (store, mut leases, path) = claimed_runs().await;
    // Run 0's lease expires and is claimed again: its old lease is stale.
    let old = leases[0].clone();
    store.expire_leases_of("w").await.unwrap();
    for (i, lease) in leases.iter_mut().enumerate() {
        *lease = store
            .claim_run(&format!("r{i}"), "w", Duration::from_hours(1))
            .await
            .unwrap()
            .unwrap()
            .lease;
    }
    leases[0] = old;
    let outcomes = join_all(leases.iter().enumerate().map(|(i, lease)| {
        let mut commit = step(1, json!({ "n": 2 }));
        if i == 1 {
            commit.status = RunStatus::Completed;
            commit.to_state = "Done".into();
        }
        let store = &store;
        async move { store.commit_step(lease, &commit, &[]).await }
    }))
    .await;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let run = store.load_run(&format!("r{i}")).await.unwrap().unwrap();
        match (i, outcome) {
            (0, Err(StoreError::LeaseLost { .. })) => assert_eq!(run.version, 1),
            (0, other) => panic!("a stale epoch must lose the lease, got {other:?}"),
            (1, Ok(record)) => {
                assert_eq!(record.status, RunStatus::Completed);
                assert_eq!(run.lease_owner, None, "a final status keeps its lease");
            }
            (_, Ok(record)) => {
                assert_eq!(record.version, 2);
                assert_eq!(run.lease_owner.as_deref(), Some("w"));
            }
            (_, Err(e)) => panic!("run {i}'s commit failed: {e}"),
        }
    }
    remove(store, path).await;
}

/// A commit that fails after some of its statements applied (here its version's row
/// cannot be inserted: a row at that version is already there) fails alone: its run stays
/// as it was, and the other commits of its batch are committed. The batch is written
/// without savepoints first, so this is the path where it is written again with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_failing_halfway_is_undone_alone() {
    let (store, leases, path) = claimed_runs().await;
    let bad = RUNS / 2;
    sqlx::query(
        "INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, epoch, \
         created_at, hash, payload_kind, payload) \
         VALUES ($1, 2, 'Start', 'Start', 'step', 'running', 1, 0, 'in the way', 'patch', '[]')",
    )
    .bind(format!("r{bad}"))
    .execute(store.pool())
    .await
    .unwrap();
    let before = store.group_commit_stats();
    let outcomes = commit_all_at_once(&store, &leases).await;
    let after = store.group_commit_stats();
    assert!(
        after.transactions - before.transactions < RUNS as u64,
        "nothing was grouped: the failing commit was not in a batch"
    );
    assert_eq!(
        after.retried,
        before.retried + 1,
        "the batch with the failing commit was not written again"
    );
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let run = store.load_run(&format!("r{i}")).await.unwrap().unwrap();
        if i == bad {
            assert!(
                outcome.is_err(),
                "the failing commit succeeded: {outcome:?}"
            );
            assert_eq!(
                (run.version, &run.state),
                (1, &json!({ "n": 1 })),
                "the failing commit's update of the run was kept"
            );
            continue;
        }
        assert_committed(&store, i, outcome).await;
    }
    remove(store, path).await;
}

/// An entry written again with its output inline drops the side-table row an earlier
/// write of it made for a large output (the journal's trigger `journal_output_inline`:
/// an entry's write is one statement), and reads back with the new output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_rewritten_inline_drops_its_large_output() {
    use agent_core::store::{
        CallStatus, EntryKind, JournalEntry, idempotency_key, input_hash, now_ms,
    };
    use agent_core::tool::ToolKind;
    let (store, leases, path) = claimed_runs().await;
    let input = json!({ "order": 7 });
    let mut entry = JournalEntry {
        run_id: "r0".into(),
        version: 1,
        seq: 0,
        kind: EntryKind::Tool,
        state: "Start".into(),
        name: "fetch_report".into(),
        tool_kind: Some(ToolKind::Write),
        input_hash: input_hash(&input),
        input,
        idempotency_key: Some(idempotency_key("r0", 1, 0)),
        status: CallStatus::Succeeded,
        output: Some(json!({ "report": "x".repeat(agent_sqlite::LARGE_OUTPUT_BYTES * 2) })),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 3,
        started_at: now_ms(),
        finished_at: Some(now_ms()),
    };
    let side_rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outputs WHERE run_id = 'r0'")
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    store.record_entry(&leases[0], &entry).await.unwrap();
    assert_eq!(
        side_rows().await,
        1,
        "a large output is kept in the side table"
    );
    entry.output = Some(json!({ "report": "short" }));
    store.record_entry(&leases[0], &entry).await.unwrap();
    assert_eq!(
        side_rows().await,
        0,
        "the large output's side row outlived it"
    );
    let journal = store.journal("r0", Some(1)).await.unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].output, Some(json!({ "report": "short" })));
    remove(store, path).await;
}

/// Signals sent at once share transactions as commits do, and each gets its own answer:
/// its id, or `NotFound` for a run that does not exist, without failing the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_at_once_are_grouped_and_each_gets_its_own_answer() {
    let (store, _leases, path) = claimed_runs().await;
    let before = store.group_commit_stats();
    let targets: Vec<String> = (0..RUNS)
        .map(|i| format!("r{i}"))
        .chain(["missing".to_owned()])
        .collect();
    let outcomes = join_all(targets.iter().enumerate().map(|(i, id)| {
        let store = &store;
        async move { store.send_signal(id, "go", &json!(i)).await }
    }))
    .await;
    let after = store.group_commit_stats();
    let (signals, transactions) = (
        after.commits - before.commits,
        after.transactions - before.transactions,
    );
    assert_eq!(signals, RUNS as u64 + 1);
    assert!(
        transactions < signals,
        "{signals} concurrent signals took {transactions} transactions: nothing was grouped"
    );
    let mut ids = Vec::new();
    for (i, (id, outcome)) in targets.iter().zip(outcomes).enumerate() {
        if id == "missing" {
            assert!(
                matches!(&outcome, Err(StoreError::NotFound(run)) if run == "missing"),
                "a signal to no run fails alone: {outcome:?}"
            );
            continue;
        }
        let signal = outcome.unwrap_or_else(|e| panic!("signal to {id} failed: {e}"));
        let pending = store.pending_signals(id).await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].id, &pending[0].payload), (signal, &json!(i)));
        ids.push(signal);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), RUNS, "each signal has an id of its own");
    remove(store, path).await;
}
