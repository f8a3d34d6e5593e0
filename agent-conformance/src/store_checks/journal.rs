//! The journal, signals, the tool registry and the statistics computed from the journal.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, create, entry, step, stored};
use agent_core::store::WaitingFor;
use agent_core::store::{
    CallStatus, Claimed, EntryKind, EventScope, RunStatus, Store, StoreError, now_ms,
};
use agent_core::tool::{ErrorClass, ToolKind};

/// Journal entries are visible once recorded, replaced on the same key, ordered by
/// `(version, seq)`, filtered by version, and large outputs round-trip.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_journal_is_durable_and_ordered(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "journal", json!({})).await?;
    let lease = claim(&store, &r.id, "w").await?;
    let big: String = "x".repeat(200 * 1024);
    let mut failed = entry(&r.id, 0, 2, CallStatus::Failed, None);
    failed.error_class = Some(ErrorClass::Timeout);
    failed.error_code = Some("tool.timeout".into());
    failed.error_message = Some("timed out after 5s".into());
    failed.attempts = 3;
    failed.kind = EntryKind::Decision;
    failed.tool_kind = None;
    failed.idempotency_key = None;
    failed.name = "router".into();
    for e in [
        entry(&r.id, 0, 1, CallStatus::Started, None),
        failed.clone(),
        entry(
            &r.id,
            0,
            0,
            CallStatus::Succeeded,
            Some(json!({ "big": big })),
        ),
    ] {
        store.record_entry(&lease, &e).await.ctx("record_entry")?;
    }
    let j = store.journal(&r.id, None).await.ctx("journal")?;
    let keys: Vec<(u64, u32)> = j.iter().map(|e| (e.version, e.seq)).collect();
    ensure!(keys == [(0, 0), (0, 1), (0, 2)], "journal order {keys:?}");
    ensure!(
        j[2] == failed,
        "entry did not round-trip: {:?} vs {failed:?}",
        j[2]
    );
    ensure!(
        j[0].output
            .as_ref()
            .and_then(|o| o["big"].as_str())
            .map(str::len)
            == Some(200 * 1024),
        "a large output did not round-trip"
    );
    // Replace: started → succeeded on the same key. The call keeps the time it first
    // started.
    let first_started = j[1].started_at;
    let mut done = entry(
        &r.id,
        0,
        1,
        CallStatus::Succeeded,
        Some(json!({ "charged": 42 })),
    );
    done.started_at = first_started + 5_000;
    store
        .record_entry(&lease, &done)
        .await
        .ctx("record_entry replace")?;
    let j = store.journal(&r.id, Some(0)).await.ctx("journal")?;
    ensure!(
        j.len() == 3,
        "replacing an entry changed the count to {}",
        j.len()
    );
    done.started_at = first_started;
    ensure!(j[1] == done, "replaced entry reads back as {:?}", j[1]);
    // Entries survive the commit and stay ordered across versions.
    store
        .commit_step(&lease, &step(0, json!({ "a": 1 })), &[])
        .await
        .ctx("commit_step")?;
    store
        .record_entry(&lease, &entry(&r.id, 1, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry")?;
    let all = store.journal(&r.id, None).await.ctx("journal")?;
    let keys: Vec<(u64, u32)> = all.iter().map(|e| (e.version, e.seq)).collect();
    ensure!(
        keys == [(0, 0), (0, 1), (0, 2), (1, 0)],
        "journal order {keys:?}"
    );
    let v1 = store.journal(&r.id, Some(1)).await.ctx("journal")?;
    ensure!(
        v1.len() == 1,
        "journal filtered by version has {} entries",
        v1.len()
    );
    Ok(())
}

/// A commit that carries journal entries (`commit_step`) makes them durable
/// with the version (large outputs included); a stale lease's commit writes neither the
/// version nor its entries.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_commit_carries_entries(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "commit-entries", json!({ "n": 0 })).await?;
    let Claimed { lease: old, .. } = store
        .claim_run(&r.id, "old", Duration::from_millis(150))
        .await
        .ctx("claim_run")?
        .ok_or("first claim returned None")?;
    let big: String = "y".repeat(200 * 1024);
    let read = |seq: u32, output: serde_json::Value| {
        let mut e = entry(&r.id, 0, seq, CallStatus::Succeeded, Some(output));
        e.tool_kind = Some(ToolKind::Read);
        e.idempotency_key = None;
        e
    };
    let carried = [
        read(0, json!({ "rows": 3 })),
        read(1, json!({ "big": big })),
    ];
    let record = store
        .commit_step(&old, &step(0, json!({ "n": 1 })), &carried)
        .await
        .ctx("commit_step with entries")?;
    ensure!(
        record.version == 1,
        "the commit returned version {}",
        record.version
    );
    let j = store.journal(&r.id, Some(0)).await.ctx("journal")?;
    ensure!(
        j.len() == 2 && j[0] == carried[0],
        "the entries carried by the commit read back as {j:?}"
    );
    ensure!(
        j[1].output
            .as_ref()
            .and_then(|o| o["big"].as_str())
            .map(str::len)
            == Some(200 * 1024),
        "a large output carried by a commit did not round-trip"
    );
    // The entries' events come before the version's, as when they are recorded first.
    let events = super::events::all_events(&store, &EventScope::Run(r.id.clone())).await?;
    let types: Vec<String> = events.iter().map(super::events::type_of).collect();
    let expected = [
        "run_created",
        "tool_started",
        "tool_finished",
        "tool_started",
        "tool_finished",
        "transition_committed",
    ];
    ensure!(
        types == expected,
        "events of a commit with entries: {types:?}, expected {expected:?}"
    );
    // Another worker takes the run over: the old holder's commit with entries is fenced.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Claimed { lease: new, .. } = store
        .claim_run(&r.id, "new", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of an expired lease returned None")?;
    let stale = [read(0, json!("stale")), read(1, json!("stale"))].map(|mut e| {
        e.version = 1;
        e
    });
    ensure!(
        matches!(
            store
                .commit_step(&old, &step(1, json!({ "n": "stale" })), &stale)
                .await,
            Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. })
        ),
        "a stale commit with entries must be LeaseLost or Conflict"
    );
    ensure!(
        stored(&store, &r.id).await?.version == 1,
        "a stale commit with entries moved the run"
    );
    let j = store.journal(&r.id, Some(1)).await.ctx("journal")?;
    ensure!(j.is_empty(), "a stale commit's entries were written: {j:?}");
    store
        .commit_step(&new, &step(1, json!({ "n": 2 })), &[])
        .await
        .ctx("commit with no entries by the current holder")?;
    Ok(())
}

