//! Rate limits shared by every worker (`LimitStore`), and runs handed back until their
//! turn under one (`RunStore::defer_run`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{CheckResult, Ctx, LONG, claim, new_run, stored, unique};
use agent_core::store::{Claimed, RateLimit, RunStatus, Store, StoreError, WaitingFor, now_ms};

/// Takes from one limit by many callers at once are each given a turn of their own (never
/// two the same), spaced by the rate; a limit declared again keeps what was taken; a pause
/// holds every taker back and a shorter one does not shorten it; an undeclared limit limits
/// nothing; a limit that can never be met is refused.
///
/// # Errors
/// What went wrong.
pub async fn check_rate_limits_are_shared_and_exact(store: Arc<dyn Store>) -> CheckResult {
    // 10 per second, burst 1: turns 100 ms apart. Every take at the same instant, so that
    // the turns depend only on how the takes were ordered, never on time passing.
    let tool = unique("search");
    let limit =
        RateLimit::tool_calls(&tool, 10, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    let name = limit.name();
    let now = now_ms();
    store.define_limit(&limit, now).await.ctx("define_limit")?;
    // Eight takers at once, three takes each: as many connections as the other checks of
    // concurrency use (a session pooler in front of the store has few).
    let takers: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            let name = name.clone();
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for _ in 0..3 {
                    waits.push(store.take_capacity(&name, 1, now).await);
                }
                waits
            })
        })
        .collect();
    let mut turns = Vec::new();
    for taker in takers {
        for wait in taker.await.map_err(|e| e.to_string())? {
            let wait = wait
                .ctx("take_capacity")?
                .ok_or("take_capacity found no limit it was just given")?;
            turns.push(wait.as_millis());
        }
    }
    turns.sort_unstable();
    let expected: Vec<u128> = (0..24).map(|i| i * 100).collect();
    ensure!(
        turns == expected,
        "24 takes by 8 takers at once must get turns 0, 100, …, 2300 ms, each once; got {turns:?}"
    );
    // Declared again (a worker starting): what was taken stays taken.
    store
        .define_limit(&limit, now)
        .await
        .ctx("define_limit again")?;
    let next = store
        .take_capacity(&name, 1, now)
        .await
        .ctx("take_capacity")?;
    ensure!(
        next == Some(Duration::from_millis(2400)),
        "after declaring the limit again, the next turn must be at 2400 ms; got {next:?}"
    );
    // A pause longer than the queue holds every taker back; a shorter one changes nothing.
    store
        .pause_limit(&name, Duration::from_mins(1), now)
        .await
        .ctx("pause_limit")?;
    store
        .pause_limit(&name, Duration::from_secs(1), now)
        .await
        .ctx("pause_limit (shorter)")?;
    let paused = store
        .take_capacity(&name, 1, now)
        .await
        .ctx("take_capacity")?;
    ensure!(
        paused == Some(Duration::from_millis(60_100)),
        "a take during a 60 s pause must wait the pause and its turn (60100 ms); got {paused:?}"
    );
    let listed = store.limits(now).await.ctx("limits")?;
    let shown = listed.iter().find(|l| l.name == name);
    ensure!(
        shown.is_some_and(|l| l.wait_ms == 60_100 && (l.rate - 0.01).abs() < 1e-12),
        "limits() must show the limit with its rate and wait; got {shown:?}"
    );
    let none = (store.take_capacity(&unique("tool:undeclared"), 1, now))
        .await
        .ctx("take_capacity of an undeclared limit")?;
    ensure!(
        none.is_none(),
        "an undeclared limit must limit nothing, got {none:?}"
    );
    let never = RateLimit {
        amount: 0,
        ..limit.clone()
    };
    ensure!(
        matches!(
            store.define_limit(&never, now).await,
            Err(StoreError::InvalidRateLimit(_))
        ),
        "a limit of zero per period must be refused"
    );
    Ok(())
}

/// A run handed back until its turn is released without being charged, stays running at
/// its version with `waiting_for` and `wake_at` saying why and until when, is not claimed
/// before then and is after; a stale epoch hands nothing back.
///
/// # Errors
/// What went wrong.
pub async fn check_defer_run_hands_back_until_its_turn(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Deferred");
    let run = new_run(&unique("defer"), &agent, json!({}));
    store.create_run(run.clone()).await.ctx("create_run")?;
    let lease = claim(&store, &run.id, "w").await?;
    let until = now_ms() + 400;
    let why = WaitingFor::capacity("asks:test/model", lease.epoch);
    let deferred = (store.defer_run(&lease, until, &why))
        .await
        .ctx("defer_run")?;
    ensure!(deferred, "defer_run of a held running run returned false");
    let back = stored(&store, &run.id).await?;
    ensure!(
        back.lease_owner.is_none()
            && back.status == RunStatus::Running
            && back.version == 0
            && back.wake_at == Some(until)
            && back.waiting_for.as_ref() == Some(&why)
            && back.claims_without_progress == 0,
        "a deferred run must be free, running at version 0, due at {until} waiting for {why}, \
         uncharged; got owner {:?}, {} at {}, wake_at {:?}, waiting_for {:?}, charged {}",
        back.lease_owner,
        back.status,
        back.version,
        back.wake_at,
        back.waiting_for,
        back.claims_without_progress
    );
    let early = (store.claim_next(std::slice::from_ref(&agent), "w2", LONG, 10))
        .await
        .ctx("claim_next before the turn")?;
    ensure!(
        early.is_empty(),
        "a run handed back until its turn was claimed before it"
    );
    let stale = (store.defer_run(&lease, until, &why))
        .await
        .ctx("defer_run (stale)")?;
    ensure!(!stale, "defer_run of a run no longer held returned true");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let due = (store.claim_next(std::slice::from_ref(&agent), "w2", LONG, 10))
        .await
        .ctx("claim_next at the turn")?;
    let Some(Claimed {
        lease: again,
        record,
        ..
    }) = due.into_iter().next()
    else {
        return Err("a run handed back until its turn was not claimed once it came".into());
    };
    ensure!(
        record.claims_without_progress == 0,
        "the claim after a hand-back must not be charged; charged {}",
        record.claims_without_progress
    );
    // A stale epoch of the earlier holder hands nothing back.
    let stale = (store.defer_run(&lease, until + 60_000, &why))
        .await
        .ctx("defer_run (old epoch)")?;
    ensure!(!stale, "defer_run with an old epoch returned true");
    ensure!(
        stored(&store, &run.id).await?.lease_owner.as_deref() == Some("w2"),
        "defer_run with an old epoch released the current holder's lease"
    );
    store.release_lease(&again).await.ctx("release_lease")?;
    Ok(())
}
