// An agent with a `route = llm` state cannot get a runner without a router: `Runner::new`
// does not compile for it, and the message names the agent and the constructor to use.
use std::sync::Arc;

use durable_agents::prelude::*;

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Triage {
    #[agent(initial, route = llm, to(Refund, Reply))]
    Read,
    #[agent(terminal)]
    Refund,
    #[agent(terminal)]
    Reply,
}

struct Desk;

impl TriageHandlers for Desk {
    async fn read(&self, ctx: Ctx<'_, triage::Read>, route: triage::ReadRoute, _: triage::Read) -> StepResult<triage::Read> {
        Ok(match route {
            triage::ReadRoute::Refund => ctx.to(triage::Refund),
            triage::ReadRoute::Reply => ctx.to(triage::Reply),
        })
    }
}

fn main() {
    let store = Arc::new(MemoryStore::new());
    let _ = Runner::new(store, Desk, TriageTools {});
}
