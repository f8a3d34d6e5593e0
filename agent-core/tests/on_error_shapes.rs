//! A failed step enters its state's `on_error` target, built by the derive from the failure:
//! a unit variant, or one field (named or not) that is the `Failure`, its message (`String`),
//! or a type of the user's with `From<Failure>`. For `Failure`, `String` and a unit variant the
//! stored state is the same JSON as when the runner found the target by trying candidate
//! values (before issue 40). A type of the user's is stored as it serializes; the candidate
//! was the failure's JSON itself, with the fields the type ignores.

use std::sync::Arc;

use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RunStatus, Store, TransitionKind};
use durable_agents::{Agent, Ctx, Failure, Runner, StepError, StepResult, ToolBox};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A type of the user's, built from the failure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Why {
    code: String,
}

impl From<Failure> for Why {
    fn from(f: Failure) -> Self {
        Self {
            code: f.code.into(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Shapes {
    #[agent(initial, to(A, B, C, D, E, F))]
    Start { shape: u8 },
    #[agent(to(Done), on_error = Unit)]
    A,
    #[agent(to(Done), on_error = Message)]
    B,
    #[agent(to(Done), on_error = NamedMessage)]
    C,
    #[agent(to(Done), on_error = Whole)]
    D,
    #[agent(to(Done), on_error = NamedWhole)]
    E,
    #[agent(to(Done), on_error = Own)]
    F,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Unit,
    #[agent(terminal)]
    Message(String),
    #[agent(terminal)]
    NamedMessage { reason: String },
    #[agent(terminal)]
    Whole(Failure),
    #[agent(terminal)]
    NamedWhole { reason: Failure },
    #[agent(terminal)]
    Own { why: Why },
}

#[derive(Debug)]
pub struct Handlers;

fn boom<S: durable_agents::agent::State>() -> StepResult<S> {
    Err(StepError::handler("boom"))
}

impl ShapesHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, shapes::Start>,
        shapes::Start { shape }: shapes::Start,
    ) -> StepResult<shapes::Start> {
        Ok(match shape {
            0 => ctx.to(shapes::A),
            1 => ctx.to(shapes::B),
            2 => ctx.to(shapes::C),
            3 => ctx.to(shapes::D),
            4 => ctx.to(shapes::E),
            _ => ctx.to(shapes::F),
        })
    }
    async fn a(&self, _: Ctx<'_, shapes::A>, _: shapes::A) -> StepResult<shapes::A> {
        boom()
    }
    async fn b(&self, _: Ctx<'_, shapes::B>, _: shapes::B) -> StepResult<shapes::B> {
        boom()
    }
    async fn c(&self, _: Ctx<'_, shapes::C>, _: shapes::C) -> StepResult<shapes::C> {
        boom()
    }
    async fn d(&self, _: Ctx<'_, shapes::D>, _: shapes::D) -> StepResult<shapes::D> {
        boom()
    }
    async fn e(&self, _: Ctx<'_, shapes::E>, _: shapes::E) -> StepResult<shapes::E> {
        boom()
    }
    async fn f(&self, _: Ctx<'_, shapes::F>, _: shapes::F) -> StepResult<shapes::F> {
        boom()
    }
}

#[tokio::test]
async fn each_shape_of_on_error_state_is_entered_with_the_failure() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Shapes, _>::new(Arc::clone(&store), Handlers, ToolBox::new()).unwrap();
    let failure = |state: &str| json!({ "state": state, "code": "handler", "message": "handler failed: boom" });
    let cases: [(u8, &str, &str, Value); 6] = [
        (0, "A", "Unit", json!("Unit")),
        (
            1,
            "B",
            "Message",
            json!({ "Message": "handler failed: boom" }),
        ),
        (
            2,
            "C",
            "NamedMessage",
            json!({ "NamedMessage": { "reason": "handler failed: boom" } }),
        ),
        (3, "D", "Whole", json!({ "Whole": failure("D") })),
        (
            4,
            "E",
            "NamedWhole",
            json!({ "NamedWhole": { "reason": failure("E") } }),
        ),
        (
            5,
            "F",
            "Own",
            json!({ "Own": { "why": { "code": "handler" } } }),
        ),
    ];
    for (shape, from, to, stored) in cases {
        let id = format!("run-{shape}");
        let record = runner
            .start_and_run(&id, Shapes::Start { shape })
            .await
            .unwrap();
        assert_eq!(record.status, RunStatus::Completed, "{to}");
        assert_eq!(record.state_name, to);
        assert_eq!(record.state, stored, "the stored state of `{to}`");
        let error = record.error.expect("the failure is kept on the run");
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("handler", "handler failed: boom")
        );
        let history = store.history(&id).await.unwrap();
        let entered = history
            .iter()
            .find(|t| t.to_state == to)
            .expect("the on_error edge was taken");
        assert_eq!(
            (entered.from_state.as_str(), entered.kind),
            (from, TransitionKind::Error)
        );
    }
}
