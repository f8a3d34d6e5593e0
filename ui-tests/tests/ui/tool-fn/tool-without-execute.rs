// A declared tool that cannot run (a struct tool without `Execute`) is refused where the
// runner is built, naming the tool; the agent itself compiles.
use std::sync::Arc;

use durable_agents::prelude::*;

/// Search (no `Execute` impl).
#[derive(Tool)]
#[tool(kind = read, input = String, output = Vec<String>)]
struct SearchProducts;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(SearchProducts)))]
enum Checkout {
    #[agent(initial, tools(SearchProducts), to(Done))]
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
