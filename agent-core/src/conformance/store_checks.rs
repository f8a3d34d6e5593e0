//! Checks of the [`Store`] contract itself, one `pub async fn` per guarantee.
//!
//! Each returns `Err` with a description of the violation; none panics on a misbehaving
//! store (a panic inside the store itself still fails the test).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::graph::GraphDescription;
use crate::store::{
    CallStatus, EntryKind, JournalEntry, Lease, NewRun, RetentionPolicy, RunError, RunFilter,
    RunRecord, RunStatus, StepCommit, Store, StoreError, TransitionKind, input_hash, now_ms,
    transition_hash,
};
use crate::tool::{ErrorClass, ToolKind};

/// The result of one check.
pub type CheckResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// `?` for store calls inside checks: any error becomes the check's failure.
trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for Result<T, StoreError> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error: {e}"))
    }
}

const LONG: Duration = Duration::from_secs(60);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn new_run(id: &str, agent: &str, state: Value) -> NewRun {
    NewRun {
        id: id.to_owned(),
        agent: agent.to_owned(),
        fingerprint: "fp-1".to_owned(),
        state_name: "Start".to_owned(),
        state,
    }
}

/// A step from `expected` to `expected + 1` staying running.
#[must_use]
pub fn step(expected: u64, state: Value) -> StepCommit {
    StepCommit {
        expected_version: expected,
        from_state: "Start".to_owned(),
        to_state: "Start".to_owned(),
        state,
        kind: TransitionKind::Step,
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        consumed_signal: None,
    }
}

fn entry(
    run_id: &str,
    version: u64,
    seq: u32,
    status: CallStatus,
    output: Option<Value>,
) -> JournalEntry {
    let input = json!({ "seq": seq, "version": version });
    JournalEntry {
        run_id: run_id.to_owned(),
        version,
        seq,
        kind: EntryKind::Tool,
        state: "Start".to_owned(),
        name: "charge_payment".to_owned(),
        tool_kind: Some(ToolKind::Write),
        input_hash: input_hash(&input),
        input,
        idempotency_key: Some(crate::store::idempotency_key(run_id, version, seq)),
        status,
        output,
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 12,
        started_at: now_ms(),
        finished_at: (status != CallStatus::Started).then(now_ms),
    }
}

async fn create(store: &Arc<dyn Store>, prefix: &str, state: Value) -> Result<RunRecord, String> {
    store
        .create_run(new_run(&unique(prefix), "Agent", state))
        .await
        .ctx("create_run")
}

/// The stored record of a run that must exist.
async fn stored(store: &Arc<dyn Store>, run_id: &str) -> Result<RunRecord, String> {
    store
        .load_run(run_id)
        .await
        .ctx("load_run")?
        .ok_or_else(|| format!("run `{run_id}` vanished"))
}

async fn claim(store: &Arc<dyn Store>, run_id: &str, worker: &str) -> Result<Lease, String> {
    store
        .claim_run(run_id, worker, LONG)
        .await
        .ctx("claim_run")?
        .map(|(l, _)| l)
        .ok_or_else(|| format!("claim_run of free run `{run_id}` by `{worker}` returned None"))
}

/// Commit `n` steps, the state gaining one item per step; returns the final state.
async fn grow(store: &Arc<dyn Store>, lease: &Lease, from: u64, n: u64) -> Result<Value, String> {
    let mut state = stored(store, &lease.run_id).await?.state;
    for v in from..from + n {
        if !state["items"].is_array() {
            state["items"] = json!([]);
        }
        if let Some(items) = state["items"].as_array_mut() {
            items.push(json!(format!("item number {v} with some payload text")));
        }
        let r = store
            .commit_step(lease, &step(v, state.clone()))
            .await
            .ctx("commit_step")?;
        ensure!(
            r.version == v + 1,
            "commit from {v} gave version {}",
            r.version
        );
    }
    Ok(state)
}

/// Verify versions `first..=last` form one chain with valid hashes where the states are kept.
async fn verify_chain(store: &Arc<dyn Store>, run_id: &str) -> CheckResult {
    let history = store.history(run_id).await.ctx("history")?;
    ensure!(!history.is_empty(), "history of `{run_id}` is empty");
    let first = history[0].version;
    for (i, t) in history.iter().enumerate() {
        ensure!(
            t.version == first + i as u64,
            "history of `{run_id}` has a gap or duplicate at index {i}: version {}",
            t.version
        );
        ensure!(t.run_id == run_id, "history record of another run");
    }
    for pair in history.windows(2) {
        let (prev, t) = (&pair[0], &pair[1]);
        let at = store
            .state_at(run_id, t.version)
            .await
            .ctx("state_at")?
            .ok_or_else(|| format!("state_at({}) is None for a version in history", t.version))?;
        let want = transition_hash(&prev.hash, &t.link(&at.state));
        ensure!(
            want == t.hash,
            "hash chain broken at version {} of `{run_id}`",
            t.version
        );
    }
    Ok(())
}

