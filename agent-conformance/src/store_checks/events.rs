//! Events ([`EventLog::events`]): derived from the records as committed, with cursors that
//! grow in commit order within a run, the same from any cursor as from the start, and
//! wake-ups for followers where the store has them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{CheckResult, Ctx, claim, entry, new_run, step, unique};
use agent_core::events::{FollowConfig, Follower};
use agent_core::router::{Decision, DecisionRecord};
use agent_core::store::FailureCode;
use agent_core::store::WaitingFor;
use agent_core::store::{
    CallStatus, EntryKind, EventCursor, EventKind, EventScope, EventWake, JournalEntry, RunEvent,
    RunStatus, Store, StoreError,
};

pub(super) async fn all_events(
    store: &Arc<dyn Store>,
    scope: &EventScope,
) -> Result<Vec<RunEvent>, String> {
    let mut out: Vec<RunEvent> = Vec::new();
    loop {
        let after = out.last().map_or(EventCursor::START, |e| e.cursor);
        let page = store.events(scope, after, 100).await.ctx("events")?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

pub(super) fn type_of(e: &RunEvent) -> String {
    serde_json::to_value(&e.kind)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn strictly_increasing(events: &[RunEvent]) -> CheckResult {
    for pair in events.windows(2) {
        ensure!(
            pair[0].cursor < pair[1].cursor,
            "cursors do not grow: {} then {} ({} then {})",
            pair[0].cursor,
            pair[1].cursor,
            type_of(&pair[0]),
            type_of(&pair[1])
        );
    }
    Ok(())
}

/// The first place where two event lists differ.
fn first_difference<'a>(
    a: &'a [RunEvent],
    b: &'a [RunEvent],
) -> Option<(Option<&'a RunEvent>, Option<&'a RunEvent>)> {
    (0..a.len().max(b.len()))
        .map(|i| (a.get(i), b.get(i)))
        .find(|(x, y)| x != y)
}

fn decision_entry(run_id: &str, version: u64, seq: u32, to: &str) -> JournalEntry {
    let record = DecisionRecord {
        options: vec![to.to_owned(), "Elsewhere".to_owned()],
        decision: Some(Decision::Transition {
            to: to.to_owned(),
            arguments: json!({}),
        }),
        rejection: None,
        model: "scripted".to_owned(),
        prompt_hash: "h".to_owned(),
        input_tokens: Some(12),
        output_tokens: Some(3),
        cost: None,
        latency_ms: 5,
        raw_output: String::new(),
    };
    let mut e = entry(
        run_id,
        version,
        seq,
        CallStatus::Succeeded,
        serde_json::to_value(&record).ok(),
    );
    e.kind = EntryKind::Decision;
    "router".clone_into(&mut e.name);
    e.tool_kind = None;
    e.idempotency_key = None;
    e.input = json!({ "prompt_hash": "h", "options": record.options });
    e
}

/// A run that went through every kind of record: created, a tool call started then
/// ended, a decision, a wait for a signal, the signal, a step consuming it, a status set
/// without a version, and the end. Returns its id.
async fn eventful_run(store: &Arc<dyn Store>) -> Result<String, String> {
    let id = unique("events");
    let agent = unique("EventAgent");
    store
        .create_run(new_run(&id, &agent, json!({ "n": 0 })))
        .await
        .ctx("create_run")?;
    let lease = claim(store, &id, "w").await?;
    store
        .record_entry(&lease, &entry(&id, 0, 0, CallStatus::Started, None))
        .await
        .ctx("record_entry started")?;
    store
        .record_entry(
            &lease,
            &entry(&id, 0, 0, CallStatus::Succeeded, Some(json!(1))),
        )
        .await
        .ctx("record_entry succeeded")?;
    store
        .record_entry(&lease, &decision_entry(&id, 0, 1, "Waiting"))
        .await
        .ctx("record_entry decision")?;
    let mut wait = step(0, json!({ "n": 1 }));
    "Waiting".clone_into(&mut wait.to_state);
    wait.status = RunStatus::Waiting;
    wait.waiting_for = Some(WaitingFor::signal("approve"));
    store
        .commit_step(&lease, &wait, &[])
        .await
        .ctx("commit wait")?;
    store.release_lease(&lease).await.ctx("release")?;
    let signal = store
        .send_signal(&id, "approve", &json!({ "ok": true }))
        .await
        .ctx("send_signal")?;
    let lease = claim(store, &id, "w").await?;
    let mut resume = step(1, json!({ "n": 2 }));
    "Waiting".clone_into(&mut resume.from_state);
    resume.consumed_signal = Some(signal);
    store
        .commit_step(&lease, &resume, &[])
        .await
        .ctx("commit resume")?;
    store.release_lease(&lease).await.ctx("release")?;
    store
        .set_status(&id, RunStatus::Running, None)
        .await
        .ctx("set_status")?;
    let lease = claim(store, &id, "w").await?;
    let mut done = step(2, json!({ "n": 3 }));
    "Done".clone_into(&mut done.to_state);
    done.status = RunStatus::Completed;
    store
        .commit_step(&lease, &done, &[])
        .await
        .ctx("commit done")?;
    Ok(id)
}

/// Every record gives its events, in the order the records were written, each with what
/// it says; cursors grow.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_events_follow_the_records(store: Arc<dyn Store>) -> CheckResult {
    let id = eventful_run(&store).await?;
    let events = all_events(&store, &EventScope::Run(id.clone())).await?;
    strictly_increasing(&events)?;
    let types: Vec<String> = events.iter().map(type_of).collect();
    let expected = [
        "run_created",
        "tool_started",
        "tool_finished",
        "decision_asked",
        "decision_accepted",
        "transition_committed",
        "wait_entered",
        "signal_received",
        "transition_committed",
        "signal_consumed",
        "status_set",
        "transition_committed",
        "run_finished",
    ];
    ensure!(
        types == expected,
        "events of the run: {types:?}, expected {expected:?}"
    );
    ensure!(
        events.iter().all(|e| e.run_id == id && !e.agent.is_empty()),
        "events name another run or no agent"
    );
    match &events[2].kind {
        EventKind::ToolFinished {
            version: 0,
            call: 0,
            status: CallStatus::Succeeded,
            attempts: 1,
            ..
        } => {}
        other => return Err(format!("tool_finished says {other:?}")),
    }
    match &events[4].kind {
        EventKind::DecisionAccepted {
            transition: Some(to),
            input_tokens: Some(12),
            ..
        } if to == "Waiting" => {}
        other => return Err(format!("decision_accepted says {other:?}")),
    }
    match &events[6].kind {
        EventKind::WaitEntered {
            version: 1,
            waiting_for: Some(w),
            ..
        } if w == "approve" => {}
        other => return Err(format!("wait_entered says {other:?}")),
    }
    match &events[9].kind {
        EventKind::SignalConsumed {
            name, version: 2, ..
        } if name == "approve" => {}
        other => return Err(format!("signal_consumed says {other:?}")),
    }
    match &events[12].kind {
        EventKind::RunFinished {
            version: 3,
            status: RunStatus::Completed,
            ..
        } => {}
        other => return Err(format!("run_finished says {other:?}")),
    }
    let json = serde_json::to_value(&events[0]).map_err(|e| e.to_string())?;
    ensure!(
        json["type"] == "run_created" && json["cursor"].is_u64() && json["state"] == "Start",
        "an event's JSON: {json}"
    );
    Ok(())
}

/// Reading after any cursor gives exactly what follows it in a read from the start, page
/// by page or at once; a run that does not exist is `NotFound`.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_events_resume_from_any_cursor(store: Arc<dyn Store>) -> CheckResult {
    let id = eventful_run(&store).await?;
    let scope = EventScope::Run(id);
    let full = store
        .events(&scope, EventCursor::START, 1000)
        .await
        .ctx("events")?;
    ensure!(full.len() >= 10, "only {} events", full.len());
    for (i, e) in full.iter().enumerate() {
        let rest = store.events(&scope, e.cursor, 1000).await.ctx("events")?;
        ensure!(
            rest == full[i + 1..],
            "after cursor {} ({}): {} events, expected {}",
            e.cursor,
            type_of(e),
            rest.len(),
            full.len() - i - 1
        );
    }
    for limit in [1, 2, 3] {
        let mut paged: Vec<RunEvent> = Vec::new();
        loop {
            let after = paged.last().map_or(EventCursor::START, |e| e.cursor);
            let page = store.events(&scope, after, limit).await.ctx("events")?;
            ensure!(
                page.len() <= limit,
                "a page of {} for limit {limit}",
                page.len()
            );
            if page.is_empty() {
                break;
            }
            paged.extend(page);
        }
        ensure!(
            paged == full,
            "pages of {limit} differ from one read: {:?}",
            first_difference(&paged, &full)
        );
    }
    match store
        .events(&EventScope::Run(unique("missing")), EventCursor::START, 10)
        .await
    {
        Err(StoreError::NotFound(_)) => Ok(()),
        other => Err(format!("events of a missing run: {other:?}")),
    }
}

