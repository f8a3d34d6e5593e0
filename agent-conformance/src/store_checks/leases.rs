//! Leases and claims: who may take which run, in which order, and when.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, create, entry, new_run, step, stored, unique};
use agent_core::store::WaitingFor;
use agent_core::store::{CallStatus, Claimed, RunStatus, Store, StoreError, now_ms};

/// A live lease blocks other claimers; the holder may re-claim; an expired lease is taken
/// over with a higher epoch; claims count until a commit; final runs are not claimed.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_live_lease_blocks_and_expired_lease_is_reclaimed(
    store: Arc<dyn Store>,
) -> CheckResult {
    let r = create(&store, "lease", json!({})).await?;
    let Claimed {
        lease: a,
        record: rec,
        ..
    } = store
        .claim_run(&r.id, "a", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    ensure!(a.epoch == 1, "first claim has epoch {}, want 1", a.epoch);
    ensure!(
        rec.lease_owner.as_deref() == Some("a"),
        "claimed record has no owner"
    );
    ensure!(
        rec.claims_without_progress == 0,
        "the claim of a free run was charged ({})",
        rec.claims_without_progress
    );
    ensure!(a.expires_at > now_ms(), "lease already expired");
    ensure!(
        store
            .claim_run(&r.id, "b", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "a live lease did not block another worker"
    );
    let b_next = store
        .claim_next(&["Agent".into()], "b", LONG, 10)
        .await
        .ctx("claim_next")?;
    ensure!(
        b_next
            .iter()
            .all(|Claimed { lease: l, .. }| l.run_id != r.id),
        "claim_next returned a run under a live lease"
    );
    let Claimed {
        lease: a2,
        record: rec,
        ..
    } = store
        .claim_run(&r.id, "a", Duration::from_millis(100))
        .await
        .ctx("claim_run")?
        .ok_or("the holder could not re-claim its own run")?;
    ensure!(a2.epoch == a.epoch + 1, "re-claim must bump the epoch");
    // The holder claims its own run again without releasing it (a panicked step): lost.
    ensure!(
        rec.claims_without_progress == 1,
        "a re-claim of an unreleased run was not charged ({})",
        rec.claims_without_progress
    );
    let renewed = store
        .renew_lease(&a2, Duration::from_millis(100))
        .await
        .ctx("renew_lease")?;
    ensure!(renewed.epoch == a2.epoch, "renewal changed the epoch");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let Claimed {
        lease: b,
        record: rec,
        ..
    } = store
        .claim_run(&r.id, "b", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("an expired lease was not reclaimable")?;
    ensure!(b.epoch == a2.epoch + 1, "reclaim must bump the epoch");
    ensure!(
        rec.claims_without_progress == 2,
        "the takeover of an expired lease was not charged ({})",
        rec.claims_without_progress
    );
    let after = store
        .commit_step(&b, &step(0, json!({ "done": true })), &[])
        .await
        .ctx("commit_step")?;
    ensure!(
        after.claims_without_progress == 0,
        "commit did not reset claims_without_progress"
    );
    store.release_lease(&b).await.ctx("release_lease")?;
    let cur = stored(&store, &r.id).await?;
    ensure!(cur.lease_owner.is_none(), "released run still has an owner");
    let Claimed { lease: c, .. } = store
        .claim_run(&r.id, "c", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("a released run was not claimable")?;
    let mut fin = step(1, json!({ "done": true }));
    fin.status = RunStatus::Completed;
    store.commit_step(&c, &fin, &[]).await.ctx("commit_step")?;
    store.release_lease(&c).await.ctx("release_lease")?;
    ensure!(
        store
            .claim_run(&r.id, "d", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "a completed run was claimable"
    );
    Ok(())
}

/// `hand_back` frees the lease so that the next claim is not charged, keeps what the
/// claim was charged for the lease it found lost, and does nothing with a stale epoch.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_hand_back_does_not_count_the_claim(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "hand-back", json!({})).await?;
    // Claimed once by a worker that vanished without a commit.
    store
        .claim_run(&run.id, "vanished", Duration::from_millis(1))
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let Claimed {
        lease, record: rec, ..
    } = store
        .claim_run(&run.id, "w", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of a run with an expired lease returned None")?;
    ensure!(
        rec.claims_without_progress == 1,
        "claims_without_progress is {}, want 1 (the vanished worker's claim)",
        rec.claims_without_progress
    );
    store.hand_back(&lease).await.ctx("hand_back")?;
    let back = stored(&store, &run.id).await?;
    ensure!(
        back.lease_owner.is_none(),
        "hand_back left the lease with {:?}",
        back.lease_owner
    );
    ensure!(
        back.claims_without_progress == 1,
        "hand_back left claims_without_progress at {}, want 1 (the lost claim it found)",
        back.claims_without_progress
    );
    let Claimed { lease: again, .. } = store
        .claim_run(&run.id, "w2", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("a handed-back run could not be claimed")?;
    store.hand_back(&lease).await.ctx("hand_back (stale)")?;
    let held = stored(&store, &run.id).await?;
    ensure!(
        held.lease_owner.as_deref() == Some("w2") && held.epoch == again.epoch,
        "hand_back with a stale epoch released the current holder's lease"
    );
    // The claim after a hand-back is not charged.
    ensure!(
        held.claims_without_progress == 1,
        "a claim after a hand-back, or a stale hand-back, changed claims_without_progress to {}",
        held.claims_without_progress
    );
    Ok(())
}

/// `expire_leases_of` ends the live leases of one worker only, at once, keeping epochs and
/// claim counts: the next claim takes the runs, counts, and fences the old holder out.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_expire_leases_of_frees_one_workers_runs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Expire");
    let restarted = unique("restarted");
    let other = unique("other");
    let mut runs = Vec::new();
    for tag in ["held", "other", "expired"] {
        runs.push(
            store
                .create_run(new_run(&unique(tag), &agent, json!({ "tag": tag })))
                .await
                .ctx("create_run")?,
        );
    }
    let (held, other_run, expired) = (&runs[0], &runs[1], &runs[2]);
    let old = claim(&store, &held.id, &restarted).await?;
    let others = claim(&store, &other_run.id, &other).await?;
    // A lease of the same worker that has run out already is not counted again.
    store
        .claim_run(&expired.id, &restarted, Duration::from_millis(1))
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    tokio::time::sleep(Duration::from_millis(5)).await;

    let none = store
        .expire_leases_of(&unique("nobody"))
        .await
        .ctx("expire_leases_of")?;
    ensure!(none == 0, "a worker without leases had {none} expired");
    let n = store
        .expire_leases_of(&restarted)
        .await
        .ctx("expire_leases_of")?;
    ensure!(n == 1, "expire_leases_of reported {n} leases, want 1");
    let after = stored(&store, &held.id).await?;
    ensure!(
        after.epoch == old.epoch && after.claims_without_progress == 0,
        "expiring changed the epoch ({} -> {}) or the claim count ({}, want 0)",
        old.epoch,
        after.epoch,
        after.claims_without_progress
    );

    let taker = unique("taker");
    let claimed = store
        .claim_next(std::slice::from_ref(&agent), &taker, LONG, 10)
        .await
        .ctx("claim_next")?;
    let mut ids: Vec<&str> = claimed
        .iter()
        .map(|Claimed { lease: l, .. }| l.run_id.as_str())
        .collect();
    ids.sort_unstable();
    let mut want = vec![held.id.as_str(), expired.id.as_str()];
    want.sort_unstable();
    ensure!(
        ids == want,
        "claim_next after expire_leases_of took {ids:?}, want {want:?} (not the other worker's run)"
    );
    let Claimed {
        lease: new,
        record: rec,
        ..
    } = claimed
        .iter()
        .find(|Claimed { lease: l, .. }| l.run_id == held.id)
        .ok_or("the expired run was not taken")?;
    ensure!(
        new.epoch == old.epoch + 1 && rec.claims_without_progress == 1,
        "the takeover has epoch {} (want {}) and claim count {} (want 1)",
        new.epoch,
        old.epoch + 1,
        rec.claims_without_progress
    );
    ensure!(
        store
            .commit_step(&old, &step(0, json!({})), &[])
            .await
            .is_err(),
        "the old holder committed after its lease was expired and taken over"
    );
    let still = stored(&store, &other_run.id).await?;
    ensure!(
        still.lease_owner.as_deref() == Some(other.as_str()) && still.epoch == others.epoch,
        "expire_leases_of touched another worker's lease: {:?} epoch {}",
        still.lease_owner,
        still.epoch
    );
    Ok(())
}

/// `claim_next` takes the oldest runnable runs first, in creation order, `limit` at a time.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_claim_next_takes_the_oldest_first(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Order");
    let mut created = Vec::new();
    for i in 0..7 {
        let run = store
            .create_run(new_run(
                &unique(&format!("run{i}")),
                &agent,
                json!({ "i": i }),
            ))
            .await
            .ctx("create_run")?;
        created.push(run.id);
    }
    let mut claimed = Vec::new();
    for limit in [2, 3, 10] {
        let batch = store
            .claim_next(std::slice::from_ref(&agent), "w", LONG, limit)
            .await
            .ctx("claim_next")?;
        claimed.extend(batch.into_iter().map(|Claimed { lease: l, .. }| l.run_id));
    }
    ensure!(
        claimed == created,
        "claim_next in batches of 2, 3 and 10 took {claimed:?}, want the creation order {created:?}"
    );
    Ok(())
}

/// `claim_next`: runnable runs of the given agents only, waiting runs only once their signal
/// arrived or `wake_at` passed, never leased or final runs, at most `limit`.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_claim_next_selects_runnable_runs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Sel");
    let mk = |tag: &str| new_run(&unique(tag), &agent, json!({ "tag": tag }));
    let running = store.create_run(mk("running")).await.ctx("create_run")?;
    let other_agent = store
        .create_run(new_run(&unique("other"), &unique("Other"), json!({})))
        .await
        .ctx("create_run")?;
    let leased = store.create_run(mk("leased")).await.ctx("create_run")?;
    let _held = claim(&store, &leased.id, "holder").await?;
    let mut waiting = Vec::new();
    for (tag, wake_at, signal) in [
        ("wait-nothing", None, false),
        ("wait-future", Some(now_ms() + 3_600_000), false),
        ("wait-past", Some(now_ms() - 1000), false),
        ("wait-signal", None, true),
        ("wait-wrong-signal", None, false),
    ] {
        let r = store.create_run(mk(tag)).await.ctx("create_run")?;
        let l = claim(&store, &r.id, "setup").await?;
        let mut c = step(0, json!({ "tag": tag }));
        c.status = RunStatus::Waiting;
        c.waiting_for = Some("go".into());
        c.wake_at = wake_at;
        store.commit_step(&l, &c, &[]).await.ctx("commit wait")?;
        store.release_lease(&l).await.ctx("release_lease")?;
        if signal {
            store
                .send_signal(&r.id, "go", &json!(1))
                .await
                .ctx("send_signal")?;
        }
        if tag == "wait-wrong-signal" {
            store
                .send_signal(&r.id, "other", &json!(1))
                .await
                .ctx("send_signal")?;
        }
        waiting.push((tag, r.id));
    }
    let done = store.create_run(mk("done")).await.ctx("create_run")?;
    let l = claim(&store, &done.id, "setup").await?;
    let mut fin = step(0, json!({}));
    fin.status = RunStatus::Completed;
    store.commit_step(&l, &fin, &[]).await.ctx("commit")?;
    store.release_lease(&l).await.ctx("release_lease")?;
    let backing_off = store.create_run(mk("backoff")).await.ctx("create_run")?;
    let l = claim(&store, &backing_off.id, "setup").await?;
    let mut later = step(0, json!({}));
    later.wake_at = Some(now_ms() + 3_600_000);
    store.commit_step(&l, &later, &[]).await.ctx("commit")?;
    store.release_lease(&l).await.ctx("release_lease")?;

    let one = store
        .claim_next(std::slice::from_ref(&agent), "w", LONG, 1)
        .await
        .ctx("claim_next")?;
    ensure!(
        one.len() == 1,
        "claim_next with limit 1 returned {}",
        one.len()
    );
    let rest = store
        .claim_next(std::slice::from_ref(&agent), "w", LONG, 100)
        .await
        .ctx("claim_next")?;
    let got: BTreeSet<String> = one
        .iter()
        .chain(&rest)
        .map(|Claimed { lease: l, .. }| l.run_id.clone())
        .collect();
    let id_of = |tag: &str| {
        waiting
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|(_, id)| id.clone())
    };
    let want: BTreeSet<String> = [
        Some(running.id.clone()),
        id_of("wait-past"),
        id_of("wait-signal"),
    ]
    .into_iter()
    .flatten()
    .collect();
    ensure!(
        got == want,
        "claim_next claimed {got:?}, want exactly {want:?} (running, wake_at passed, signal arrived)"
    );
    ensure!(
        !got.contains(&other_agent.id),
        "claim_next ignored the agent filter"
    );
    for Claimed {
        lease: l,
        record: rec,
        ..
    } in one.iter().chain(&rest)
    {
        ensure!(
            l.worker == "w" && rec.lease_owner.as_deref() == Some("w") && rec.epoch == l.epoch,
            "claim_next returned an inconsistent lease/record"
        );
    }
    let again = store
        .claim_next(std::slice::from_ref(&agent), "w2", LONG, 100)
        .await
        .ctx("claim_next")?;
    ensure!(
        again.is_empty(),
        "claim_next returned runs leased to another worker"
    );
    Ok(())
}

/// Concurrent `claim_next` calls by several workers never hand the same run to two.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_concurrent_claim_next_is_disjoint(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Pool");
    let n = 40;
    for i in 0..n {
        store
            .create_run(new_run(
                &unique(&format!("pool{i}")),
                &agent,
                json!({ "i": i }),
            ))
            .await
            .ctx("create_run")?;
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store
                    .claim_next(std::slice::from_ref(&agent), &format!("w{w}"), LONG, 3)
                    .await?;
                if got.is_empty() {
                    return Ok::<_, StoreError>(mine);
                }
                mine.extend(got.into_iter().map(|Claimed { lease: l, .. }| l.run_id));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            t.await
                .map_err(|e| format!("worker panicked: {e}"))?
                .ctx("claim_next")?,
        );
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    ensure!(
        distinct.len() == all.len(),
        "{} claims for {} distinct runs: a run was handed to two workers",
        all.len(),
        distinct.len()
    );
    ensure!(all.len() == n, "{} of {n} runs claimed", all.len());
    Ok(())
}

/// `wait_for_work` returns by its timeout, and no later than shortly after new work.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_wait_for_work_returns(store: Arc<dyn Store>) -> CheckResult {
    let started = std::time::Instant::now();
    store.wait_for_work(Duration::from_millis(50)).await;
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "wait_for_work(50ms) took {:?}",
        started.elapsed()
    );
    let sleeper = {
        let store = store.clone();
        tokio::spawn(async move {
            let t = std::time::Instant::now();
            store.wait_for_work(Duration::from_secs(2)).await;
            t.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    create(&store, "work", json!({})).await?;
    let waited = sleeper.await.map_err(|e| format!("waiter panicked: {e}"))?;
    ensure!(
        waited < Duration::from_secs(5),
        "wait_for_work(2s) took {waited:?}"
    );
    Ok(())
}

/// `next_due` is never later than the earliest live lease: a lease taken for 2 s is due
/// within 2 s (another run's may be sooner), and a run whose lease ended counts no more.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_next_due_is_no_later_than_a_live_lease(store: Arc<dyn Store>) -> CheckResult {
    let ttl = Duration::from_secs(2);
    let r = create(&store, "due", json!({})).await?;
    let Claimed { lease, .. } = store
        .claim_run(&r.id, "a", ttl)
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    let due = store.next_due().await.ctx("next_due")?;
    ensure!(
        due.is_some_and(|d| d <= ttl),
        "next_due is {due:?} with a lease of {ttl:?} live"
    );
    let mut fin = step(0, json!({}));
    fin.status = RunStatus::Completed;
    store.commit_step(&lease, &fin, &[]).await.ctx("commit")?;
    let waiting = create(&store, "due-timer", json!({})).await?;
    let l = claim(&store, &waiting.id, "setup").await?;
    let mut wait = step(0, json!({}));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some("go".into());
    wait.wake_at = Some(now_ms() + 1_500);
    store.commit_step(&l, &wait, &[]).await.ctx("commit wait")?;
    store.release_lease(&l).await.ctx("release_lease")?;
    let due = store.next_due().await.ctx("next_due")?;
    ensure!(
        due.is_some_and(|d| d <= Duration::from_millis(1_500)),
        "next_due is {due:?} with a timer due in 1.5 s"
    );
    Ok(())
}

/// A claim that reads ([`RunStore::claim_next`](agent_core::store::RunStore::claim_next), [`RunStore::claim_run`](agent_core::store::RunStore::claim_run)) reads
/// what the separate reads answer once the run is claimed: its version span, whether its
/// journal has an entry at its version, a waiting run's pending signals. A store that
/// reads nothing with a claim (`reads: None`) passes, as long as its claims are claims.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_claim_reads_match_the_reads(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Reads");
    // One run interrupted after a journaled call at version 1.
    let journaled = store
        .create_run(new_run(&unique("journaled"), &agent, json!({})))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &journaled.id, "w1").await?;
    store
        .commit_step(&lease, &step(0, json!({ "at": 1 })), &[])
        .await
        .ctx("commit_step")?;
    store
        .record_entry(
            &lease,
            &entry(&journaled.id, 1, 0, CallStatus::Started, None),
        )
        .await
        .ctx("record_entry")?;
    store.release_lease(&lease).await.ctx("release_lease")?;
    // One run waiting for `go`, which was sent.
    let waiting = store
        .create_run(new_run(&unique("waiting"), &agent, json!({})))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &waiting.id, "w1").await?;
    let mut wait = step(0, json!({ "at": 1 }));
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some(WaitingFor::signal("go"));
    store
        .commit_step(&lease, &wait, &[])
        .await
        .ctx("commit_step")?;
    store.release_lease(&lease).await.ctx("release_lease")?;
    store
        .send_signal(&waiting.id, "go", &json!({ "ok": true }))
        .await
        .ctx("send_signal")?;
    // And one new run, claimed by id.
    let fresh = store
        .create_run(new_run(&unique("fresh"), &agent, json!({})))
        .await
        .ctx("create_run")?;

    let mut claimed = store
        .claim_next(std::slice::from_ref(&agent), "w2", LONG, 10)
        .await
        .ctx("claim_next")?;
    let by_id = store
        .claim_run(&fresh.id, "w2", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim_run of a free run returned None")?;
    claimed.retain(|c| c.record.id != fresh.id);
    claimed.push(by_id);
    let ids: BTreeSet<&str> = claimed.iter().map(|c| c.record.id.as_str()).collect();
    for id in [&journaled.id, &waiting.id, &fresh.id] {
        ensure!(ids.contains(id.as_str()), "run `{id}` was not claimed");
    }
    for c in &claimed {
        let id = &c.record.id;
        ensure!(
            c.lease.run_id == *id
                && c.lease.worker == "w2"
                && c.record.lease_owner.as_deref() == Some("w2"),
            "run `{id}`: the claim did not give `w2` its lease"
        );
        let Some(reads) = &c.reads else { continue };
        let span = store.version_span(id).await.ctx("version_span")?;
        ensure!(
            reads.span == span,
            "run `{id}`: the claim read the span {:?}, version_span says {span:?}",
            reads.span
        );
        let journal = store
            .journal(id, Some(c.record.version))
            .await
            .ctx("journal")?;
        ensure!(
            reads.journaled_at_version != journal.is_empty(),
            "run `{id}`: the claim read journaled_at_version = {}, the journal at version {} \
             has {} entries",
            reads.journaled_at_version,
            c.record.version,
            journal.len()
        );
        let pending = store.pending_signals(id).await.ctx("pending_signals")?;
        if let Some(read) = &reads.pending_signals {
            ensure!(
                *read == pending,
                "run `{id}`: the claim read the pending signals {read:?}, pending_signals \
                 says {pending:?}"
            );
        }
        if *id == waiting.id {
            ensure!(
                reads.pending_signals.is_some(),
                "run `{id}` waits, but the claim did not read its pending signals"
            );
        }
        if *id == journaled.id {
            ensure!(
                reads.journaled_at_version,
                "run `{id}` has an entry at its version, the claim read none"
            );
        }
    }
    Ok(())
}

