//! What a step guarantees: fencing, quarantine, waits, kill switch, router, cache, redaction.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Scenario, check_history, check_world, config, runner, start};
use crate::fixture::{self, Behaviour, Order, World};
use agent_core::Agent;
use agent_core::runner::{Runner, RunnerConfig, RunnerError};
use agent_core::store::WaitingFor;
use agent_core::store::{CallStatus, Claimed, EntryKind, NewRun, RunStatus, Store};
use agent_core::tool::ToolKind;

/// A worker whose lease was taken over is fenced: its journal writes and its commit are
/// rejected, and it executes no write.
///
/// # Errors
/// What went wrong.
pub async fn check_stale_worker_is_fenced(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Scenario::Paid.world();
    let zombie = runner(&store, &world, "Pay", "zombie")?;
    let healthy = runner(&store, &world, "Pay", "healthy")?;
    start(&zombie, "fenced").await?;
    let Claimed {
        mut lease, record, ..
    } = store
        .claim_run("fenced", "zombie", Duration::from_millis(1))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("could not claim")?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let done = healthy.run("fenced").await.map_err(|e| e.to_string())?;
    if done.status != RunStatus::Completed {
        return Err(format!("healthy worker ended in {}", done.status));
    }
    let before = world.state().executions;
    match zombie.step(&mut lease, record).await {
        Err(RunnerError::LeaseLost(_)) => {}
        other => return Err(format!("stale worker was not stopped: {other:?}")),
    }
    if world.state().executions != before {
        return Err("the stale worker executed a write".into());
    }
    check_world(&world, Scenario::Paid)?;
    check_history(store.as_ref(), &done).await
}

/// A run whose state no longer deserializes, or whose state left the graph, is quarantined
/// before any tool call; a healthy run next to it completes.
///
/// # Errors
/// What went wrong.
pub async fn check_quarantine(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Scenario::Paid.world();
    let r = runner(&store, &world, "Pay", "w")?;
    store
        .register_agent(Order::graph())
        .await
        .map_err(|e| e.to_string())?;
    let fingerprint = Order::graph().fingerprint();
    for (id, state_name, state, fp, code) in [
        (
            "bad-json",
            "Start",
            json!({ "Start": { "items": 5 } }),
            fingerprint.clone(),
            "state.corrupt",
        ),
        (
            "gone-state",
            "Gone",
            json!({ "Gone": {} }),
            "0ld".to_owned(),
            "graph.incompatible",
        ),
        (
            "name-mismatch",
            "Pay",
            json!({ "Start": { "items": [] } }),
            fingerprint.clone(),
            "state.corrupt",
        ),
    ] {
        store
            .create_run(NewRun::new(id, Order::NAME, fp, state_name, state))
            .await
            .map_err(|e| e.to_string())?;
        let record = r.run(id).await.map_err(|e| e.to_string())?;
        let got = record.error.as_ref().map(|e| e.code.as_str());
        if record.status != RunStatus::Quarantined || got != Some(code) {
            return Err(format!(
                "{id}: {} {:?}, expected quarantined with {code}",
                record.status, record.error
            ));
        }
    }
    if !world.state().applied.is_empty() || world.state().reads != 0 {
        return Err("a tool ran for a quarantined run".into());
    }
    start(&r, "healthy").await?;
    let record = r.run("healthy").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("healthy run ended {}", record.status));
    }
    Ok(())
}

/// A waiting run lives in the store: a new runner delivers the signal and finishes it.
///
/// # Errors
/// What went wrong.
pub async fn check_wait_survives_restart(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let first = runner(&store, &world, "Pay", "before-restart")?;
    first
        .start("waits", fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    let record = first.run("waits").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Waiting
        || record.waiting_for != Some(WaitingFor::signal("confirm"))
    {
        return Err(format!(
            "expected waiting for `confirm`, got {} {:?}",
            record.status, record.waiting_for
        ));
    }
    // Looking at a waiting run again and again is not a crash loop.
    for _ in 0..2 * RunnerConfig::default().max_claims_without_progress {
        let again = first.run("waits").await.map_err(|e| e.to_string())?;
        if again.status != RunStatus::Waiting {
            return Err(format!(
                "a waiting run polled repeatedly became {}",
                again.status
            ));
        }
    }
    drop(first);
    let second = runner(&store, &world, "Pay", "after-restart")?;
    second
        .signal("waits", "confirm", json!({"ok": true}))
        .await
        .map_err(|e| e.to_string())?;
    let record = second.run("waits").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {} after the signal", record.status));
    }
    if !store
        .pending_signals("waits")
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return Err("the signal was not consumed".into());
    }
    check_history(store.as_ref(), &record).await
}

/// A disabled tool fails fast with `tool.disabled`, and the run takes its error path.
///
/// # Errors
/// What went wrong.
pub async fn check_kill_switch(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    store
        .set_tool_enabled("Charge", false, Some("incident 42"))
        .await
        .map_err(|e| e.to_string())?;
    start(&r, "killed").await?;
    let record = r.run("killed").await.map_err(|e| e.to_string())?;
    store
        .set_tool_enabled("Charge", true, None)
        .await
        .map_err(|e| e.to_string())?;
    if record.status != RunStatus::Compensated || record.state_name != "Failed" {
        return Err(format!(
            "expected Failed/compensated, got {}/{}",
            record.state_name, record.status
        ));
    }
    let journal = store
        .journal("killed", None)
        .await
        .map_err(|e| e.to_string())?;
    let disabled = journal.iter().any(|e| {
        e.name == "Charge"
            && e.status == CallStatus::Failed
            && e.error_code.as_deref() == Some("tool.disabled")
    });
    if !disabled {
        return Err("no `tool.disabled` failure journaled for Charge".into());
    }
    if world.state().applied.iter().any(|(t, _)| t == "Charge") {
        return Err("the disabled tool ran".into());
    }
    Ok(())
}

