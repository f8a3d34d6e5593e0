//! What a step spent, from its journal, and the budgets checked before each ask and call.
//!
//! A step's spend is read from its journal entries, replayed ones included: the step adds it
//! to the run's spend with the commit that ends it, so each ask and call counts once however
//! often the step was taken up again. A step that waits for its children commits without it:
//! it resumes at the same version and counts its entries then.

use crate::agent::StepError;
use crate::router::DecisionRecord;
use crate::store::{EntryKind, JournalEntry, Spend, Spending, cost_micros};
use crate::tool::ToolBox;

use super::cx::StepCx;

/// What one journal entry spent: a decision's asks (every attempt was sent), tokens and
/// cost; a tool call executed (not served from the cache), with what its tool reports of
/// its output. Compensations are not counted: they must run whatever the budget.
pub(crate) fn of_entry(entry: &JournalEntry, tools: &ToolBox) -> Spend {
    match entry.kind {
        EntryKind::Decision => {
            let mut spend = Spend {
                asks: u64::from(entry.attempts.max(1)),
                ..Spend::default()
            };
            let record = (entry.output.as_ref())
                .and_then(|o| serde_json::from_value::<DecisionRecord>(o.clone()).ok());
            if let Some(record) = record {
                spend.input_tokens = record.input_tokens.unwrap_or(0);
                spend.output_tokens = record.output_tokens.unwrap_or(0);
                spend.cost_micros = record.cost.map_or(0, |c| cost_micros(c.amount));
            }
            spend
        }
        EntryKind::Tool if entry.attempts > 0 => {
            let reported = match (&entry.output, tools.get(&entry.name)) {
                (Some(output), Some(tool)) => tool.spend(output),
                _ => Spend::default(),
            };
            reported.plus(Spend {
                tool_calls: 1,
                ..Spend::default()
            })
        }
        // A child run spends under its own budget.
        EntryKind::Tool | EntryKind::Compensation | EntryKind::Child => Spend::default(),
    }
}

/// What a run's journal says it spent, `entries` being all of it (every version), with the
/// tools it ran under: equal to the spend its commits stored
/// ([`RunRecord::spend`](crate::store::RunRecord::spend)) until retention prunes entries,
/// and what the conformance suite checks after crashes at every fault point.
#[must_use]
pub fn journal_spend(entries: &[JournalEntry], tools: &ToolBox) -> Spend {
    (entries.iter()).fold(Spend::default(), |sum, e| sum.plus(of_entry(e, tools)))
}

/// What a commit writes of the run's spend: nothing while it is nothing, so that a run that
/// never asks nor calls binds no JSON.
pub(super) fn to_commit(spend: Spend) -> Option<Spend> {
    (!spend.is_zero()).then_some(spend)
}

impl StepCx<'_> {
    /// What this step spent so far: its journal's entries, replayed and new.
    pub(crate) fn spent(&self) -> Spend {
        self.journal_entries(|entries| journal_spend(entries, &self.inner.tools))
    }

    /// Refuse `next` when the run's budget or the state's budget per visit is spent: the
    /// step fails with a budget error, which the handler cannot swallow, and the run takes
    /// the state's `on_budget` edge.
    pub(crate) fn check_budget(&self, next: Spending) -> Result<(), StepError> {
        let run = self.run.budget.as_ref();
        let state = self.state.budget.as_ref();
        if run.is_none() && state.is_none() {
            return Ok(());
        }
        let step = self.spent();
        let why = run
            .and_then(|b| b.refuses(&self.run.spend.plus(step), next, "the run's budget"))
            .or_else(|| {
                let what = format!("state `{}`'s budget per visit", self.state.name);
                state.and_then(|b| b.refuses(&step, next, &what))
            });
        match why {
            Some(why) => {
                let e = StepError::Budget(why);
                self.set_step_error(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }
}
