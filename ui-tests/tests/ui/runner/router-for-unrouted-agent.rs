// A router given to an agent no state of which asks it would never be used: `.router(..)`
// does not compile for such an agent, and the message says to use `Runner::new`.
use std::sync::Arc;

use durable_agents::prelude::*;
use durable_agents::router::ScriptedRouter;

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Greeter {
    #[agent(initial, to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

struct Desk;

impl GreeterHandlers for Desk {
    async fn start(&self, ctx: Ctx<'_, greeter::Start>, _: greeter::Start) -> StepResult<greeter::Start> {
        Ok(ctx.to(greeter::Done))
    }
}

fn main() {
    let store = Arc::new(MemoryStore::new());
    let router = Arc::new(ScriptedRouter::new([]));
    let _ = Runner::builder(store, Desk, GreeterTools {}).router(router).build();
}