/// Calls recorded in parallel, with a reader following after its cursor meanwhile: the
/// reader sees every event exactly once, as a read from the start does afterwards (the
/// cursors of one run grow in commit order).
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_events_of_parallel_calls_are_not_lost(store: Arc<dyn Store>) -> CheckResult {
    const CALLS: u32 = 16;
    let id = unique("parallel-events");
    store
        .create_run(new_run(&id, "Agent", json!({})))
        .await
        .ctx("create_run")?;
    let lease = claim(&store, &id, "w").await?;
    let scope = EventScope::Run(id.clone());
    let writers: Vec<_> = (0..CALLS)
        .map(|seq| {
            let (store, lease, id) = (store.clone(), lease.clone(), id.clone());
            tokio::spawn(async move {
                for status in [CallStatus::Started, CallStatus::Succeeded] {
                    store
                        .record_entry(&lease, &entry(&id, 0, seq, status, Some(json!(seq))))
                        .await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    let mut seen: Vec<RunEvent> = Vec::new();
    let mut done = false;
    while !done {
        done = writers.iter().all(tokio::task::JoinHandle::is_finished);
        let after = seen.last().map_or(EventCursor::START, |e| e.cursor);
        seen.extend(store.events(&scope, after, 7).await.ctx("events")?);
        tokio::task::yield_now().await;
    }
    for w in writers {
        w.await.map_err(|e| e.to_string())?.ctx("record_entry")?;
    }
    loop {
        let after = seen.last().map_or(EventCursor::START, |e| e.cursor);
        let page = store.events(&scope, after, 7).await.ctx("events")?;
        if page.is_empty() {
            break;
        }
        seen.extend(page);
    }
    strictly_increasing(&seen)?;
    let full = all_events(&store, &scope).await?;
    ensure!(
        seen == full,
        "a reader following along saw {} events, a read afterwards {}: {:?}",
        seen.len(),
        full.len(),
        first_difference(&seen, &full)
    );
    ensure!(
        full.len() == 1 + 2 * CALLS as usize,
        "{} events for {CALLS} calls",
        full.len()
    );
    Ok(())
}

/// An agent's events are its runs' only; every run's include both agents'; in either,
/// cursors grow.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_events_by_agent_and_of_all(store: Arc<dyn Store>) -> CheckResult {
    let (a, b) = (unique("AgentA"), unique("AgentB"));
    let mut ids = BTreeSet::new();
    for agent in [&a, &b, &a] {
        let id = unique("scoped");
        store
            .create_run(new_run(&id, agent, json!({})))
            .await
            .ctx("create_run")?;
        let lease = claim(&store, &id, "w").await?;
        store
            .commit_step(&lease, &step(0, json!({ "n": 1 })), &[])
            .await
            .ctx("commit_step")?;
        ids.insert(id);
    }
    let of_a = all_events(&store, &EventScope::Agent(a.clone())).await?;
    strictly_increasing(&of_a)?;
    ensure!(
        of_a.len() == 4 && of_a.iter().all(|e| e.agent == a),
        "events of agent A: {:?}",
        of_a.iter()
            .map(|e| (&e.agent, type_of(e)))
            .collect::<Vec<_>>()
    );
    let all = all_events(&store, &EventScope::All).await?;
    strictly_increasing(&all)?;
    let mine: BTreeSet<&String> = all
        .iter()
        .filter(|e| ids.contains(&e.run_id))
        .map(|e| &e.run_id)
        .collect();
    ensure!(
        mine.len() == 3,
        "every run's events hold {} of the 3 runs",
        mine.len()
    );
    Ok(())
}

/// A follower gets an event written after it started, soon, woken or by its poll; where
/// the store sends wake-ups, a write to a run wakes its listeners with the run's id.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_followers_are_woken(store: Arc<dyn Store>) -> CheckResult {
    let id = unique("followed");
    store
        .create_run(new_run(&id, "Agent", json!({})))
        .await
        .ctx("create_run")?;
    let config = FollowConfig {
        poll: Duration::from_millis(200),
        ..FollowConfig::default()
    };
    let mut follower = Follower::with_config(
        store.clone(),
        EventScope::Run(id.clone()),
        EventCursor::START,
        config,
    )
    .await
    .ctx("follower")?;
    let first = follower.next().await.ctx("next")?;
    ensure!(type_of(&first) == "run_created", "first event: {first:?}");
    let mut wakes = store.event_wakes().await.ctx("event_wakes")?;
    let lease = claim(&store, &id, "w").await?;
    let writer = {
        let (store, lease, id) = (store.clone(), lease.clone(), id.clone());
        tokio::spawn(async move {
            // A store that notifies only once it has seen a listener may take a moment;
            // keep writing until then.
            for seq in 0..100 {
                let e = entry(&id, 0, seq, CallStatus::Started, None::<Value>);
                if store.record_entry(&lease, &e).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let next = tokio::time::timeout(Duration::from_secs(5), follower.next()).await;
    let result = match next {
        Err(_) => Err("no event reached the follower within 5 s".to_owned()),
        Ok(Err(e)) => Err(format!("follower: {e}")),
        Ok(Ok(e)) if type_of(&e) == "tool_started" => Ok(()),
        Ok(Ok(e)) => Err(format!("follower got {e:?}")),
    };
    let woken = match wakes.as_mut() {
        None => Ok(()),
        Some(w) => loop {
            match tokio::time::timeout(Duration::from_secs(10), w.next()).await {
                Err(_) => break Err("no wake-up within 10 s of writes".to_owned()),
                Ok(EventWake::Run(run)) if *run == *id => break Ok(()),
                Ok(EventWake::Closed) => break Err("wake-ups closed".to_owned()),
                Ok(_) => {}
            }
        },
    };
    writer.abort();
    result?;
    woken
}

/// Followers of one [`EventHub`](agent_core::events::EventHub) cost no read while idle, share
/// each read after a wake-up, and each get every event written after they started.
///
/// # Errors
/// What the store (or the hub over it) did wrong.
pub async fn check_hub_followers_share_reads(store: Arc<dyn Store>) -> CheckResult {
    const FOLLOWERS: usize = 64;
    const WRITES: u32 = 3;
    let id = unique("hub-followed");
    store
        .create_run(new_run(&id, "Agent", json!({})))
        .await
        .ctx("create_run")?;
    let config = FollowConfig {
        poll: Duration::from_millis(100),
        ..FollowConfig::default()
    };
    let hub = agent_core::events::EventHub::new(store.clone(), config);
    let mut followers = Vec::new();
    for _ in 0..FOLLOWERS {
        let mut f = hub.follower(EventScope::Run(id.clone()), EventCursor::START);
        let first = f.next().await.ctx("next")?;
        ensure!(type_of(&first) == "run_created", "first event: {first:?}");
        followers.push(f);
    }
    // Parked: waiting for the next event, as an idle event stream does.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for mut f in followers {
        let tx = tx.clone();
        tokio::spawn(async move {
            for _ in 0..WRITES {
                let got = f.next().await.map(|e| type_of(&e));
                if tx.send(got).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let idle_from = hub.store_reads();
    // Ten of the hub's polls with nothing written: lone followers would read 640 times.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_reads = hub.store_reads() - idle_from;
    ensure!(
        idle_reads <= 2,
        "{FOLLOWERS} idle followers read the store {idle_reads} times in 10 polls"
    );
    let lease = claim(&store, &id, "w").await?;
    let busy_from = hub.store_reads();
    for seq in 0..WRITES {
        let e = entry(&id, 0, seq, CallStatus::Started, None::<Value>);
        store.record_entry(&lease, &e).await.ctx("record_entry")?;
    }
    let mut got = 0;
    while got < FOLLOWERS * WRITES as usize {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Err(_) => return Err(format!("{got} events reached the followers within 10 s")),
            Ok(None) => return Err(format!("the followers ended after {got} events")),
            Ok(Some(Err(e))) => return Err(format!("follower: {e}")),
            Ok(Some(Ok(kind))) if kind == "tool_started" => got += 1,
            Ok(Some(Ok(kind))) => return Err(format!("a follower got `{kind}`")),
        }
    }
    let busy_reads = hub.store_reads() - busy_from;
    ensure!(
        busy_reads < FOLLOWERS as u64 / 2,
        "{FOLLOWERS} followers read the store {busy_reads} times for {WRITES} writes"
    );
    Ok(())
}

/// A status set without a version (dead-lettered, then retried) is an event, and a final
/// one ends the run's events with `run_finished`.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_status_changes_are_events(store: Arc<dyn Store>) -> CheckResult {
    let id = unique("status-events");
    store
        .create_run(new_run(&id, "Agent", json!({})))
        .await
        .ctx("create_run")?;
    let error = agent_core::store::RunFailure {
        code: FailureCode::CrashLoop,
        message: "too many claims".to_owned(),
    };
    store
        .set_status(&id, RunStatus::DeadLettered, Some(error))
        .await
        .ctx("set_status dead_lettered")?;
    store
        .set_status(&id, RunStatus::Running, None)
        .await
        .ctx("set_status running")?;
    let events = all_events(&store, &EventScope::Run(id)).await?;
    let types: Vec<String> = events.iter().map(type_of).collect();
    ensure!(
        types == ["run_created", "status_set", "run_finished", "status_set"],
        "events: {types:?}"
    );
    match &events[2].kind {
        EventKind::RunFinished {
            status: RunStatus::DeadLettered,
            error: Some(e),
            ..
        } if e.code == "crash_loop" => Ok(()),
        other => Err(format!("run_finished says {other:?}")),
    }
}
