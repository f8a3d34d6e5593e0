//! Repairing a quarantined run ([`agent_core::store::repair`]).

use std::sync::Arc;

use serde_json::json;

use super::{
    CheckResult, Ctx, check_operator_write, claim, create, grow, step, stored, verify_chain,
};
use agent_core::store::FailureCode;
use agent_core::store::{
    OperatorNote, RepairError, RunFailure, Store, StoreError, TransitionKind, plan_repair, repair,
};

fn note() -> OperatorNote {
    OperatorNote::new("conformance", "the state was restored by hand")
}

/// A quarantined run repaired to an earlier version: running again at a new version with
/// that version's state, its error cleared, the repair a `repair` transition the hash chain
/// verifies; a later step commits on top. Refused, with nothing written, for a run that is
/// not quarantined, a version that is not stored, and a plan the run moved past.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_repair_resets_a_quarantined_run(store: Arc<dyn Store>) -> CheckResult {
    let run = create(&store, "repair", json!({ "items": [] })).await?;
    let lease = claim(&store, &run.id, "w").await?;
    grow(&store, &lease, 0, 3).await?;
    let at_one = store
        .state_at(&run.id, 1)
        .await
        .ctx("state_at")?
        .ok_or("version 1 not stored")?;
    match repair(store.as_ref(), &run.id, 1, note()).await {
        Err(RepairError::NotQuarantined { .. }) => {}
        other => return Err(format!("repair of a running run gave {other:?}")),
    }
    let error = RunFailure {
        code: FailureCode::StateCorrupt,
        message: "conformance".into(),
    };
    store.quarantine(&lease, error).await.ctx("quarantine")?;
    match repair(store.as_ref(), &run.id, 9, note()).await {
        Err(RepairError::NoSuchVersion { version: 9, .. }) => {}
        other => return Err(format!("repair to a version never stored gave {other:?}")),
    }
    let plan = plan_repair(store.as_ref(), &run.id, 1, note())
        .await
        .map_err(|e| format!("plan_repair: {e}"))?;
    let stale = plan.clone();
    let repaired = store.repair_run(&plan).await.ctx("repair_run")?;
    let write = ("repair", TransitionKind::Repair, &note());
    check_operator_write(&store, &repaired, write, 4, &at_one.state, lease.epoch).await?;
    // The same plan again: the run moved past it (no longer quarantined, another epoch).
    ensure!(
        matches!(
            store.repair_run(&stale).await,
            Err(StoreError::Conflict { .. })
        ),
        "a stale repair plan was not refused with Conflict"
    );
    ensure!(
        stored(&store, &run.id).await?.version == 4,
        "a refused repair wrote a version"
    );
    // The repaired run goes on like any other.
    let next = claim(&store, &run.id, "w2").await?;
    store
        .commit_step(&next, &step(4, json!({ "items": ["after repair"] })), &[])
        .await
        .ctx("commit_step after repair")?;
    verify_chain(&store, &run.id).await
}
