// An agent declared inside a function: field types and generated items resolve in its scope.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

fn main() {
    #[derive(Clone, Serialize, Deserialize)]
    struct Ticket {
        id: u32,
    }

    #[derive(Agent, Clone, Serialize, Deserialize)]
    enum Support {
        #[agent(initial, to(Closed))]
        Open { ticket: Ticket },
        #[agent(terminal)]
        Closed(Ticket),
    }

    struct Desk;

    impl SupportHandlers for Desk {
        async fn open(&self, ctx: Ctx<'_, support::Open>, support::Open { ticket }: support::Open) -> StepResult<support::Open> {
            Ok(ctx.to(support::Closed(ticket)))
        }
    }

    fn assert_handles<A: durable_agents::agent::Handle<Desk>>() {}
    assert_handles::<Support>();
    assert_eq!(Support::graph().states[0].data, "{ ticket : Ticket }");
    let _ = Support::Open { ticket: Ticket { id: 1 } }.state_name();
}
