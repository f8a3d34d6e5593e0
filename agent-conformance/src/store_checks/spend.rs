//! A run's spend and budget: the budget given at creation, the spend written by each
//! commit that carries one and kept by the others, and an operator's new budget.

use std::sync::Arc;

use serde_json::json;

use super::{CheckResult, Ctx, claim, new_run, step, stored, unique};
use agent_core::store::{Budget, Spend, Store, StoreError};

/// A run created with a budget is stored and read back with it, and with nothing spent; a
/// commit carrying a spend stores it as the run's, in the same write (the record it returns
/// and the one read back agree), a commit without one keeps it; `set_budget` replaces the
/// budget (or removes it) and keeps the spend, whatever holds the run; a run that does not
/// exist is `NotFound`.
///
/// # Errors
/// What went wrong.
pub async fn check_spend_and_budget_are_stored(store: Arc<dyn Store>) -> CheckResult {
    let budget = Budget {
        tokens: Some(1_000),
        cost_micros: Some(250_000),
        ..Budget::UNLIMITED
    };
    let run = new_run(&unique("spend"), "Spender", json!({ "n": 0 })).with_budget(Some(budget));
    let created = store.create_run(run.clone()).await.ctx("create_run")?;
    ensure!(
        created.budget == Some(budget) && created.spend == Spend::default(),
        "create_run returned budget {:?} and spend {:?}",
        created.budget,
        created.spend
    );
    ensure!(
        stored(&store, &run.id).await?.budget == Some(budget),
        "load_run lost the budget"
    );
    let lease = claim(&store, &run.id, "w").await?;
    let spent = Spend {
        input_tokens: 120,
        output_tokens: 30,
        cost_micros: 4_500,
        asks: 1,
        tool_calls: 2,
    };
    let mut first = step(0, json!({ "n": 1 }));
    first.spend = Some(spent);
    let committed = store
        .commit_step(&lease, &first, &[])
        .await
        .ctx("commit_step with a spend")?;
    ensure!(
        committed.spend == spent,
        "commit_step returned spend {:?}, expected {spent:?}",
        committed.spend
    );
    ensure!(
        stored(&store, &run.id).await?.spend == spent,
        "load_run after the commit does not read the spend it wrote"
    );
    let kept = store
        .commit_step(&lease, &step(1, json!({ "n": 2 })), &[])
        .await
        .ctx("commit_step without a spend")?;
    ensure!(
        kept.spend == spent && stored(&store, &run.id).await?.spend == spent,
        "a commit without a spend must keep the stored one: {:?}",
        kept.spend
    );
    // Held by a live lease: an operator's budget is a setting, not a write of the run's.
    let raised = Budget {
        tokens: Some(5_000),
        ..budget
    };
    let set = (store.set_budget(&run.id, Some(raised)))
        .await
        .ctx("set_budget")?;
    ensure!(
        set.budget == Some(raised) && set.spend == spent,
        "set_budget returned budget {:?} and spend {:?}",
        set.budget,
        set.spend
    );
    let after = stored(&store, &run.id).await?;
    ensure!(
        after.budget == Some(raised) && after.version == 2,
        "set_budget must store the budget and write no version: {after:?}"
    );
    let removed = store
        .set_budget(&run.id, None)
        .await
        .ctx("set_budget None")?;
    ensure!(
        removed.budget.is_none(),
        "set_budget(None) kept {:?}",
        removed.budget
    );
    ensure!(
        stored(&store, &run.id).await?.budget.is_none(),
        "load_run after set_budget(None) still reads a budget"
    );
    match store.set_budget(&unique("missing"), Some(budget)).await {
        Err(StoreError::NotFound(_)) => Ok(()),
        other => Err(format!("set_budget of a missing run gave {other:?}")),
    }
}
