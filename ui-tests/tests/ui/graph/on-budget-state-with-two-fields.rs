// The on_budget target is built from the failure alone: it holds one field at most.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Checkout {
    #[agent(initial, to(Done), on_budget = OverBudget, budget(asks = 3))]
    Browsing,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    OverBudget { reason: String, spent: u64 },
}

fn main() {}
