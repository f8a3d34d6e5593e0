//! `agentctl budget RUN`: an operator sets (raises) or removes a run's budget.

use std::process::ExitCode;

use agent_core::store::{Budget, cost_micros};

use super::Ctx;
use crate::cli::BudgetArgs;
use crate::error::{CliError, Result};
use crate::output::outln;

pub(super) async fn run(cx: &Ctx, args: &BudgetArgs) -> Result<ExitCode> {
    let budget = if args.none {
        None
    } else {
        let cost = match args.cost {
            Some(amount) if !amount.is_finite() || amount <= 0.0 => {
                return Err(CliError::usage(format!(
                    "--cost {amount}: a cost limit must be a positive amount"
                )));
            }
            other => other.map(cost_micros),
        };
        let budget = Budget {
            tokens: args.tokens,
            cost_micros: cost,
            asks: args.asks,
            tool_calls: args.tool_calls,
        };
        budget
            .validate()
            .map_err(|e| CliError::usage(e.to_string()))?;
        Some(budget)
    };
    let before = cx.run(&args.run).await?;
    let after = cx.store.set_budget(&args.run, budget).await?;
    if cx.out.json {
        cx.out.print_json(&serde_json::json!({
            "run": after.id,
            "budget": after.budget,
            "previous_budget": before.budget,
            "spend": after.spend,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let shown = |b: Option<&Budget>| b.map_or_else(|| "none".to_owned(), ToString::to_string);
    outln!(
        "run {}: budget {} (was {}); spent so far: {}",
        after.id,
        shown(after.budget.as_ref()),
        shown(before.budget.as_ref()),
        after.spend
    );
    if after.status.is_final() && !after.status.has_ended() {
        cx.out.note(&format!(
            "the run is {}: `agentctl retry {}` runs its failed step again under the new budget",
            after.status, after.id
        ));
    }
    Ok(ExitCode::SUCCESS)
}
