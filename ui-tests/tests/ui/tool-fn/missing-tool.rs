// A runner cannot be built without every tool the agent declares: the agent's tools struct
// names the missing tool (its field) and the agent (the struct).
use std::sync::Arc;

use durable_agents::prelude::*;

/// Search.
#[tool_fn(read)]
async fn search_products(query: String) -> ToolResult<Vec<String>> {
    Ok(vec![query])
}

/// Pay.
#[tool_fn(write)]
async fn charge_payment(cents: u64) -> ToolResult<String> {
    Ok(cents.to_string())
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts), write(ChargePayment)))]
enum Checkout {
    #[agent(initial, tools(SearchProducts, ChargePayment), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, _: checkout::Browsing) -> StepResult<checkout::Browsing> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {
    let store = Arc::new(MemoryStore::new());
    let _ = Runner::new(store, Shop, CheckoutTools { search_products: SearchProducts });
}