/// Create, load, and the errors for unknown runs.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_store_and_load_runs(store: Arc<dyn Store>) -> CheckResult {
    let state = json!({ "cart": ["apple"], "nested": { "b": 1, "a": [1, 2, { "x": null }] } });
    let r = create(&store, "load", state.clone()).await?;
    ensure!(r.version == 0, "new run at version {}", r.version);
    ensure!(r.status == RunStatus::Running, "new run is {}", r.status);
    ensure!(r.epoch == 0, "new run has epoch {}", r.epoch);
    ensure!(r.state == state, "state changed on create");
    ensure!(r.lease_owner.is_none(), "new run has a lease owner");
    let loaded = store.load_run(&r.id).await.ctx("load_run")?;
    ensure!(
        loaded.as_ref() == Some(&r),
        "load_run differs from create_run: {loaded:?} vs {r:?}"
    );
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.len() == 1 && h[0].version == 0 && h[0].kind == TransitionKind::Start,
        "creation must record one start transition at version 0: {h:?}"
    );
    ensure!(
        store
            .load_run("no-such-run")
            .await
            .ctx("load_run")?
            .is_none(),
        "load_run of an unknown id is not None"
    );
    let lease = Lease {
        run_id: "no-such-run".into(),
        worker: "w".into(),
        epoch: 1,
        expires_at: now_ms() + 1000,
    };
    ensure!(
        matches!(
            store.commit_step(&lease, &step(0, json!({}))).await,
            Err(StoreError::NotFound(_))
        ),
        "commit_step on an unknown run is not NotFound"
    );
    ensure!(
        matches!(
            store.claim_run("no-such-run", "w", LONG).await,
            Err(StoreError::NotFound(_)) | Ok(None)
        ),
        "claim_run on an unknown run must be NotFound or None"
    );
    Ok(())
}

/// `create_run` is idempotent on the id; other content is `AlreadyExists`.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_create_run_is_idempotent(store: Arc<dyn Store>) -> CheckResult {
    let id = unique("idem");
    let a = store
        .create_run(new_run(&id, "Agent", json!({ "n": 1 })))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &id, "w").await?;
    store
        .commit_step(&lease, &step(0, json!({ "n": 2 })))
        .await
        .ctx("commit_step")?;
    let again = store
        .create_run(new_run(&id, "Agent", json!({ "n": 1 })))
        .await
        .ctx("create_run again")?;
    ensure!(again.id == a.id, "idempotent create returned another run");
    ensure!(
        again.version == 1 && again.state == json!({ "n": 2 }),
        "idempotent create must return the existing run unchanged, got version {}",
        again.version
    );
    for other in [
        new_run(&id, "Agent", json!({ "n": 99 })),
        new_run(&id, "OtherAgent", json!({ "n": 1 })),
    ] {
        ensure!(
            matches!(
                store.create_run(other).await,
                Err(StoreError::AlreadyExists(_))
            ),
            "create_run with other content must be AlreadyExists"
        );
    }
    let h = store.history(&id).await.ctx("history")?;
    ensure!(
        h.len() == 2,
        "idempotent creates added history: {} records",
        h.len()
    );
    Ok(())
}

/// N committers race the same expected version with the same lease: exactly one wins per
/// round, and the versions form one chain with a valid hash chain.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_version_chain_single_winner(store: Arc<dyn Store>) -> CheckResult {
    const RACERS: usize = 8;
    const ROUNDS: u64 = 12;
    let r = create(&store, "race", json!({ "winner": null })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    for v in 0..ROUNDS {
        let mut tasks = Vec::new();
        for i in 0..RACERS {
            let store = store.clone();
            let lease = lease.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .commit_step(&lease, &step(v, json!({ "winner": i, "round": v })))
                    .await
            }));
        }
        let mut winners = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.map_err(|e| format!("committer panicked: {e}"))? {
                Ok(rec) => {
                    ensure!(rec.version == v + 1, "winner got version {}", rec.version);
                    winners.push(i);
                }
                Err(StoreError::Conflict { expected, .. }) => {
                    ensure!(
                        expected == v,
                        "conflict reports expected {expected}, not {v}"
                    );
                }
                Err(e) => return Err(format!("racer {i} got {e}, not a conflict")),
            }
        }
        ensure!(
            winners.len() == 1,
            "round {v}: {} committers won the same expected version",
            winners.len()
        );
        let cur = stored(&store, &r.id).await?;
        ensure!(
            cur.version == v + 1 && cur.state["winner"] == json!(winners[0]),
            "stored run does not match the winner in round {v}"
        );
    }
    // A late commit of an old version is still a conflict.
    ensure!(
        matches!(
            store.commit_step(&lease, &step(3, json!({}))).await,
            Err(StoreError::Conflict { found, .. }) if found == ROUNDS
        ),
        "a commit from an old version must be Conflict with the current version"
    );
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.len() as u64 == ROUNDS + 1,
        "history has {} records, want {}",
        h.len(),
        ROUNDS + 1
    );
    ensure!(
        h.iter().skip(1).all(|t| t.epoch == lease.epoch),
        "transitions must record the writer's epoch"
    );
    verify_chain(&store, &r.id).await
}

