//! Group commit: commits queued behind a statement in flight go to the database together,
//! and each keeps its own answer. Every test holds one run's row lock from another
//! transaction, so that run's commit stays in flight (the store allows one at a time here)
//! while the commits under test queue behind it; releasing the lock lets them go as one
//! grouped statement.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_conformance::store_checks;
use agent_core::store::{HistoryStore, Lease, NewRun, RunRecord, RunStore, StepCommit, StoreError};
use agent_pg::{GroupCommitStats, PgStore};
use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};
use tokio::task::JoinHandle;

const HOUR: Duration = Duration::from_hours(1);

/// A migrated store in a schema of its own that allows one commit statement in flight.
async fn store() -> Option<Arc<PgStore>> {
    let url = common::database_url()?;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = PgStore::connect(&url, &schema)
        .await
        .expect("connect")
        .with_group_commit(1, 64);
    store.migrate().await.expect("migrate");
    Some(Arc::new(store))
}

/// Create and claim `id`.
async fn claimed(store: &PgStore, id: &str) -> Lease {
    store
        .create_run(NewRun::new(
            id,
            "Checkout",
            "fp",
            "Browsing",
            json!({ "cart": [] }),
        ))
        .await
        .expect("create");
    store
        .claim_run(id, "w", HOUR)
        .await
        .expect("claim")
        .expect("free run")
        .lease
}

/// A step to version `expected + 1` whose state holds `cart`.
fn step(expected: u64, cart: &str) -> StepCommit {
    store_checks::step(expected, json!({ "cart": [cart] }))
}

fn spawn_commit(
    store: &Arc<PgStore>,
    lease: &Lease,
    commit: StepCommit,
) -> JoinHandle<Result<RunRecord, StoreError>> {
    let (store, lease) = (store.clone(), lease.clone());
    tokio::spawn(async move { store.commit_step(&lease, &commit, &[]).await })
}

