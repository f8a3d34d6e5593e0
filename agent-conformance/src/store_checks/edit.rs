//! Editing a stopped run's state ([`agent_core::store::edit`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{CheckResult, Ctx, check_operator_write, claim, stored, unique, verify_chain};
use agent_core::graph::GraphDescription;
use agent_core::secrets::{Redactor, SealKeys};
use agent_core::store::edit::{Edit, EditCheck, EditError, StateEdit, edit, plan_edit};
use agent_core::store::{
    FailureCode, NewRun, OperatorNote, RunFailure, RunRecord, RunStatus, StepCommit, Store,
    StoreError, TransitionKind,
};

/// `Start -> Review -> Done`, `Start` failing to `Failed`: the edits' graph.
fn graph(agent: &str) -> Result<GraphDescription, String> {
    GraphDescription::from_json(
        &json!({
            "agent": agent,
            "states": [
                { "name": "Start", "initial": true, "to": ["Review", "Failed"],
                  "on_error": "Failed" },
                { "name": "Review", "to": ["Done"] },
                { "name": "Done", "terminal": true },
                { "name": "Failed", "terminal": true }
            ],
            "tools": []
        })
        .to_string(),
    )
    .map_err(|e| e.to_string())
}

fn note() -> OperatorNote {
    OperatorNote::new("conformance", "the model misread the amount")
}

/// A run in `Start` with `state`, of a fresh agent whose graph is [`graph`].
async fn edit_run(store: &Arc<dyn Store>, prefix: &str, state: Value) -> Result<RunRecord, String> {
    let agent = unique(prefix);
    let g = graph(&agent)?;
    store.register_agent(&g).await.ctx("register_agent")?;
    store
        .create_run(NewRun::new(
            unique(prefix),
            &agent,
            g.fingerprint(),
            "Start",
            state,
        ))
        .await
        .ctx("create_run")
}

/// What the checks' edits are checked and sealed with: their states hold no secret.
struct NoSecrets {
    redactor: Redactor,
    keys: SealKeys,
}

impl NoSecrets {
    fn new() -> Self {
        Self {
            redactor: Redactor::default(),
            keys: SealKeys::default(),
        }
    }

    fn check(&self) -> EditCheck<'_> {
        EditCheck {
            read_state: None,
            redactor: &self.redactor,
            keys: &self.keys,
        }
    }
}

fn whole(state: Value) -> Edit {
    Edit {
        state: StateEdit::Whole(state),
        state_name: None,
        override_graph: false,
        note: note(),
    }
}