/// What a store remembers of a run's last commit does not outlive the lease it was made
/// under: after the same worker claims the run again (a new epoch), a commit under the old
/// lease is refused, and one under the new lease goes on from the same version.
pub async fn check_commits_across_a_reclaim(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "reclaim", json!({ "n": 0 })).await?;
    let first = claim(&store, &r.id, "w").await?;
    store
        .commit_step(&first, &step(0, json!({ "n": 1 })))
        .await
        .ctx("commit under the first lease")?;
    store.release_lease(&first).await.ctx("release_lease")?;
    let second = claim(&store, &r.id, "w").await?;
    ensure!(
        second.epoch > first.epoch,
        "claiming again did not increase the epoch"
    );
    match store
        .commit_step(&first, &step(1, json!({ "n": "stale" })))
        .await
    {
        Err(StoreError::LeaseLost { .. }) => {}
        other => {
            return Err(format!(
                "a commit under the released lease must be LeaseLost, got {other:?}"
            ));
        }
    }
    let committed = store
        .commit_step(&second, &step(1, json!({ "n": 2 })))
        .await
        .ctx("commit under the second lease")?;
    ensure!(
        committed.version == 2 && committed.epoch == second.epoch,
        "the commit returned version {} at epoch {}, not 2 at {}",
        committed.version,
        committed.epoch,
        second.epoch
    );
    ensure!(
        committed.lease_owner.as_deref() == Some("w"),
        "the commit returned lease owner {:?}",
        committed.lease_owner
    );
    let run = stored(&store, &r.id).await?;
    ensure!(
        run.version == 2 && run.state == json!({ "n": 2 }),
        "stored run at version {} with state {}",
        run.version,
        run.state
    );
    Ok(())
}

