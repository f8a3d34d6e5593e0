//! The saga: compensations of completed hybrid calls, in reverse order, each journaled.
//!
//! A compensation round runs at the version whose status is `compensating`. Its saga is
//! every hybrid call that succeeded after the previous round (so nothing is compensated
//! twice), compensated last-first. Compensation `i` of the round is journal entry
//! `(version, i)` with the idempotency key of that slot: after a crash the round resumes
//! at the first compensation not journaled as succeeded, with the same key. A call whose
//! outcome is unknown (started, never answered) is not in the saga: only effects known to
//! have applied are undone. A compensation that still fails after its retry policy
//! dead-letters the run (`compensation.failed`): never a silent failure.

use std::collections::BTreeMap;

use tracing::Instrument;

use super::cx::{StepCx, with_heartbeat};
use super::{Inner, RunnerError, StepOutcome};
use crate::graph::StateDescription;
use crate::store::FailureCode;
use crate::store::{
    CallStatus, EntryKind, JournalEntry, Lease, RunFailure, RunRecord, RunStatus, Store, StoreError,
};
use crate::tool::ToolKind;

/// The hybrid calls a round at `version` must compensate, in call order.
fn saga_of(journal: &[JournalEntry], version: u64) -> Vec<&JournalEntry> {
    let previous_round = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation && e.version < version)
        .map(|e| e.version)
        .max();
    journal
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Tool
                && e.tool_kind == Some(ToolKind::Hybrid)
                && e.status == CallStatus::Succeeded
                && e.version < version
                && previous_round.is_none_or(|p| e.version > p)
        })
        .collect()
}

/// Whether a run failing now has anything to compensate.
pub(crate) async fn has_completed_hybrids(
    store: &dyn Store,
    run_id: &str,
) -> Result<bool, StoreError> {
    let journal = store.journal(run_id, None).await?;
    Ok(!saga_of(&journal, u64::MAX).is_empty())
}

/// Run (or resume) the compensation round of a compensating run.
pub(super) async fn compensate(
    inner: &Inner,
    lease: &mut Lease,
    record: RunRecord,
    desc: &StateDescription,
) -> Result<StepOutcome, RunnerError> {
    let why = match &record.error {
        Some(e) if e.code == FailureCode::Cancelled => "its parent was cancelled".to_owned(),
        Some(e) => format!("its parent failed: {}", e.message),
        None => "its parent is compensating".to_owned(),
    };
    super::children::cancel_children(inner.store.as_ref(), inner.graph, &record, &why).await?;
    let journal = inner.store.journal(&record.id, None).await?;
    let done: BTreeMap<u32, JournalEntry> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation && e.version == record.version)
        .map(|e| (e.seq, e.clone()))
        .collect();
    let saga: Vec<JournalEntry> = saga_of(&journal, record.version)
        .into_iter()
        .cloned()
        .collect();
    // Compensations are never served from the read cache: it stays unloaded.
    let read_cache = super::caches::unloaded_read_cache();
    let cx = StepCx::new(inner, &record, desc, lease.clone(), done, None, &read_cache);
    for (i, original) in saga.iter().rev().enumerate() {
        let seq = u32::try_from(i).unwrap_or(u32::MAX);
        if cx
            .journaled(seq)
            .is_some_and(|e| e.status == CallStatus::Succeeded)
        {
            continue;
        }
        let span = tracing::info_span!(
            "compensation",
            otel.name = %format_args!("execute_tool {}", original.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %original.name,
            gen_ai.tool.type = "function",
            run_id = %record.id,
            compensates = seq,
        );
        let result = async {
            let tool = inner
                .tools
                .get(&original.name)
                .ok_or_else(|| format!("hybrid tool `{}` is not in the tool box", original.name))?;
            // Computed from the call as it ran: its sealed parts opened.
            let mut original = original.clone();
            cx.open_entry(&mut original).map_err(|e| e.to_string())?;
            let output = original.output.clone().unwrap_or_default();
            let (comp_name, comp_input) = tool
                .compensation(
                    super::imported::journaled_arguments(tool.as_ref(), &original.input),
                    &output,
                )
                .ok_or_else(|| format!("tool `{}` declares no compensation", original.name))??;
            let comp = inner
                .tools
                .get(&comp_name)
                .ok_or_else(|| format!("compensating tool `{comp_name}` is not in the tool box"))?;
            cx.call_at(seq, EntryKind::Compensation, comp.as_ref(), comp_input)
                .await
                .map_err(|e| e.to_string())
        }
        .instrument(span);
        let result = with_heartbeat(&cx, result)
            .await
            .unwrap_or_else(|| Err("the lease was lost".to_owned()));
        *lease = cx.lease();
        if let Some(fatal) = cx.take_fatal() {
            return Err(fatal);
        }
        if let Err(message) = result {
            let error = RunFailure {
                code: FailureCode::CompensationFailed,
                message: format!("compensating `{}` failed: {message}", original.name),
            };
            let record = inner
                .commit_status(lease, &record, RunStatus::DeadLettered, Some(error))
                .await?;
            return Ok(StepOutcome::after_commit(record));
        }
    }
    let cancelled = record
        .error
        .as_ref()
        .is_some_and(|e| e.code == FailureCode::Cancelled);
    let status = if cancelled {
        RunStatus::Cancelled
    } else if desc.terminal || record.error.is_some() {
        RunStatus::Compensated
    } else {
        RunStatus::Running
    };
    let error = record.error.clone();
    let record = inner.commit_status(lease, &record, status, error).await?;
    Ok(StepOutcome::after_commit(record))
}