/// [`RunStore::create_run_claimed`](agent_core::store::RunStore::create_run_claimed): the new run is held by its creator (nobody else claims
/// it), its lease commits, what it says was read matches the reads, and a retry of the same
/// request claims the run as `claim_run` would while another request is refused.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_create_run_claimed_holds_the_run(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Held");
    let new = new_run(&unique("held"), &agent, json!({ "n": 0 }));
    let id = new.id.clone();
    let claimed = store
        .create_run_claimed(new.clone(), "w1", LONG)
        .await
        .ctx("create_run_claimed")?
        .ok_or("create_run_claimed of a new run returned None")?;
    let (lease, record) = (&claimed.lease, &claimed.record);
    ensure!(
        lease.run_id == id
            && lease.worker == "w1"
            && lease.epoch == record.epoch
            && record.lease_owner.as_deref() == Some("w1")
            && record.version == 0
            && record.status == RunStatus::Running,
        "the new run is not held by its creator: {lease:?}, {record:?}"
    );
    ensure!(
        store
            .claim_run(&id, "w2", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "another worker claimed a run created claimed"
    );
    let others = store
        .claim_next(std::slice::from_ref(&agent), "w2", LONG, 10)
        .await
        .ctx("claim_next")?;
    ensure!(
        others.is_empty(),
        "claim_next gave another worker a run created claimed"
    );
    if let Some(reads) = &claimed.reads {
        let span = store.version_span(&id).await.ctx("version_span")?;
        ensure!(
            reads.span == span,
            "created claimed with the span {:?}, version_span says {span:?}",
            reads.span
        );
        let journal = store.journal(&id, Some(0)).await.ctx("journal")?;
        ensure!(
            reads.journaled_at_version != journal.is_empty(),
            "created claimed with journaled_at_version = {}, the journal has {} entries",
            reads.journaled_at_version,
            journal.len()
        );
    }
    store
        .commit_step(lease, &step(0, json!({ "n": 1 })), &[])
        .await
        .ctx("commit_step with the creation's lease")?;
    // The same request again (a retry after a lost answer): the run is claimed anew.
    let again = store
        .create_run_claimed(new.clone(), "w1", LONG)
        .await
        .ctx("create_run_claimed, retried")?
        .ok_or("a retry by the holder returned None")?;
    ensure!(
        again.record.version == 1 && again.lease.epoch > lease.epoch,
        "a retry did not claim the existing run anew: {:?}",
        again.lease
    );
    ensure!(
        store
            .create_run_claimed(new.clone(), "w3", LONG)
            .await
            .ctx("create_run_claimed by another worker")?
            .is_none(),
        "a retry by another worker took a held run"
    );
    let other = new_run(&id, &agent, json!({ "n": "another request" }));
    match store.create_run_claimed(other, "w1", LONG).await {
        Err(StoreError::AlreadyExists(_)) => Ok(()),
        other => Err(format!(
            "another request for the same id gave {other:?}, want AlreadyExists"
        )),
    }
}