/// After another claim, the old holder's `commit_step`, `record_entry` and `renew_lease`
/// get `LeaseLost`, and nothing of theirs is written.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_stale_epoch_is_fenced(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "fence", json!({ "n": 0 })).await?;
    let (old, _) = store
        .claim_run(&r.id, "old", Duration::from_millis(150))
        .await
        .ctx("claim_run")?
        .ok_or("first claim returned None")?;
    store
        .record_entry(&old, &entry(&r.id, 0, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry under a live lease")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (new, rec) = store
        .claim_run(&r.id, "new", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of an expired lease returned None")?;
    ensure!(new.epoch > old.epoch, "reclaim did not increase the epoch");
    ensure!(
        rec.epoch == new.epoch,
        "claimed record and lease disagree on the epoch"
    );
    match store
        .commit_step(&old, &step(0, json!({ "n": "stale" })))
        .await
    {
        Err(StoreError::LeaseLost { epoch, .. }) => {
            ensure!(
                epoch == old.epoch,
                "LeaseLost reports epoch {epoch}, not {}",
                old.epoch
            );
        }
        other => {
            return Err(format!(
                "stale commit_step must be LeaseLost, got {other:?}"
            ));
        }
    }
    let stale_entry = entry(&r.id, 0, 1, CallStatus::Succeeded, Some(json!("stale")));
    ensure!(
        matches!(
            store.record_entry(&old, &stale_entry).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "stale record_entry must be LeaseLost"
    );
    ensure!(
        matches!(
            store.renew_lease(&old, LONG).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "stale renew_lease must be LeaseLost"
    );
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.version == 0,
        "a stale commit moved the run to {}",
        cur.version
    );
    let j = store.journal(&r.id, None).await.ctx("journal")?;
    ensure!(
        j.len() == 1 && j[0].seq == 0,
        "a stale record_entry was written: journal has {} entries",
        j.len()
    );
    // Releasing a stale lease does not free the new holder's.
    store
        .release_lease(&old)
        .await
        .ctx("release of a stale lease")?;
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.lease_owner.as_deref() == Some("new"),
        "releasing a stale lease freed the current holder's lease"
    );
    store
        .commit_step(&new, &step(0, json!({ "n": 1 })))
        .await
        .ctx("commit by the current holder")?;
    store
        .record_entry(&new, &entry(&r.id, 1, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry by the current holder")?;
    Ok(())
}

/// A live lease blocks other claimers; the holder may re-claim; an expired lease is taken
/// over with a higher epoch; claims count until a commit; final runs are not claimed.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_live_lease_blocks_and_expired_lease_is_reclaimed(
    store: Arc<dyn Store>,
) -> CheckResult {
    let r = create(&store, "lease", json!({})).await?;
    let (a, rec) = store
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
        rec.claims_without_progress == 1,
        "claims_without_progress not counted"
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
        b_next.iter().all(|(l, _)| l.run_id != r.id),
        "claim_next returned a run under a live lease"
    );
    let (a2, rec) = store
        .claim_run(&r.id, "a", Duration::from_millis(100))
        .await
        .ctx("claim_run")?
        .ok_or("the holder could not re-claim its own run")?;
    ensure!(a2.epoch == a.epoch + 1, "re-claim must bump the epoch");
    ensure!(
        rec.claims_without_progress == 2,
        "claims_without_progress not counted"
    );
    let renewed = store
        .renew_lease(&a2, Duration::from_millis(100))
        .await
        .ctx("renew_lease")?;
    ensure!(renewed.epoch == a2.epoch, "renewal changed the epoch");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let (b, rec) = store
        .claim_run(&r.id, "b", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("an expired lease was not reclaimable")?;
    ensure!(b.epoch == a2.epoch + 1, "reclaim must bump the epoch");
    ensure!(
        rec.claims_without_progress == 3,
        "claims_without_progress not counted"
    );
    let after = store
        .commit_step(&b, &step(0, json!({ "done": true })))
        .await
        .ctx("commit_step")?;
    ensure!(
        after.claims_without_progress == 0,
        "commit did not reset claims_without_progress"
    );
    store.release_lease(&b).await.ctx("release_lease")?;
    let cur = stored(&store, &r.id).await?;
    ensure!(cur.lease_owner.is_none(), "released run still has an owner");
    let (c, _) = store
        .claim_run(&r.id, "c", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("a released run was not claimable")?;
    let mut fin = step(1, json!({ "done": true }));
    fin.status = RunStatus::Completed;
    store.commit_step(&c, &fin).await.ctx("commit_step")?;
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
    // Replace: started → succeeded on the same key.
    let done = entry(
        &r.id,
        0,
        1,
        CallStatus::Succeeded,
        Some(json!({ "charged": 42 })),
    );
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
    ensure!(j[1] == done, "replaced entry reads back as {:?}", j[1]);
    // Entries survive the commit and stay ordered across versions.
    store
        .commit_step(&lease, &step(0, json!({ "a": 1 })))
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
    let rec = store.commit_step(&lease, &wait).await.ctx("commit wait")?;
    ensure!(rec.status == RunStatus::Waiting, "run is not waiting");
    ensure!(
        rec.waiting_for.as_deref() == Some("approval"),
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
    let Some((lease2, _)) = claimed.into_iter().find(|(l, _)| l.run_id == r.id) else {
        return Err("a waiting run whose signal arrived early was not claimed".into());
    };
    let mut resume = step(1, json!({ "approved": true }));
    resume.consumed_signal = Some(early);
    let rec = store
        .commit_step(&lease2, &resume)
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
        store.commit_step(&lease2, &again).await.is_err(),
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

/// `hand_back` frees the lease without counting the claim, and does nothing with a stale
/// epoch.
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
    let (lease, rec) = store
        .claim_run(&run.id, "w", LONG)
        .await
        .ctx("claim_run")?
        .ok_or("claim of a run with an expired lease returned None")?;
    ensure!(
        rec.claims_without_progress == 2,
        "claims_without_progress is {}, want 2",
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
        "hand_back left claims_without_progress at {}, want 1 (the claim not counted)",
        back.claims_without_progress
    );
    let (again, _) = store
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
    ensure!(
        held.claims_without_progress == 2,
        "hand_back with a stale epoch changed claims_without_progress to {}",
        held.claims_without_progress
    );
    Ok(())
}

/// `quarantine` under a lease: refused with a stale epoch (the current holder keeps the
/// run), done with the current one, without writing a version, leaving the run unleased.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_quarantine_is_fenced(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "quarantine", json!({})).await?;
    let (stale, _) = store
        .claim_run(&run.id, "a", Duration::from_millis(1))
        .await
        .ctx("claim_run")?
        .ok_or("claim of a free run returned None")?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let current = claim(&store, &run.id, "b").await?;
    let error = RunError {
        code: "history.inconsistent".into(),
        message: "conformance".into(),
    };
    ensure!(
        matches!(
            store.quarantine(&stale, error.clone()).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "a quarantine under a stale epoch was not refused with LeaseLost"
    );
    let held = stored(&store, &run.id).await?;
    ensure!(
        held.status == RunStatus::Running && held.lease_owner.as_deref() == Some("b"),
        "a stale quarantine changed the run: {} held by {:?}",
        held.status,
        held.lease_owner
    );
    let done = store
        .quarantine(&current, error.clone())
        .await
        .ctx("quarantine")?;
    let after = stored(&store, &run.id).await?;
    for (what, r) in [("returned", &done), ("stored", &after)] {
        ensure!(
            r.status == RunStatus::Quarantined
                && r.error.as_ref() == Some(&error)
                && r.lease_owner.is_none()
                && r.version == run.version,
            "the {what} record after quarantine: {} {:?}, lease {:?}, version {} (want {})",
            r.status,
            r.error,
            r.lease_owner,
            r.version,
            run.version
        );
    }
    ensure!(
        store
            .claim_next(&["Agent".into()], "c", LONG, 100)
            .await
            .ctx("claim_next")?
            .iter()
            .all(|(l, _)| l.run_id != run.id),
        "a quarantined run was claimed again"
    );
    Ok(())
}

/// A commit to a final status ends the lease in the same write; a commit that leaves the
/// run running or waiting keeps it.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_final_commit_ends_the_lease(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "final-commit", json!({})).await?;
    let lease = claim(&store, &run.id, "w").await?;
    let mut waiting = step(0, json!({ "n": 1 }));
    waiting.status = RunStatus::Waiting;
    waiting.waiting_for = Some("go".to_owned());
    let rec = store
        .commit_step(&lease, &waiting)
        .await
        .ctx("commit_step (waiting)")?;
    ensure!(
        rec.lease_owner.as_deref() == Some("w"),
        "a commit to `waiting` ended the lease (owner {:?})",
        rec.lease_owner
    );
    let mut done = step(1, json!({ "n": 2 }));
    done.status = RunStatus::Completed;
    let rec = store
        .commit_step(&lease, &done)
        .await
        .ctx("commit_step (completed)")?;
    let after = stored(&store, &run.id).await?;
    for (what, r) in [("returned", &rec), ("stored", &after)] {
        ensure!(
            r.lease_owner.is_none() && r.lease_expires_at.is_none(),
            "after a commit to `completed` the {what} record still has the lease: {:?} until {:?}",
            r.lease_owner,
            r.lease_expires_at
        );
    }
    ensure!(
        after.version == 2 && after.status == RunStatus::Completed && after.epoch == lease.epoch,
        "the final commit stored version {} status {} epoch {}",
        after.version,
        after.status,
        after.epoch
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
        after.epoch == old.epoch && after.claims_without_progress == 1,
        "expiring changed the epoch ({} -> {}) or the claim count ({}, want 1)",
        old.epoch,
        after.epoch,
        after.claims_without_progress
    );

    let taker = unique("taker");
    let taken = store
        .claim_next(std::slice::from_ref(&agent), &taker, LONG, 10)
        .await
        .ctx("claim_next")?;
    let mut ids: Vec<&str> = taken.iter().map(|(l, _)| l.run_id.as_str()).collect();
    ids.sort_unstable();
    let mut want = vec![held.id.as_str(), expired.id.as_str()];
    want.sort_unstable();
    ensure!(
        ids == want,
        "claim_next after expire_leases_of took {ids:?}, want {want:?} (not the other worker's run)"
    );
    let (new, rec) = taken
        .iter()
        .find(|(l, _)| l.run_id == held.id)
        .ok_or("the expired run was not taken")?;
    ensure!(
        new.epoch == old.epoch + 1 && rec.claims_without_progress == 2,
        "the takeover has epoch {} (want {}) and claim count {} (want 2)",
        new.epoch,
        old.epoch + 1,
        rec.claims_without_progress
    );
    ensure!(
        store.commit_step(&old, &step(0, json!({}))).await.is_err(),
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
    let mut taken = Vec::new();
    for limit in [2, 3, 10] {
        let batch = store
            .claim_next(std::slice::from_ref(&agent), "w", LONG, limit)
            .await
            .ctx("claim_next")?;
        taken.extend(batch.into_iter().map(|(l, _)| l.run_id));
    }
    ensure!(
        taken == created,
        "claim_next in batches of 2, 3 and 10 took {taken:?}, want the creation order {created:?}"
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
        store.commit_step(&l, &c).await.ctx("commit wait")?;
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
    store.commit_step(&l, &fin).await.ctx("commit")?;
    store.release_lease(&l).await.ctx("release_lease")?;
    let backing_off = store.create_run(mk("backoff")).await.ctx("create_run")?;
    let l = claim(&store, &backing_off.id, "setup").await?;
    let mut later = step(0, json!({}));
    later.wake_at = Some(now_ms() + 3_600_000);
    store.commit_step(&l, &later).await.ctx("commit")?;
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
        .map(|(l, _)| l.run_id.clone())
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
    for (l, rec) in one.iter().chain(&rest) {
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
                mine.extend(got.into_iter().map(|(l, _)| l.run_id));
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

/// Every version replays (time travel) as the state grows; fork starts a new run from any
/// version without touching the original.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_history_time_travel_and_fork(store: Arc<dyn Store>) -> CheckResult {
    const STEPS: u64 = 150;
    let r = create(&store, "travel", json!({ "items": [] })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    let mut state = json!({ "items": [], "meta": { "k": 0 } });
    let mut expected = vec![json!({ "items": [] })];
    for v in 0..STEPS {
        state["items"]
            .as_array_mut()
            .ok_or("test state lost its items")?
            .push(json!({ "n": v, "text": format!("step {v}") }));
        state["meta"]["k"] = json!(v);
        if v % 10 == 0 {
            // Shrinking and replacing changes too, not only growth.
            state["items"].as_array_mut().ok_or("no items")?.remove(0);
        }
        let mut c = step(v, state.clone());
        c.to_state = if v % 2 == 0 { "Even" } else { "Odd" }.into();
        c.from_state = if v == 0 {
            "Start"
        } else if v % 2 == 0 {
            "Odd"
        } else {
            "Even"
        }
        .into();
        store.commit_step(&lease, &c).await.ctx("commit_step")?;
        expected.push(state.clone());
    }
    for (v, want) in expected.iter().enumerate() {
        let at = store
            .state_at(&r.id, v as u64)
            .await
            .ctx("state_at")?
            .ok_or_else(|| format!("state_at({v}) is None"))?;
        ensure!(
            at.version == v as u64,
            "state_at({v}) answered version {}",
            at.version
        );
        ensure!(
            &at.state == want,
            "state_at({v}) differs from what was committed"
        );
        let name = match v {
            0 => "Start",
            v if v % 2 == 1 => "Even",
            _ => "Odd",
        };
        ensure!(
            at.state_name == name,
            "state_at({v}) has state name {}",
            at.state_name
        );
    }
    ensure!(
        store
            .state_at(&r.id, STEPS + 1)
            .await
            .ctx("state_at")?
            .is_none(),
        "state_at of a future version is not None"
    );
    verify_chain(&store, &r.id).await?;
    let fork_id = unique("fork");
    let fork = store.fork(&r.id, 100, &fork_id).await.ctx("fork")?;
    ensure!(
        fork.id == fork_id && fork.version == 0,
        "fork is not a new run at version 0"
    );
    ensure!(
        fork.state == expected[100],
        "fork does not start from the state at version 100"
    );
    ensure!(
        fork.parent == Some((r.id.clone(), 100)),
        "fork does not record its parent"
    );
    ensure!(fork.agent == r.agent, "fork changed the agent");
    let fl = claim(&store, &fork_id, "w").await?;
    store
        .commit_step(&fl, &step(0, json!({ "forked": true })))
        .await
        .ctx("commit on fork")?;
    let orig = stored(&store, &r.id).await?;
    ensure!(
        orig.version == STEPS && orig.state == state,
        "committing on a fork changed the original"
    );
    ensure!(
        store.fork(&r.id, STEPS + 5, &unique("bad")).await.is_err(),
        "fork from a version that does not exist succeeded"
    );
    Ok(())
}

/// Pruning keeps the current state and the last N versions replayable, honours
/// `only_final_runs`, removes old journal entries, and the run can still be resumed.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_prune_keeps_resume_working(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "prune", json!({ "items": [] })).await?;
    let lease = claim(&store, &r.id, "w").await?;
    let mut states = vec![json!({ "items": [] })];
    for v in 0..60u64 {
        store
            .record_entry(
                &lease,
                &entry(&r.id, v, 0, CallStatus::Succeeded, Some(json!(v))),
            )
            .await
            .ctx("record_entry")?;
        let mut s = states[states.len() - 1].clone();
        if let Some(items) = s["items"].as_array_mut() {
            items.push(json!(v));
        }
        store
            .commit_step(&lease, &step(v, s.clone()))
            .await
            .ctx("commit_step")?;
        states.push(s);
    }
    // A final run that must be pruned under only_final_runs.
    let fin = create(&store, "prune-final", json!({ "items": [] })).await?;
    let fl = claim(&store, &fin.id, "w").await?;
    grow(&store, &fl, 0, 20).await?;
    let mut done = step(20, json!({ "done": true }));
    done.status = RunStatus::Completed;
    store.commit_step(&fl, &done).await.ctx("commit_step")?;

    let report = store
        .prune(&RetentionPolicy {
            keep_last_versions: 5,
            only_final_runs: true,
        })
        .await
        .ctx("prune")?;
    ensure!(
        report.versions_removed >= 16,
        "prune of a final run removed {} versions",
        report.versions_removed
    );
    ensure!(
        store.state_at(&r.id, 0).await.ctx("state_at")?.is_some(),
        "only_final_runs pruned a running run"
    );
    let h = store.history(&fin.id).await.ctx("history")?;
    ensure!(
        h.iter().map(|t| t.version).collect::<Vec<_>>() == (17..=21).collect::<Vec<_>>(),
        "final run keeps versions {:?}, want 17..=21",
        h.iter().map(|t| t.version).collect::<Vec<_>>()
    );

    let report = store
        .prune(&RetentionPolicy {
            keep_last_versions: 10,
            only_final_runs: false,
        })
        .await
        .ctx("prune")?;
    ensure!(
        report.versions_removed >= 51,
        "prune removed {} versions, want >= 51",
        report.versions_removed
    );
    ensure!(
        report.entries_removed >= 50,
        "prune removed {} entries, want >= 50",
        report.entries_removed
    );
    for v in 0..=60u64 {
        let at = store.state_at(&r.id, v).await.ctx("state_at")?;
        if v < 51 {
            ensure!(at.is_none(), "pruned version {v} still readable");
        } else {
            let at = at.ok_or_else(|| format!("kept version {v} no longer readable"))?;
            ensure!(
                at.state == states[v as usize],
                "kept version {v} replays wrong after prune"
            );
        }
    }
    let h = store.history(&r.id).await.ctx("history")?;
    ensure!(
        h.first().map(|t| t.version) == Some(51) && h.len() == 10,
        "history after prune starts at {:?} with {} records",
        h.first().map(|t| t.version),
        h.len()
    );
    verify_chain(&store, &r.id).await?;
    let j = store.journal(&r.id, None).await.ctx("journal")?;
    ensure!(
        j.iter().all(|e| e.version >= 51),
        "journal of pruned versions kept"
    );
    // Resume: load, a new claim, more commits, time travel over the new versions.
    let cur = stored(&store, &r.id).await?;
    ensure!(
        cur.version == 60 && cur.state == states[60],
        "prune changed the current run"
    );
    store.release_lease(&lease).await.ctx("release_lease")?;
    let l2 = claim(&store, &r.id, "w2").await?;
    let last = grow(&store, &l2, 60, 5).await?;
    let at = store
        .state_at(&r.id, 65)
        .await
        .ctx("state_at")?
        .ok_or("new version unreadable")?;
    ensure!(
        at.state == last,
        "versions committed after prune replay wrong"
    );
    let again = store
        .prune(&RetentionPolicy {
            keep_last_versions: 10,
            only_final_runs: false,
        })
        .await
        .ctx("prune")?;
    ensure!(
        again.versions_removed == 5,
        "second prune removed {} versions, want 5",
        again.versions_removed
    );
    Ok(())
}

/// Bytes per run grow linearly: 1000 steps of a state gaining one item per step cost less
/// than 2.5x of 500 steps (full copies per version would cost 4x). Skipped when the
/// backend cannot measure (`storage_bytes` is `None`).
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_storage_grows_linearly(store: Arc<dyn Store>) -> CheckResult {
    let small = create(&store, "bytes500", json!({ "items": [] })).await?;
    if store
        .storage_bytes(&small.id)
        .await
        .ctx("storage_bytes")?
        .is_none()
    {
        return Ok(());
    }
    let large = create(&store, "bytes1000", json!({ "items": [] })).await?;
    let ls = claim(&store, &small.id, "w").await?;
    let ll = claim(&store, &large.id, "w").await?;
    grow(&store, &ls, 0, 500).await?;
    grow(&store, &ll, 0, 1000).await?;
    let b500 = store
        .storage_bytes(&small.id)
        .await
        .ctx("storage_bytes")?
        .ok_or("None")?;
    let b1000 = store
        .storage_bytes(&large.id)
        .await
        .ctx("storage_bytes")?
        .ok_or("None")?;
    #[allow(clippy::cast_precision_loss)]
    let ratio = b1000 as f64 / b500.max(1) as f64;
    ensure!(
        b1000 * 2 < b500 * 5,
        "storage is not linear: 1000 steps take {b1000} bytes, {ratio:.2}x of 500 steps ({b500})"
    );
    ensure!(b500 > 0, "storage_bytes reports 0 for 500 steps");
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

/// `set_status` quarantines a run that no live lease holds, refuses one that is held, and
/// an operator's retry back to running clears the error.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_set_status(store: Arc<dyn Store>) -> CheckResult {
    let r = create(&store, "status", json!({})).await?;
    let err = RunError {
        code: "state.corrupt".into(),
        message: "missing field `cart`".into(),
    };
    let q = store
        .set_status(&r.id, RunStatus::Quarantined, Some(err.clone()))
        .await
        .ctx("set_status")?;
    ensure!(
        q.status == RunStatus::Quarantined && q.error == Some(err.clone()),
        "quarantine not stored"
    );
    let loaded = stored(&store, &r.id).await?;
    ensure!(
        loaded.status == RunStatus::Quarantined && loaded.error == Some(err),
        "quarantine not durable"
    );
    ensure!(
        store
            .claim_run(&r.id, "w", LONG)
            .await
            .ctx("claim_run")?
            .is_none(),
        "a quarantined run was claimable"
    );
    let back = store
        .set_status(&r.id, RunStatus::Running, None)
        .await
        .ctx("set_status")?;
    ensure!(
        back.status == RunStatus::Running && back.error.is_none(),
        "retry did not clear the error"
    );
    let _lease = claim(&store, &r.id, "w").await?;
    ensure!(
        store
            .set_status(&r.id, RunStatus::DeadLettered, None)
            .await
            .is_err(),
        "set_status changed a run held by a live lease"
    );
    ensure!(
        matches!(
            store
                .set_status("no-such-run", RunStatus::Failed, None)
                .await,
            Err(StoreError::NotFound(_))
        ),
        "set_status of an unknown run must be NotFound"
    );
    Ok(())
}

/// `list_runs` filters by agent and status, newest first, with a limit.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_list_runs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("List");
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = store
            .create_run(new_run(
                &unique(&format!("list{i}")),
                &agent,
                json!({ "i": i }),
            ))
            .await
            .ctx("create_run")?;
        ids.push(r.id);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    store
        .set_status(
            &ids[1],
            RunStatus::Failed,
            Some(RunError {
                code: "handler".into(),
                message: "x".into(),
            }),
        )
        .await
        .ctx("set_status")?;
    let all = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            ..RunFilter::default()
        })
        .await
        .ctx("list_runs")?;
    let got: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    let want: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    ensure!(
        got == want,
        "list_runs must be newest first: {got:?} vs {want:?}"
    );
    let failed = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            statuses: vec![RunStatus::Failed],
            limit: None,
        })
        .await
        .ctx("list_runs")?;
    ensure!(
        failed.len() == 1 && failed[0].id == ids[1],
        "status filter failed"
    );
    let two = store
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            statuses: vec![],
            limit: Some(2),
        })
        .await
        .ctx("list_runs")?;
    ensure!(two.len() == 2 && two[0].id == ids[4], "limit failed");
    Ok(())
}

