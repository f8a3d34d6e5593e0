//! A run's spend and budget: the budget given at creation, the spend written by each
//! commit that carries one and kept by the others, and an operator's new budget.

use std::sync::Arc;

use serde_json::json;

use super::{CheckResult, Ctx, claim, new_run, step, stored, unique};
use agent_core::store::{Budget, DAY_MS, RunFilter, Spend, Store, StoreError};

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

/// `spend_by_day` sums the spend of the runs a filter selects per agent and UTC day of
/// creation, counting runs that spent nothing, and agrees with the runs' own spends; a
/// filter that selects none gives no row.
///
/// # Errors
/// What went wrong.
pub async fn check_spend_is_summed_per_agent_and_day(store: Arc<dyn Store>) -> CheckResult {
    // Agents of this check alone: the store may hold other checks' runs.
    let agents = [unique("Spends"), unique("Saves")];
    let spends = [
        Spend {
            input_tokens: 100,
            output_tokens: 20,
            cost_micros: 3_000,
            asks: 1,
            tool_calls: 0,
        },
        Spend {
            input_tokens: 7,
            output_tokens: 5,
            cost_micros: 11,
            asks: 2,
            tool_calls: 4,
        },
    ];
    let mut expected = Spend::default();
    for spent in spends {
        let run = new_run(&unique("spend-day"), &agents[0], json!({ "n": 0 }));
        store.create_run(run.clone()).await.ctx("create_run")?;
        let lease = claim(&store, &run.id, "w").await?;
        let mut first = step(0, json!({ "n": 1 }));
        first.spend = Some(spent);
        (store.commit_step(&lease, &first, &[]))
            .await
            .ctx("commit_step with a spend")?;
        expected = expected.plus(spent);
    }
    // A run that spent nothing counts as a run.
    let idle = new_run(&unique("spend-day"), &agents[0], json!({ "n": 0 }));
    store.create_run(idle).await.ctx("create_run")?;
    let other = new_run(&unique("spend-day"), &agents[1], json!({ "n": 0 }));
    store.create_run(other).await.ctx("create_run")?;

    let filter = |agent: &str| RunFilter {
        agent: Some(agent.to_owned()),
        ..RunFilter::default()
    };
    let days = (store.spend_by_day(&filter(&agents[0])))
        .await
        .ctx("spend_by_day")?;
    let runs = store
        .list_runs(&filter(&agents[0]))
        .await
        .ctx("list_runs")?;
    let mut by_day = std::collections::BTreeMap::<i64, u64>::new();
    for run in &runs {
        *by_day
            .entry(run.created_at.div_euclid(DAY_MS) * DAY_MS)
            .or_default() += 1;
    }
    // Runs created around midnight UTC may fall on two days: compare day by day.
    ensure!(
        days.iter().map(|d| (d.day, d.runs)).collect::<Vec<_>>()
            == by_day.into_iter().collect::<Vec<_>>(),
        "spend_by_day gave days {days:?} for runs created at {:?}",
        runs.iter().map(|r| r.created_at).collect::<Vec<_>>()
    );
    let total = days
        .iter()
        .fold(Spend::default(), |sum, d| sum.plus(d.spend));
    ensure!(
        total == expected && days.iter().all(|d| d.agent == agents[0]),
        "spend_by_day summed {total:?} over {days:?}, expected {expected:?} for `{}`",
        agents[0]
    );
    let saved = (store.spend_by_day(&filter(&agents[1])))
        .await
        .ctx("spend_by_day")?;
    ensure!(
        saved.len() == 1 && saved[0].runs == 1 && saved[0].spend.is_zero(),
        "a run that spent nothing: {saved:?}"
    );
    let none = (store.spend_by_day(&filter(&unique("Nobody"))))
        .await
        .ctx("spend_by_day")?;
    ensure!(none.is_empty(), "no run selected, yet {none:?}");
    Ok(())
}