/// A keyed signal (`send_signal_once`) is stored once per run and key: a second send of
/// the key (another payload, even another name) stores nothing and names the first, also
/// when eight senders race; keys are per run; bad keys and unknown runs are refused with
/// nothing stored.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_keyed_signals_stored_once(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "keyed", json!({})).await?;
    let other_run = create(&store, "keyed-other", json!({})).await?;
    let first = store
        .send_signal_once(&r.id, "approval", &json!({ "ok": true }), "msg-1")
        .await
        .ctx("send_signal_once")?;
    ensure!(!first.duplicate, "a first send was called a duplicate");
    let again = store
        .send_signal_once(&r.id, "comment", &json!({ "ok": false }), "msg-1")
        .await
        .ctx("send_signal_once again")?;
    ensure!(
        again.duplicate && again.id == first.id,
        "a second send of key msg-1 must store nothing and name signal {}: {again:?}",
        first.id
    );
    let second = store
        .send_signal_once(&r.id, "comment", &json!("hi"), "msg-2")
        .await
        .ctx("send_signal_once msg-2")?;
    ensure!(
        !second.duplicate && second.id > first.id,
        "another key must store another signal, with a greater id: {second:?}"
    );
    let elsewhere = store
        .send_signal_once(&other_run.id, "approval", &json!({}), "msg-1")
        .await
        .ctx("send_signal_once to another run")?;
    ensure!(
        !elsewhere.duplicate,
        "a key is per run: another run's signal under msg-1 was called a duplicate"
    );
    let unkeyed = store
        .send_signal(&r.id, "comment", &json!("plain"))
        .await
        .ctx("send_signal")?;
    for bad in [String::new(), "k".repeat(201), "a\0b".to_owned()] {
        ensure!(
            store
                .send_signal_once(&r.id, "comment", &json!(null), &bad)
                .await
                .is_err(),
            "a bad dedup key ({} bytes) was taken",
            bad.len()
        );
    }
    ensure!(
        matches!(
            store
                .send_signal_once("no-such-run", "approval", &json!({}), "msg-1")
                .await,
            Err(StoreError::NotFound(_))
        ),
        "a keyed signal to an unknown run must be NotFound"
    );
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&store);
            let run = r.id.clone();
            tokio::spawn(async move {
                store
                    .send_signal_once(&run, "burst", &json!(i), "burst-key")
                    .await
            })
        })
        .collect();
    let mut receipts = Vec::new();
    for racer in racers {
        receipts.push(
            racer
                .await
                .map_err(|e| format!("a sender panicked: {e}"))?
                .ctx("racing send_signal_once")?,
        );
    }
    ensure!(
        store
            .signal_by_key(&r.id, "msg-2")
            .await
            .ctx("signal_by_key")?
            == Some(second.id)
            && store
                .signal_by_key(&r.id, "msg-3")
                .await
                .ctx("signal_by_key")?
                .is_none(),
        "signal_by_key must name msg-2's signal and none for msg-3"
    );
    let stored_now = receipts.iter().filter(|r| !r.duplicate).count();
    ensure!(
        stored_now == 1 && receipts.iter().all(|r| r.id == receipts[0].id),
        "eight racing sends of one key must store one signal and all name it: {receipts:?}"
    );
    let pending = store.pending_signals(&r.id).await.ctx("pending_signals")?;
    let ids: Vec<i64> = pending.iter().map(|s| s.id).collect();
    ensure!(
        ids == [first.id, second.id, unkeyed, receipts[0].id],
        "pending signals must be the first of msg-1, msg-2, the unkeyed one and one burst: {pending:?}"
    );
    ensure!(
        pending[0].name == "approval" && pending[0].payload == json!({ "ok": true }),
        "the duplicate replaced the first signal's name or payload: {:?}",
        pending[0]
    );
    Ok(())
}