fn graph(agent: &str, extra_state: &str) -> Result<GraphDescription, String> {
    GraphDescription::from_json(
        &json!({
            "agent": agent,
            "states": [
                { "name": "Start", "initial": true, "to": [extra_state] },
                { "name": extra_state, "terminal": true }
            ],
            "tools": [{ "name": "search", "kind": "read" }]
        })
        .to_string(),
    )
    .map_err(|e| e.to_string())
}

/// Graphs are stored per fingerprint; the latest registered one is returned by default.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_agent_graphs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("Graph");
    let g1 = graph(&agent, "Done")?;
    let g2 = graph(&agent, "Finished")?;
    store.register_agent(&g1).await.ctx("register_agent")?;
    store
        .register_agent(&g1)
        .await
        .ctx("register_agent again")?;
    ensure!(
        store
            .agent_graph(&agent, None)
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g1),
        "registered graph not returned"
    );
    store.register_agent(&g2).await.ctx("register_agent")?;
    ensure!(
        store
            .agent_graph(&agent, None)
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g2),
        "the most recently registered graph is not the default"
    );
    ensure!(
        store
            .agent_graph(&agent, Some(&g1.fingerprint()))
            .await
            .ctx("agent_graph")?
            .as_ref()
            == Some(&g1),
        "graph by fingerprint not returned"
    );
    ensure!(
        store
            .agent_graph(&agent, Some("nope"))
            .await
            .ctx("agent_graph")?
            .is_none(),
        "unknown fingerprint returned a graph"
    );
    let names = store.agents().await.ctx("agents")?;
    ensure!(
        names.iter().filter(|n| **n == agent).count() == 1,
        "agents() must list each agent once: {names:?}"
    );
    let mut sorted = names.clone();
    sorted.sort();
    ensure!(sorted == names, "agents() is not sorted");
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
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let t = std::time::Instant::now();
            store.wait_for_work(Duration::from_secs(2)).await;
            t.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    create(&store, "work", json!({})).await?;
    let waited = waiter.await.map_err(|e| format!("waiter panicked: {e}"))?;
    ensure!(
        waited < Duration::from_secs(5),
        "wait_for_work(2s) took {waited:?}"
    );
    Ok(())
}