/// A router that names tools not legal in its state is rejected every time, nothing runs,
/// each rejection is journaled, and after the bounded re-asks the run fails and compensates.
///
/// # Errors
/// What went wrong.
pub async fn check_illegal_router_answers(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let hostile = Arc::new(agent_core::router::ScriptedRouter::from_fn(|_| {
        agent_core::router::ScriptedRouter::choose("Charge", r#"{"cents": 1000000}"#)
    }));
    let r =
        Runner::<Order, Behaviour>::builder(Arc::clone(&store), Behaviour, fixture::tools(&world))
            .router(hostile.clone())
            .config(config("w"))
            .build()
            .map_err(|e| e.to_string())?;
    start(&r, "hostile").await?;
    let record = r.run("hostile").await.map_err(|e| e.to_string())?;
    if world.state().applied.iter().any(|(t, _)| t == "Charge") {
        return Err("a forbidden tool ran".into());
    }
    let journal = store
        .journal("hostile", None)
        .await
        .map_err(|e| e.to_string())?;
    let rejections = journal
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Decision
                && e.error_code.as_deref() == Some("decision.unknown_option")
        })
        .count();
    let expected = usize::try_from(r.config().max_reasks + 1).unwrap_or(usize::MAX);
    if rejections != expected || hostile.calls() != expected as u64 {
        return Err(format!(
            "{rejections} rejections journaled, {} asks; expected {expected}",
            hostile.calls()
        ));
    }
    if record.status != RunStatus::Compensated
        || record.error.as_ref().map(|e| e.code.as_str()) != Some("routing")
    {
        return Err(format!(
            "expected compensated with `routing`, got {} {:?}",
            record.status, record.error
        ));
    }
    check_world(&world, Scenario::Cancelled)
}

/// A read repeated with the same input within a run is served from the journal.
///
/// # Errors
/// What went wrong.
pub async fn check_read_cache(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let r = runner(&store, &world, "Pay", "w")?;
    r.start("cached", fixture::initial(&["same", "same"]))
        .await
        .map_err(|e| e.to_string())?;
    r.signal("cached", "confirm", json!({"ok": true}))
        .await
        .map_err(|e| e.to_string())?;
    let record = r.run("cached").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {}", record.status));
    }
    // `same` twice in Start, `router-check` once in Decide.
    let reads = world.state().reads;
    if reads != 2 {
        return Err(format!(
            "{reads} read executions, expected 2 (one served from the journal)"
        ));
    }
    let journal = store
        .journal("cached", None)
        .await
        .map_err(|e| e.to_string())?;
    let lookups = journal
        .iter()
        .filter(|e| e.name == "Lookup" && e.tool_kind == Some(ToolKind::Read))
        .count();
    if lookups != 3 {
        return Err(format!("{lookups} Lookup entries journaled, expected 3"));
    }
    Ok(())
}

/// Fields configured for redaction never reach the journal or the router, while input
/// hashes still identify the real input.
///
/// # Errors
/// What went wrong.
pub async fn check_redaction(store: Arc<dyn Store>) -> Result<(), String> {
    let world = Arc::new(World::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen_by_router = Arc::clone(&seen);
    let router = agent_core::router::ScriptedRouter::from_fn(move |req| {
        if let Ok(mut s) = seen_by_router.lock() {
            s.push(serde_json::to_string(req).unwrap_or_default());
        }
        if req.tool_results.iter().any(|r| r.tool == "Lookup") {
            agent_core::router::ScriptedRouter::choose("Pay", "{}")
        } else {
            agent_core::router::ScriptedRouter::choose("Lookup", r#"{"sku":"router-check"}"#)
        }
    });
    let r =
        Runner::<Order, Behaviour>::builder(Arc::clone(&store), Behaviour, fixture::tools(&world))
            .router(Arc::new(router))
            .config(RunnerConfig {
                redact_fields: vec![
                    "cents".into(),
                    "reservation".into(),
                    "reservations".into(),
                    "sku".into(),
                ],
                seal_keys: agent_core::secrets::SealKeys::generate("conformance"),
                ..config("w")
            })
            .build()
            .map_err(|e| e.to_string())?;
    start(&r, "redacted").await?;
    let record = r.run("redacted").await.map_err(|e| e.to_string())?;
    if record.status != RunStatus::Completed {
        return Err(format!("status {}", record.status));
    }
    let journal = store
        .journal("redacted", None)
        .await
        .map_err(|e| e.to_string())?;
    let charge = journal
        .iter()
        .find(|e| e.name == "Charge")
        .ok_or("no Charge entry")?;
    // Stored sealed, and opening to exactly what ran.
    let sealed = charge
        .input
        .get("cents")
        .and_then(agent_core::secrets::sealed_text);
    let opened = sealed.map(|s| r.config().seal_keys.open(s));
    if !matches!(opened, Some(Ok(ref v)) if *v == json!(200)) {
        return Err(format!("journaled Charge input {}", charge.input));
    }
    if charge.input_hash != agent_core::store::input_hash(&json!({ "cents": 200 })) {
        return Err("the input hash does not identify the real input".into());
    }
    let text = serde_json::to_string(&journal).map_err(|e| e.to_string())?;
    for secret in ["\"bb\"", "res-"] {
        if text.contains(secret) {
            return Err(format!("`{secret}` reached the journal"));
        }
    }
    let asked = seen.lock().map(|s| s.join("\n")).unwrap_or_default();
    if asked.is_empty() || asked.contains("res-") || asked.contains("router-check") {
        return Err(format!("a redacted value reached the router: {asked}"));
    }
    Ok(())
}