/// Signals sent before the wait are kept; the waiting run becomes claimable; consuming a
/// signal in a commit marks it exactly once; a second consumption is refused.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_signals_kept_and_consumed_once(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "signal", json!({})).await?;
    let early = store
        .send_signal(&r.id, "approval", &json!({ "ok": true }))
        .await
        .ctx("send_signal")?;
    let other = store
        .send_signal(&r.id, "comment", &json!("hi"))
        .await
        .ctx("send_signal")?;
    ensure!(other > early, "signal ids must increase");
    let lease = claim(&store, &r.id, "w").await?;
    let mut wait = step(0, json!({ "waiting": true }));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some("approval".into());
    let rec = store
        .commit_step(&lease, &wait, &[])
        .await
        .ctx("commit wait")?;
    ensure!(rec.status == RunStatus::Waiting, "run is not waiting");
    ensure!(
        rec.waiting_for == Some(WaitingFor::signal("approval")),
        "waiting_for not stored"
    );
    store.release_lease(&lease).await.ctx("release_lease")?;
    let pending = store.pending_signals(&r.id).await.ctx("pending_signals")?;
    ensure!(
        pending.iter().map(|s| s.id).collect::<Vec<_>>() == [early, other],
        "pending signals, oldest first, must be [{early}, {other}]: {pending:?}"
    );
    ensure!(
        pending[0].payload == json!({ "ok": true }) && pending[0].name == "approval",
        "signal payload did not round-trip"
    );
    let claimed = store
        .claim_next(&["Agent".into()], "w2", LONG, 10)
        .await
        .ctx("claim_next")?;
    let Some(Claimed { lease: lease2, .. }) = claimed
        .into_iter()
        .find(|Claimed { lease: l, .. }| l.run_id == r.id)
    else {
        return Err("a waiting run whose signal arrived early was not claimed".into());
    };
    let mut resume = step(1, json!({ "approved": true }));
    resume.consumed_signal = Some(early);
    let rec = store
        .commit_step(&lease2, &resume, &[])
        .await
        .ctx("commit consuming")?;
    ensure!(
        rec.status == RunStatus::Running && rec.waiting_for.is_none(),
        "run did not resume"
    );
    let pending = store.pending_signals(&r.id).await.ctx("pending_signals")?;
    ensure!(
        pending.iter().map(|s| s.id).collect::<Vec<_>>() == [other],
        "a consumed signal is still pending, or another vanished: {pending:?}"
    );
    let mut again = step(2, json!({ "approved": "twice" }));
    again.consumed_signal = Some(early);
    ensure!(
        store.commit_step(&lease2, &again, &[]).await.is_err(),
        "a signal was consumed twice"
    );
    let cur = stored(&store, &r.id).await?;
    ensure!(cur.version == 2, "a refused consumption still committed");
    ensure!(
        matches!(
            store.send_signal("no-such-run", "x", &json!(null)).await,
            Err(StoreError::NotFound(_))
        ),
        "a signal to an unknown run must be NotFound"
    );
    Ok(())
}

