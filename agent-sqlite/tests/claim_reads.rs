//! A worker's claim on SQLite brings, with each run, what its first step would read with
//! statements of its own (its version span, whether its journal has an entry at its
//! version, a waiting run's pending signals): the claim's one statement replaces three per
//! run. The conformance check `check_claim_reads_match_the_reads` compares what is read
//! with the store's own reads; this test makes sure SQLite reads them at all.

mod common;

use std::time::Duration;

use agent_conformance::store_checks::step;
use agent_core::store::{
    CallStatus, Claimed, EntryKind, HistoryStore, JournalEntry, NewRun, RunStatus, RunStore,
    VersionSpan, input_hash, now_ms,
};
use agent_sqlite::SqliteStore;
use serde_json::json;

const TTL: Duration = Duration::from_mins(1);

fn started_call(run_id: &str, version: u64) -> JournalEntry {
    let input = json!({ "q": 1 });
    JournalEntry {
        run_id: run_id.to_owned(),
        version,
        seq: 0,
        kind: EntryKind::Tool,
        state: "Start".to_owned(),
        name: "lookup".to_owned(),
        tool_kind: None,
        input_hash: input_hash(&input),
        input,
        idempotency_key: None,
        status: CallStatus::Started,
        output: None,
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 0,
        started_at: now_ms(),
        finished_at: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_what_each_runs_first_step_reads() {
    let path = common::new_db_path("claim-reads-");
    let store = SqliteStore::open(&path).await.unwrap();
    let new = |id: &str| NewRun::new(id, "Reads", "fp-1", "Start", json!({}));

    // Interrupted after a call at version 1.
    store.create_run(new("journaled")).await.unwrap();
    let Claimed { lease, .. } = store
        .claim_run("journaled", "w1", TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .commit_step(&lease, &step(0, json!({ "at": 1 })), &[])
        .await
        .unwrap();
    store
        .record_entry(&lease, &started_call("journaled", 1))
        .await
        .unwrap();
    store.release_lease(&lease).await.unwrap();
    // Waiting for `go`, sent twice; and `other`, which it does not wait for.
    store.create_run(new("waiting")).await.unwrap();
    let Claimed { lease, .. } = store
        .claim_run("waiting", "w1", TTL)
        .await
        .unwrap()
        .unwrap();
    let mut wait = step(0, json!({ "at": 1 }));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some(agent_core::store::WaitingFor::signal("go"));
    store.commit_step(&lease, &wait, &[]).await.unwrap();
    store.release_lease(&lease).await.unwrap();
    for (name, n) in [("go", 1), ("other", 2), ("go", 3)] {
        store
            .send_signal("waiting", name, &json!({ "n": n }))
            .await
            .unwrap();
    }
    // New, never stepped.
    store.create_run(new("fresh")).await.unwrap();

    let claimed = store
        .claim_next(&["Reads".to_owned()], "w2", TTL, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3, "every run was claimed");
    for c in &claimed {
        let reads = c
            .reads
            .as_ref()
            .unwrap_or_else(|| panic!("run `{}` was claimed without its reads", c.record.id));
        let at = |first, last| {
            Some(VersionSpan {
                first,
                last,
                count: last - first + 1,
            })
        };
        match c.record.id.as_str() {
            "journaled" => {
                assert_eq!(reads.span, at(0, 1));
                assert!(reads.journaled_at_version, "its call at version 1 was read");
                assert_eq!(
                    reads.pending_signals, None,
                    "a running run's signals are not read"
                );
            }
            "waiting" => {
                assert_eq!(reads.span, at(0, 1));
                assert!(!reads.journaled_at_version);
                let pending = reads
                    .pending_signals
                    .as_ref()
                    .expect("a waiting run's signals");
                let got: Vec<(&str, i64)> = (pending.iter())
                    .map(|s| (s.name.as_str(), s.payload["n"].as_i64().unwrap()))
                    .collect();
                assert_eq!(got, [("go", 1), ("other", 2), ("go", 3)], "oldest first");
                assert_eq!(*pending, store.pending_signals("waiting").await.unwrap());
            }
            "fresh" => {
                assert_eq!(reads.span, at(0, 0));
                assert!(!reads.journaled_at_version);
            }
            other => panic!("unexpected run `{other}`"),
        }
    }

    // By id, the same.
    store.release_lease(&claimed[0].lease).await.unwrap();
    let again = store
        .claim_run(&claimed[0].record.id, "w3", TTL)
        .await
        .unwrap()
        .expect("a released run is claimed");
    assert_eq!(again.reads, claimed[0].reads);

    store.close().await;
    common::remove_db_files(&path);
}
