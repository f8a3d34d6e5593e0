// A state's field whose type lacks the serde derives is serde's own error: four, from serde's
// derives on the enum, at the field's type and at `Deserialize`; nothing from `Agent`'s
// generated impls or the handlers. The fix is the derives on the field's type.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug)]
pub struct Cart {
    pub items: Vec<String>,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Shop {
    #[agent(initial, to(Done))]
    Browse { cart: Cart },
    #[agent(terminal)]
    Done,
}

struct H;

impl ShopHandlers for H {
    async fn browse(&self, ctx: Ctx<'_, shop::Browse>, shop::Browse { cart }: shop::Browse) -> StepResult<shop::Browse> {
        let _ = cart.items.len();
        Ok(ctx.to(shop::Done))
    }
}

fn main() {
    let _ = H;
}