/// The tool registry: tools are enabled until switched off; switches are listed with reason.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_tool_registry(store: Arc<dyn Store>) -> CheckResult {
    ensure!(
        store.tool_enabled("never_seen").await.ctx("tool_enabled")?,
        "unknown tools must be enabled"
    );
    store
        .set_tool_enabled("charge_payment", false, Some("provider outage"))
        .await
        .ctx("set_tool_enabled")?;
    ensure!(
        !store
            .tool_enabled("charge_payment")
            .await
            .ctx("tool_enabled")?,
        "a disabled tool is still enabled"
    );
    store
        .set_tool_enabled("search", true, None)
        .await
        .ctx("set_tool_enabled")?;
    let switches = store.tool_switches().await.ctx("tool_switches")?;
    let pay = switches
        .iter()
        .find(|s| s.tool == "charge_payment")
        .ok_or("tool_switches misses a switched tool")?;
    ensure!(
        !pay.enabled && pay.reason.as_deref() == Some("provider outage"),
        "switch not stored with its reason: {pay:?}"
    );
    ensure!(
        switches.iter().any(|s| s.tool == "search" && s.enabled),
        "enabled switch missing"
    );
    store
        .set_tool_enabled("charge_payment", true, None)
        .await
        .ctx("set_tool_enabled")?;
    ensure!(
        store
            .tool_enabled("charge_payment")
            .await
            .ctx("tool_enabled")?,
        "a re-enabled tool is still disabled"
    );
    Ok(())
}

/// `tool_stats` agrees with the statistics computed from the journal itself.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_tool_stats_match_the_journal(store: Arc<dyn Store>) -> CheckResult {
    let since = now_ms() - 60_000;
    let r = create(&store, "stats", json!({})).await?;
    let lease = claim(&store, &r.id, "w").await?;
    for seq in 0..12u32 {
        let mut e = entry(&r.id, 0, seq, CallStatus::Succeeded, Some(json!(seq)));
        e.duration_ms = u64::from(seq) * 7 + 1;
        e.name = if seq % 3 == 0 {
            "search"
        } else {
            "charge_payment"
        }
        .into();
        if seq % 4 == 1 {
            e.status = CallStatus::Failed;
            e.error_class = Some(ErrorClass::Timeout);
            e.error_code = Some(
                if seq == 5 {
                    "tool.permanent"
                } else {
                    "tool.timeout"
                }
                .into(),
            );
        }
        if seq == 11 {
            e.status = CallStatus::Started;
        }
        if seq == 10 {
            e.kind = EntryKind::Decision;
            e.name = "router".into();
        }
        store.record_entry(&lease, &e).await.ctx("record_entry")?;
    }
    let mut old = entry(&r.id, 0, 20, CallStatus::Succeeded, None);
    old.started_at = since - 3_600_000;
    store.record_entry(&lease, &old).await.ctx("record_entry")?;
    let journal = store.journal(&r.id, None).await.ctx("journal")?;
    let want = agent_core::store::compute_tool_stats(&journal, since);
    let got = store.tool_stats(since).await.ctx("tool_stats")?;
    ensure!(
        got == want,
        "tool_stats {got:?}\n  differs from the journal's {want:?}"
    );
    ensure!(!got.is_empty(), "no statistics");
    Ok(())
}
