//! Checks of the [`Store`] contract itself, one `pub async fn` per guarantee, in a module
//! per group.
//!
//! Each returns `Err` with a description of the violation; none panics on a misbehaving
//! store (a panic inside the store itself still fails the test).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use agent_core::store::verify::verify_run;
use agent_core::store::{
    CallStatus, Claimed, EntryKind, JournalEntry, Lease, NewRun, RunRecord, RunStatus, StepCommit,
    Store, StoreError, TransitionKind, input_hash, now_ms,
};
use agent_core::tool::ToolKind;

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

const LONG: Duration = Duration::from_mins(1);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn new_run(id: &str, agent: &str, state: Value) -> NewRun {
    NewRun::new(id, agent, "fp-1", "Start", state)
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
        spend: None,
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
        idempotency_key: Some(agent_core::store::idempotency_key(run_id, version, seq)),
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
        .map(|Claimed { lease: l, .. }| l)
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
            .commit_step(lease, &step(v, state.clone()), &[])
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

/// The run's hash chain verifies with the same verifier `agentctl verify` uses.
async fn verify_chain(store: &Arc<dyn Store>, run_id: &str) -> CheckResult {
    let run = stored(store, run_id).await?;
    let report = verify_run(store.as_ref(), &run).await.ctx("verify")?;
    ensure!(
        report.ok,
        "hash chain of `{run_id}` does not verify: {:?}",
        report.problem
    );
    Ok(())
}

/// What an operator's write of a stopped run (a repair, an edit: `OperatorStore::repair_run`)
/// leaves: the returned and the stored record running at `version` with `state`, error and
/// lease cleared, at an epoch above `epoch`; the last transition that version, of `kind`,
/// with `note`; the chain verified. `what` names the write in the messages.
async fn check_operator_write(
    store: &Arc<dyn Store>,
    returned: &RunRecord,
    write: (&str, TransitionKind, &agent_core::store::OperatorNote),
    version: u64,
    state: &Value,
    epoch: u64,
) -> CheckResult {
    let (what, kind, note) = write;
    let after = stored(store, &returned.id).await?;
    for (which, r) in [("returned", returned), ("stored", &after)] {
        ensure!(
            r.status == RunStatus::Running
                && r.version == version
                && r.state == *state
                && r.error.is_none()
                && r.lease_owner.is_none()
                && r.epoch > epoch,
            "the {which} record after the {what}: {} at version {} (want running at {version}), \
             state {} (want {state}), error {:?}, lease {:?}, epoch {} (want above {epoch})",
            r.status,
            r.version,
            r.state,
            r.error,
            r.lease_owner,
            r.epoch,
        );
    }
    let history = store.history(&returned.id).await.ctx("history")?;
    let last = history
        .last()
        .ok_or_else(|| format!("no history after the {what}"))?;
    ensure!(
        last.version == version && last.kind == kind && last.note.as_ref() == Some(note),
        "the {what}'s transition: version {} kind {} note {:?} (want {version} {}, by whom and \
         why)",
        last.version,
        last.kind.as_str(),
        last.note,
        kind.as_str()
    );
    verify_chain(store, &returned.id).await
}

mod children;
mod commits;
mod edit;
mod events;
mod history;
mod journal;
mod labels;
mod leases;
mod limits;
mod migrate;
mod operator;
mod repair;
mod retention;
mod runs;
mod spend;

pub use children::{
    check_cancel_reaches_children, check_child_creation_is_idempotent,
    check_claim_next_waits_for_all_children, check_claim_next_wakes_on_first_child,
    check_list_runs_by_parent, check_prune_keeps_child_entries,
};
pub use commits::{
    check_commits_across_a_reclaim, check_final_commit_ends_the_lease, check_quarantine_is_fenced,
    check_stale_epoch_is_fenced, check_version_chain_single_winner,
};
pub use edit::{check_edit_by_patch, check_edit_is_one_audited_transition};
pub use events::{
    check_events_by_agent_and_of_all, check_events_follow_the_records,
    check_events_of_parallel_calls_are_not_lost, check_events_resume_from_any_cursor,
    check_followers_are_woken, check_hub_followers_share_reads, check_status_changes_are_events,
};
pub use history::{
    check_history_and_journal_pages, check_history_time_travel_and_fork,
    check_prune_keeps_resume_working, check_storage_grows_linearly,
};
pub use journal::{
    check_commit_carries_entries, check_journal_is_durable_and_ordered,
    check_keyed_signals_stored_once, check_signals_kept_and_consumed_once, check_tool_registry,
    check_tool_stats_match_the_journal,
};
pub use labels::check_labels_filter_runs;
pub use leases::{
    check_claim_next_selects_runnable_runs, check_claim_next_takes_the_oldest_first,
    check_claim_reads_match_the_reads, check_concurrent_claim_next_is_disjoint,
    check_create_run_claimed_holds_the_run, check_expire_leases_of_frees_one_workers_runs,
    check_hand_back_does_not_count_the_claim,
    check_live_lease_blocks_and_expired_lease_is_reclaimed,
    check_next_due_is_no_later_than_a_live_lease, check_wait_for_work_returns,
};
pub use limits::{
    check_defer_run_hands_back_until_its_turn, check_rate_limits_are_shared_and_exact,
};
pub use migrate::{
    check_claim_next_filters_by_version, check_migration_is_a_fenced_transition_once,
    check_migration_refuses_compensating_runs,
};
pub use operator::{
    check_cancel_moves_free_runs_to_compensating,
    check_cancel_of_a_leased_run_waits_for_its_holder, check_cancel_racing_a_commit,
    check_drop_signal_is_audited, check_terminate_closes_out_stopped_runs,
    check_terminate_stops_runs_at_once,
};
pub use repair::check_repair_resets_a_quarantined_run;
pub use retention::{check_retention_deletes_old_final_runs, check_retention_keeps_the_window};
pub use runs::{
    check_agent_graphs, check_corrupt_data_is_an_error, check_create_run_is_idempotent,
    check_list_runs, check_list_runs_keyset, check_set_status, check_store_and_load_runs,
};
pub use spend::{check_spend_and_budget_are_stored, check_spend_is_summed_per_agent_and_day};