/// A failed run's state edited: one `edited` transition after the last version, carrying
/// the note, that the hash chain verifies; the run running again at the new state, its
/// error cleared, with a new epoch; a later step commits on top. A patch applies to the
/// current state. Refused, with nothing written: a running run, a state the graph does
/// not have, a variant the graph does not allow from the current state (allowed with an
/// override, which the note records), a patch that does not apply, and a plan the run
/// moved past.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_edit_is_one_audited_transition(store: Arc<dyn Store>) -> CheckResult {
    let start = json!({ "Start": { "amount": 1000 } });
    let run = edit_run(&store, "edit", start.clone()).await?;
    let secrets = NoSecrets::new();
    let check = secrets.check();
    let corrected = json!({ "Start": { "amount": 10 } });
    match edit(store.as_ref(), &run.id, whole(corrected.clone()), check).await {
        Err(EditError::NotStopped { .. }) => {}
        other => return Err(format!("an edit of a running run gave {other:?}")),
    }
    let lease = claim(&store, &run.id, "w").await?;
    let failure = RunFailure {
        code: FailureCode::Handler,
        message: "the amount is too large".into(),
    };
    store
        .commit_step(
            &lease,
            &StepCommit {
                status: RunStatus::Failed,
                kind: TransitionKind::Status,
                error: Some(failure),
                ..super::step(0, start.clone())
            },
            &[],
        )
        .await
        .ctx("commit_step (failed)")?;
    for (what, bad) in [
        ("a state the graph does not have", json!({ "Nowhere": {} })),
        (
            "a variant without an edge from `Start`",
            json!({ "Done": {} }),
        ),
    ] {
        match edit(store.as_ref(), &run.id, whole(bad), check).await {
            Err(EditError::Invalid { .. } | EditError::NotAnEdge { .. }) => {}
            other => return Err(format!("an edit to {what} gave {other:?}")),
        }
    }
    let patched = Edit {
        state: StateEdit::patch(json!([{ "op": "remove", "path": "/Start/missing" }]))
            .map_err(|e| e.to_string())?,
        ..whole(Value::Null)
    };
    match edit(store.as_ref(), &run.id, patched, check).await {
        Err(EditError::Invalid { .. }) => {}
        other => return Err(format!("a patch that does not apply gave {other:?}")),
    }
    ensure!(
        stored(&store, &run.id).await?.version == 1,
        "a refused edit wrote a version"
    );
    let plan = plan_edit(store.as_ref(), &run.id, whole(corrected.clone()), check)
        .await
        .map_err(|e| format!("plan_edit: {e}"))?;
    let stale = plan.clone();
    let edited = store.repair_run(&plan).await.ctx("repair_run (edit)")?;
    let write = ("edit", TransitionKind::Edited, &note());
    check_operator_write(&store, &edited, write, 2, &corrected, lease.epoch).await?;
    let stored_name = stored(&store, &run.id).await?.state_name;
    ensure!(
        edited.state_name == "Start" && stored_name == "Start",
        "the edited run is in `{}`, stored in `{stored_name}` (want `Start`)",
        edited.state_name
    );
    ensure!(
        matches!(
            store.repair_run(&stale).await,
            Err(StoreError::Conflict { .. })
        ),
        "a stale edit plan was not refused with Conflict"
    );
    // The edited run goes on; it fails again and is edited to a variant the graph does not
    // allow from `Start`, with an override the note records, then by a patch.
    let lease = claim(&store, &run.id, "w2").await?;
    store
        .commit_step(
            &lease,
            &StepCommit {
                status: RunStatus::Failed,
                kind: TransitionKind::Status,
                error: Some(RunFailure {
                    code: FailureCode::Handler,
                    message: "again".into(),
                }),
                ..super::step(2, corrected.clone())
            },
            &[],
        )
        .await
        .ctx("commit_step after the edit")?;
    let over = Edit {
        override_graph: true,
        ..whole(json!({ "Done": {} }))
    };
    let r = edit(store.as_ref(), &run.id, over, check)
        .await
        .map_err(|e| format!("an edit overriding the graph: {e}"))?;
    let last = store.history(&run.id).await.ctx("history")?;
    let last = last.last().ok_or("no history")?;
    ensure!(
        r.state_name == "Done"
            && last
                .note
                .as_ref()
                .is_some_and(|n| n.reason.contains("graph overridden")),
        "an edit overriding the graph: state {} note {:?} (want Done, the override noted)",
        r.state_name,
        last.note
    );
    verify_chain(&store, &run.id).await
}

/// A patch edits the current state in place, and a quarantined run is edited too.
///
/// # Errors
/// What the store did wrong, when it breaks the guarantee.
pub async fn check_edit_by_patch(store: Arc<dyn Store>) -> CheckResult {
    let run = edit_run(
        &store,
        "patch",
        json!({ "Start": { "amount": 1000, "currency": "EUR" } }),
    )
    .await?;
    let lease = claim(&store, &run.id, "w").await?;
    let error = RunFailure {
        code: FailureCode::StateCorrupt,
        message: "conformance".into(),
    };
    store.quarantine(&lease, error).await.ctx("quarantine")?;
    let patch =
        StateEdit::patch(json!([{ "op": "replace", "path": "/Start/amount", "value": 10 }]))
            .map_err(|e| e.to_string())?;
    let secrets = NoSecrets::new();
    let check = secrets.check();
    let r = edit(
        store.as_ref(),
        &run.id,
        Edit {
            state: patch,
            state_name: None,
            override_graph: false,
            note: note(),
        },
        check,
    )
    .await
    .map_err(|e| format!("an edit by patch of a quarantined run: {e}"))?;
    let want = json!({ "Start": { "amount": 10, "currency": "EUR" } });
    ensure!(
        r.status == RunStatus::Running
            && r.state == want
            && stored(&store, &run.id).await?.state == want,
        "after the patch: {} {} (want running, {want})",
        r.status,
        r.state
    );
    verify_chain(&store, &run.id).await
}