async fn until(store: &PgStore, what: &str, done: impl Fn(GroupCommitStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(store.group_commit_stats()) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            store.group_commit_stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Hold the row lock of run `held` and start its commit, which waits for the lock while
/// holding the store's only commit slot. Returns the lock's transaction and the commit.
async fn stall_commits(
    store: &Arc<PgStore>,
) -> (
    Transaction<'static, Postgres>,
    JoinHandle<Result<RunRecord, StoreError>>,
) {
    let lease = claimed(store, "held").await;
    let mut lock = store.pool().begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM runs WHERE id = 'held' FOR UPDATE")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let before = store.group_commit_stats().statements;
    let held = spawn_commit(store, &lease, step(0, "held"));
    until(store, "the held commit to be sent", |s| {
        s.statements == before + 1
    })
    .await;
    (lock, held)
}

async fn state_of(store: &PgStore, id: &str) -> (u64, Value) {
    let run = store.load_run(id).await.expect("load").expect("run");
    (run.version, run.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_commits_keep_each_runs_fence() {
    let Some(store) = store().await else {
        return;
    };
    let url = common::database_url().unwrap();
    // A second store instance plays another worker process moving two runs behind this
    // store's back, so this store's commits of them reach the statement with stale
    // versions or epochs.
    let other = PgStore::connect(&url, store.schema())
        .await
        .expect("connect");
    let goods: Vec<Lease> = {
        let mut v = Vec::new();
        for i in 0..10 {
            v.push(claimed(&store, &format!("good-{i}")).await);
        }
        v
    };
    let moved = claimed(&store, "moved").await;
    other
        .commit_step(&moved, &step(0, "other"), &[])
        .await
        .expect("other worker commits");
    let taken = claimed(&store, "taken").await;
    other
        .claim_run("taken", "w", HOUR)
        .await
        .expect("claim")
        .expect("same owner may claim again");

    let (lock, held) = stall_commits(&store).await;
    let good_commits: Vec<_> = goods
        .iter()
        .enumerate()
        .map(|(i, l)| spawn_commit(&store, l, step(0, &format!("item {i}"))))
        .collect();
    let moved_commit = spawn_commit(&store, &moved, step(0, "stale version"));
    let taken_commit = spawn_commit(&store, &taken, step(0, "stale epoch"));
    until(&store, "12 queued commits", |s| s.queued == 12).await;
    lock.commit().await.expect("release the lock");

    assert_eq!(held.await.unwrap().expect("held commit").version, 1);
    for (i, c) in good_commits.into_iter().enumerate() {
        let record = c.await.unwrap().expect("good commit");
        assert_eq!(record.version, 1);
        assert_eq!(record.lease_owner.as_deref(), Some("w"));
        assert_eq!(
            state_of(&store, &format!("good-{i}")).await,
            (1, json!({ "cart": [format!("item {i}")] }))
        );
        assert_eq!(
            store
                .history(&format!("good-{i}"))
                .await
                .expect("history")
                .len(),
            2
        );
    }
    assert!(
        matches!(
            moved_commit.await.unwrap(),
            Err(StoreError::Conflict {
                expected: 0,
                found: 1,
                ..
            })
        ),
        "a stale version in a grouped statement is a conflict"
    );
    assert_eq!(
        state_of(&store, "moved").await.1,
        json!({ "cart": ["other"] })
    );
    assert!(
        matches!(
            taken_commit.await.unwrap(),
            Err(StoreError::LeaseLost { .. })
        ),
        "a stale epoch in a grouped statement loses the lease"
    );
    assert_eq!(state_of(&store, "taken").await.0, 0);
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.commits, stats.regrouped),
        (2, 13, 0),
        "the held commit alone, then the 12 queued ones in one statement"
    );
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grouped_statement_is_sent_again_one_commit_at_a_time() {
    let Some(store) = store().await else {
        return;
    };
    let mut goods = Vec::new();
    for i in 0..5 {
        goods.push(claimed(&store, &format!("good-{i}")).await);
    }
    // A history with a row at the version this run's commit will write: its insert
    // violates the primary key, and the server refuses the whole grouped statement.
    let forked = claimed(&store, "forked").await;
    sqlx::query(
        "INSERT INTO transitions (run_id, version, from_state, to_state, kind, status, epoch, \
         hash, payload_kind, payload) \
         VALUES ('forked', 1, 'Browsing', 'Browsing', 'step', 'running', 1, 'x', 'patch', '[]')",
    )
    .execute(store.pool())
    .await
    .expect("plant a row");

    let (lock, held) = stall_commits(&store).await;
    let good_commits: Vec<_> = goods
        .iter()
        .map(|l| spawn_commit(&store, l, step(0, "x")))
        .collect();
    let forked_commit = spawn_commit(&store, &forked, step(0, "x"));
    until(&store, "6 queued commits", |s| s.queued == 6).await;
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    for c in good_commits {
        assert_eq!(c.await.unwrap().expect("good commit").version, 1);
    }
    match forked_commit.await.unwrap() {
        Err(StoreError::Backend(message)) => {
            assert!(message.message().contains("duplicate key"), "{message}");
        }
        other => panic!("expected the forked run's own error, got {other:?}"),
    }
    assert_eq!(state_of(&store, "forked").await.0, 0);
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.commits, stats.regrouped),
        (8, 13, 1),
        "held alone, the refused group of 6, then the 6 again one by one"
    );
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_commit_whose_caller_stopped_waiting_is_not_sent() {
    let Some(store) = store().await else {
        return;
    };
    let dropped = claimed(&store, "dropped").await;
    let kept = claimed(&store, "kept").await;
    let (lock, held) = stall_commits(&store).await;
    let dropped_commit = spawn_commit(&store, &dropped, step(0, "never"));
    until(&store, "1 queued commit", |s| s.queued == 1).await;
    dropped_commit.abort();
    assert!(dropped_commit.await.unwrap_err().is_cancelled());
    let kept_commit = spawn_commit(&store, &kept, step(0, "kept"));
    until(&store, "2 queued commits", |s| s.queued == 2).await;
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    assert_eq!(kept_commit.await.unwrap().expect("kept commit").version, 1);
    assert_eq!(state_of(&store, "dropped").await.0, 0);
    assert_eq!(store.history("dropped").await.expect("history").len(), 1);
    let stats = store.group_commit_stats();
    assert_eq!((stats.statements, stats.commits, stats.queued), (2, 2, 0));
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_queued_commits_of_one_run_at_one_version_apply_once() {
    let Some(store) = store().await else {
        return;
    };
    let lease = claimed(&store, "twice").await;
    let (lock, held) = stall_commits(&store).await;
    let first = spawn_commit(&store, &lease, step(0, "first"));
    until(&store, "1 queued commit", |s| s.queued == 1).await;
    let second = spawn_commit(&store, &lease, step(0, "second"));
    until(&store, "2 queued commits", |s| s.queued == 2).await;
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    assert_eq!(first.await.unwrap().expect("first commit").version, 1);
    assert!(
        matches!(
            second.await.unwrap(),
            Err(StoreError::Conflict {
                expected: 0,
                found: 1,
                ..
            })
        ),
        "the second commit at version 0 goes in a later statement and finds version 1"
    );
    assert_eq!(
        state_of(&store, "twice").await,
        (1, json!({ "cart": ["first"] }))
    );
    assert_eq!(store.history("twice").await.expect("history").len(), 2);
    let stats = store.group_commit_stats();
    assert_eq!((stats.statements, stats.commits), (3, 3));
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_stop_when_the_pool_is_closed() {
    let Some(store) = store().await else {
        return;
    };
    let lease = claimed(&store, "closing").await;
    store
        .commit_step(&lease, &step(0, "before"), &[])
        .await
        .expect("a commit opens the store's commit connection");
    store.pool().close().await;
    let refused = store.commit_step(&lease, &step(1, "after"), &[]).await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "a closed store must not commit on its own connections: {refused:?}"
    );
    let url = common::database_url().unwrap();
    let other = PgStore::connect(&url, store.schema())
        .await
        .expect("connect");
    assert_eq!(state_of(&other, "closing").await.0, 1);
    common::drop_store(Arc::new(other)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_consuming_commits_are_grouped_and_each_checks_its_signal() {
    let Some(store) = store().await else {
        return;
    };
    let mut goods = Vec::new();
    for i in 0..5 {
        let id = format!("signalled-{i}");
        let lease = claimed(&store, &id).await;
        let signal = store
            .send_signal(&id, "go", &json!(i))
            .await
            .expect("signal");
        goods.push((lease, signal));
    }
    // A commit naming another run's signal: its row must not apply, and must not consume
    // that signal for the run it belongs to.
    let wrong = claimed(&store, "wrong").await;
    let sent = store.group_commit_stats();
    assert_eq!(
        (sent.statements, sent.commits),
        (5, 5),
        "signals sent one at a time go one statement each"
    );
    let (lock, held) = stall_commits(&store).await;
    let consuming = |expected: u64, cart: &str, signal: i64| StepCommit {
        consumed_signal: Some(signal),
        spend: None,
        ..step(expected, cart)
    };
    let good_commits: Vec<_> = goods
        .iter()
        .map(|(lease, signal)| spawn_commit(&store, lease, consuming(0, "woken", *signal)))
        .collect();
    let wrong_commit = spawn_commit(&store, &wrong, consuming(0, "woken", goods[0].1));
    until(&store, "6 queued commits", |s| s.queued == 6).await;
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    for (i, c) in good_commits.into_iter().enumerate() {
        assert_eq!(c.await.unwrap().expect("good commit").version, 1);
        let id = format!("signalled-{i}");
        assert!(
            store
                .pending_signals(&id)
                .await
                .expect("pending")
                .is_empty(),
            "the commit consumed {id}'s signal"
        );
    }
    match wrong_commit.await.unwrap() {
        Err(StoreError::Backend(message)) => {
            assert!(message.message().contains("is not pending"), "{message}");
        }
        other => panic!("expected the wrong signal to be refused, got {other:?}"),
    }
    assert_eq!(state_of(&store, "wrong").await.0, 0);
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.commits, stats.regrouped),
        (5 + 2, 5 + 7, 0),
        "the held commit alone, then the 6 signal-consuming ones in one statement"
    );
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_at_once_are_grouped_and_each_gets_its_own_answer() {
    let Some(store) = store().await else {
        return;
    };
    for i in 0..10 {
        claimed(&store, &format!("good-{i}")).await;
    }
    let (lock, held) = stall_commits(&store).await;
    let spawn_signal = |id: &str, payload: Value| {
        let (store, id) = (store.clone(), id.to_owned());
        tokio::spawn(async move { store.send_signal(&id, "go", &payload).await })
    };
    let good_signals: Vec<_> = (0..10)
        .map(|i| spawn_signal(&format!("good-{i}"), json!(i)))
        .collect();
    let missing = spawn_signal("missing", json!("lost"));
    until(&store, "11 queued signals", |s| s.queued == 11).await;
    // A second signal to a run already in the batch waits for the next statement.
    let second = spawn_signal("good-0", json!("second"));
    until(&store, "12 queued signals", |s| s.queued == 12).await;
    assert!(good_signals.iter().all(|s| !s.is_finished()));
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    let mut ids = Vec::new();
    for (i, s) in good_signals.into_iter().enumerate() {
        let id = s.await.unwrap().expect("good signal");
        let pending = store
            .pending_signals(&format!("good-{i}"))
            .await
            .expect("pending");
        assert_eq!(pending[0].id, id, "the answer is the stored signal's id");
        assert_eq!(pending[0].payload, json!(i));
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10, "each signal has an id of its own");
    assert!(
        matches!(missing.await.unwrap(), Err(StoreError::NotFound(id)) if id == "missing"),
        "a signal to no run fails alone"
    );
    let second = second.await.unwrap().expect("second signal");
    let pending = store.pending_signals("good-0").await.expect("pending");
    assert_eq!(
        pending.iter().map(|s| s.id).collect::<Vec<_>>(),
        [pending[0].id, second],
        "the second signal comes after the first"
    );
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.commits, stats.regrouped),
        (3, 13, 0),
        "the held commit alone, the 11 signals in one statement, then the second alone"
    );
    common::drop_store(store).await;
}

/// A finished read call of `run_id` at version 0, entry `seq`, answering `output`.
fn read_entry(run_id: &str, seq: u32, output: Value) -> agent_core::store::JournalEntry {
    use agent_core::store::{CallStatus, EntryKind, JournalEntry, input_hash, now_ms};
    let input = json!({ "seq": seq });
    JournalEntry {
        run_id: run_id.to_owned(),
        version: 0,
        seq,
        kind: EntryKind::Tool,
        state: "Browsing".to_owned(),
        name: "search".to_owned(),
        tool_kind: Some(agent_core::ToolKind::Read),
        input_hash: input_hash(&input),
        input,
        idempotency_key: None,
        status: CallStatus::Succeeded,
        output: Some(output),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 3,
        started_at: now_ms(),
        finished_at: Some(now_ms()),
    }
}

/// Ten runs `good-0`..`good-9` claimed by `store`, and run `taken`, which another store
/// (another worker process) claimed since: `store`'s lease on it is stale.
async fn ten_good_and_one_taken(store: &PgStore) -> (Vec<Lease>, Lease) {
    let url = common::database_url().unwrap();
    let other = PgStore::connect(&url, store.schema())
        .await
        .expect("connect");
    let mut goods = Vec::new();
    for i in 0..10 {
        goods.push(claimed(store, &format!("good-{i}")).await);
    }
    let taken = claimed(store, "taken").await;
    other
        .claim_run("taken", "w", HOUR)
        .await
        .expect("claim")
        .expect("same owner may claim again");
    (goods, taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_journal_entries_keep_each_runs_fence() {
    let Some(store) = store().await else {
        return;
    };
    let (goods, taken) = ten_good_and_one_taken(&store).await;

    let (lock, held) = stall_commits(&store).await;
    let spawn_record = |lease: &Lease, seq: u32, output: Value| {
        let (store, lease) = (store.clone(), lease.clone());
        let entry = read_entry(&lease.run_id, seq, output);
        tokio::spawn(async move { store.record_entry(&lease, &entry).await })
    };
    let good_records: Vec<_> = goods
        .iter()
        .enumerate()
        .map(|(i, l)| spawn_record(l, 0, json!({ "found": i })))
        .collect();
    let taken_record = spawn_record(&taken, 0, json!("stale"));
    until(&store, "11 queued entries", |s| s.queued == 11).await;
    // Nothing is answered before its statement is committed.
    assert!(good_records.iter().all(|r| !r.is_finished()));
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    for (i, r) in good_records.into_iter().enumerate() {
        r.await.unwrap().expect("good entry");
        let journal = store
            .journal(&format!("good-{i}"), None)
            .await
            .expect("journal");
        assert_eq!(journal.len(), 1);
        assert_eq!(journal[0].output, Some(json!({ "found": i })));
    }
    assert!(
        matches!(
            taken_record.await.unwrap(),
            Err(StoreError::LeaseLost { .. })
        ),
        "a stale epoch in a grouped statement of entries loses the lease"
    );
    assert!(
        store
            .journal("taken", None)
            .await
            .expect("journal")
            .is_empty(),
        "a fenced-out entry writes nothing"
    );
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.commits, stats.regrouped),
        (2, 12, 0),
        "the held commit alone, then the 11 queued entries in one statement"
    );
    common::drop_store(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_commits_carry_their_entries_and_each_keeps_its_fence() {
    let Some(store) = store().await else {
        return;
    };
    let (goods, taken) = ten_good_and_one_taken(&store).await;

    let (lock, held) = stall_commits(&store).await;
    let spawn_carrying = |lease: &Lease, i: usize| {
        let (store, lease) = (store.clone(), lease.clone());
        // Two reads per step: both rows of one run go in the one statement of entries.
        let entries = [
            read_entry(&lease.run_id, 0, json!({ "found": i })),
            read_entry(&lease.run_id, 1, json!({ "also": i })),
        ];
        let commit = step(0, &format!("item {i}"));
        tokio::spawn(async move { store.commit_step(&lease, &commit, &entries).await })
    };
    let good_commits: Vec<_> = goods
        .iter()
        .enumerate()
        .map(|(i, l)| spawn_carrying(l, i))
        .collect();
    let taken_commit = spawn_carrying(&taken, 99);
    until(&store, "11 queued commits", |s| s.queued == 11).await;
    lock.commit().await.expect("release the lock");

    held.await.unwrap().expect("held commit");
    for (i, c) in good_commits.into_iter().enumerate() {
        assert_eq!(c.await.unwrap().expect("good commit").version, 1);
        let journal = store
            .journal(&format!("good-{i}"), None)
            .await
            .expect("journal");
        let outputs: Vec<_> = journal.iter().map(|e| e.output.clone()).collect();
        assert_eq!(
            outputs,
            [Some(json!({ "found": i })), Some(json!({ "also": i }))]
        );
    }
    assert!(
        matches!(
            taken_commit.await.unwrap(),
            Err(StoreError::LeaseLost { .. })
        ),
        "a stale epoch's commit with entries loses the lease"
    );
    assert_eq!(state_of(&store, "taken").await.0, 0);
    assert!(
        store
            .journal("taken", None)
            .await
            .expect("journal")
            .is_empty(),
        "a fenced-out commit's entries are not written"
    );
    let stats = store.group_commit_stats();
    assert_eq!(
        (stats.statements, stats.regrouped),
        (3, 0),
        "the held commit alone, then one statement for the 22 entries the queued commits \
         carry and one for the 10 commits whose entries were written"
    );
    common::drop_store(store).await;
}
