// Unit, tuple and struct variants; keyword-named states; each state's struct has the variant's shape, `Debug` and `Clone`.
use durable_agents::{Agent, Ctx, StepResult};
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Shapes {
    #[agent(initial, to(Pair, Named))]
    Unit,
    #[agent(to(Named, Type))]
    Pair(u32, String),
    #[agent(to(Type))]
    Named { count: u64, label: String },
    #[agent(to(Done))]
    Type,
    #[agent(terminal)]
    Done,
}

struct H;

impl ShapesHandlers for H {
    async fn unit(&self, ctx: Ctx<'_, shapes::Unit>, _: shapes::Unit) -> StepResult<shapes::Unit> {
        Ok(ctx.to(shapes::Pair(1, "one".into())))
    }
    async fn pair(&self, ctx: Ctx<'_, shapes::Pair>, shapes::Pair(f0, f1): shapes::Pair) -> StepResult<shapes::Pair> {
        Ok(ctx.to(shapes::Named { count: u64::from(f0), label: f1 }))
    }
    async fn named(&self, ctx: Ctx<'_, shapes::Named>, shapes::Named { count, label }: shapes::Named) -> StepResult<shapes::Named> {
        let _ = (count, label);
        Ok(ctx.to(shapes::Type))
    }
    async fn r#type(&self, ctx: Ctx<'_, shapes::Type>, _: shapes::Type) -> StepResult<shapes::Type> {
        Ok(ctx.to(shapes::Done))
    }
}

fn assert_handles<A: durable_agents::agent::Handle<H>>() {}

fn main() {
    assert_handles::<Shapes>();
    let g = Shapes::graph();
    let data: Vec<&str> = g.states.iter().map(|s| s.data.as_str()).collect();
    assert_eq!(data, ["", "(u32, String)", "{ count : u64, label : String }", "", ""]);
    assert_eq!(Shapes::Pair(1, "x".into()).state_name(), "Pair");
    assert_eq!(Shapes::Named { count: 1, label: String::new() }.state_name(), "Named");
    assert_eq!(format!("{:?}", shapes::Pair(2, "b".into())), "Pair(2, \"b\")");
    let named = shapes::Named { count: 3, label: "c".into() };
    assert_eq!(format!("{:?}", named.clone()), "Named { count: 3, label: \"c\" }");
    assert_eq!(format!("{:?}", shapes::Done), "Done");
}
