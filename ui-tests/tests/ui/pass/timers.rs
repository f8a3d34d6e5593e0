// Every form of a durable timer: a fixed delay, a time or delay the handler computes (each
// field type a timer takes, an `Option` of one), and a timer beside a signal.
use std::time::{Duration, SystemTime};

use durable_agents::timer::Deadline;
use durable_agents::{Agent, Ctx, StepResult, Wake};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
pub enum FollowUp {
    #[agent(initial, timer_ms = 259_200_000, to(AtTime))]
    Sleeping,
    #[agent(timer = at, to(After))]
    AtTime { at: SystemTime },
    #[agent(timer = delay, to(Until))]
    After { delay: Duration },
    #[agent(timer = r#type, route = llm, to(Asking, Done))]
    Until { r#type: Deadline },
    #[agent(wait = "reply", timer = until, to(Done))]
    Asking { until: Option<Deadline> },
    #[agent(terminal)]
    Done,
}

struct H;

impl FollowUpHandlers for H {
    async fn sleeping(&self, ctx: Ctx<'_, follow_up::Sleeping>, _: follow_up::Sleeping) -> StepResult<follow_up::Sleeping> {
        Ok(ctx.to(follow_up::AtTime { at: SystemTime::now() + Duration::from_secs(60) }))
    }
    async fn at_time(&self, ctx: Ctx<'_, follow_up::AtTime>, _: follow_up::AtTime) -> StepResult<follow_up::AtTime> {
        Ok(ctx.to(follow_up::After { delay: Duration::from_secs(60) }))
    }
    async fn after(&self, ctx: Ctx<'_, follow_up::After>, _: follow_up::After) -> StepResult<follow_up::After> {
        Ok(ctx.to(follow_up::Until { r#type: Deadline::after(Duration::from_secs(60)) }))
    }
    async fn until(&self, ctx: Ctx<'_, follow_up::Until>, route: follow_up::UntilRoute, _: follow_up::Until) -> StepResult<follow_up::Until> {
        match route {
            follow_up::UntilRoute::Asking => Ok(ctx.to(follow_up::Asking { until: None })),
            follow_up::UntilRoute::Done => Ok(ctx.to(follow_up::Done)),
        }
    }
    async fn asking(&self, ctx: Ctx<'_, follow_up::Asking>, wake: Wake, _: follow_up::Asking) -> StepResult<follow_up::Asking> {
        let _ = wake;
        Ok(ctx.to(follow_up::Done))
    }
}

fn main() {
    let graph = FollowUp::graph();
    let timers: Vec<String> = graph.states.iter().filter_map(|s| s.timer.as_ref().map(|t| t.label())).collect();
    assert_eq!(timers, ["timer 3 d", "timer at at", "timer at delay", "timer at type", "timer at until"]);
    let _ = H;
}
