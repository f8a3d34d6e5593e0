// `name`, `module`, `handlers`, `max_steps` and `dag` overrides; a user module named like the
// default generated module does not collide.
use durable_agents::{Agent, Ctx, StepResult, Wake};
use serde::{Deserialize, Serialize};

#[allow(dead_code)]
mod checkout {
    pub struct Mine;
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(name = "shop.checkout", module = states, handlers = Steps, max_steps = 50, dag)]
enum Checkout {
    #[agent(initial, route = llm, to(Approve, Done))]
    Browse,
    #[agent(wait = "approval", to(Done))]
    Approve,
    #[agent(terminal)]
    Done,
}

struct H;

impl Steps for H {
    async fn browse(&self, ctx: Ctx<'_, states::Browse>, route: states::BrowseRoute, _: states::Browse) -> StepResult<states::Browse> {
        Ok(match route {
            states::BrowseRoute::Approve => ctx.to(states::Approve),
            states::BrowseRoute::Done => ctx.to(states::Done),
        })
    }
    async fn approve(&self, ctx: Ctx<'_, states::Approve>, wake: Wake, _: states::Approve) -> StepResult<states::Approve> {
        let _ = wake;
        Ok(ctx.to(states::Done))
    }
}

fn main() {
    let g = Checkout::graph();
    assert_eq!(Checkout::NAME, "shop.checkout");
    assert_eq!(g.agent, "shop.checkout");
    assert_eq!(g.max_steps, Some(50));
    assert!(g.dag);
    assert_eq!(g.states[1].wait.as_ref().map(|w| w.signal.as_str()), Some("approval"));
    let _ = checkout::Mine;
}