/// Damaged stored data (an unknown status name, an unparsable history payload) surfaces as
/// [`StoreError::Corrupt`], never a panic, and other runs are unaffected. `corrupt` damages
/// the given run's stored data in a backend-specific way.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_corrupt_data_is_an_error<F, Fut>(
    store: Arc<dyn Store>,
    corrupt: F,
) -> CheckResult
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let healthy = create(&store, "healthy", json!({ "items": [] })).await?;
    let bad = create(&store, "corrupt", json!({ "items": [] })).await?;
    let lease = claim(&store, &bad.id, "w").await?;
    grow(&store, &lease, 0, 5).await?;
    // Claimable again, so a claimer meets it next to the healthy run.
    store.release_lease(&lease).await.ctx("release_lease")?;
    corrupt(bad.id.clone()).await;
    let store2 = store.clone();
    let bad_id = bad.id.clone();
    // Run in a task so a panic in the store is reported as a failed check with a message.
    let outcome = tokio::spawn(async move {
        let load = store2.load_run(&bad_id).await;
        let at = store2.state_at(&bad_id, 5).await;
        (load, at)
    })
    .await
    .map_err(|e| format!("reading corrupt data panicked: {e}"))?;
    match outcome.0 {
        Ok(Some(_)) | Err(StoreError::Corrupt { .. }) => {}
        other => {
            return Err(format!(
                "load_run of corrupt run gave {other:?}, want Corrupt"
            ));
        }
    }
    match outcome.1 {
        Err(StoreError::Corrupt { run_id, .. }) => {
            ensure!(
                run_id == bad.id,
                "Corrupt names run `{run_id}`, not `{}`",
                bad.id
            );
        }
        other => {
            return Err(format!(
                "state_at of a corrupt version gave {other:?}, want Corrupt"
            ));
        }
    }
    let ok = store
        .load_run(&healthy.id)
        .await
        .ctx("load_run of a healthy run")?;
    ensure!(ok.is_some(), "healthy run vanished");
    ensure!(
        store
            .state_at(&healthy.id, 0)
            .await
            .ctx("state_at of a healthy run")?
            .is_some(),
        "healthy run's history unreadable"
    );
    let claimed = store
        .claim_next(&["Agent".into()], "w9", LONG, 100)
        .await
        .ctx("claim_next next to a corrupt run")?;
    ensure!(
        claimed.iter().any(|(l, _)| l.run_id == healthy.id),
        "a corrupt run kept claim_next from returning a healthy run"
    );
    if let Ok(Some(r)) = store.load_run(&bad.id).await {
        ensure!(
            !claimed.iter().any(|(l, _)| l.run_id == bad.id) || r.state.is_object(),
            "claim_next handed out a run whose state does not read"
        );
    }
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
    let want = crate::store::compute_tool_stats(&journal, since);
    let got = store.tool_stats(since).await.ctx("tool_stats")?;
    ensure!(
        got == want,
        "tool_stats {got:?}\n  differs from the journal's {want:?}"
    );
    ensure!(!got.is_empty(), "no statistics");
    Ok(())
}
