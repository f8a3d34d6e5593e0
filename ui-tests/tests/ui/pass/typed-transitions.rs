// Typed transitions: `to(Target(args = Type))` hands the model's checked argument to the handler
// in the route enum; an enum inside a function names its own argument types.
use durable_agents::{Agent, Ctx, StepResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the model must give to pay.
#[derive(Deserialize, JsonSchema)]
pub struct PayArgs {
    /// In cents.
    #[schemars(range(min = 1, max = 100_000))]
    pub amount_cents: u64,
}

#[derive(Agent, Clone, Serialize, Deserialize)]
pub enum Checkout {
    #[agent(initial, route = llm, to(Payment(args = PayArgs), Browsing, Done(args = Vec<String>)))]
    Browsing,
    #[agent(to(Done))]
    Payment { cents: u64 },
    #[agent(terminal)]
    Done,
}

struct Shop;

impl CheckoutHandlers for Shop {
    async fn browsing(&self, ctx: Ctx<'_, checkout::Browsing>, route: checkout::BrowsingRoute, _: checkout::Browsing) -> StepResult<checkout::Browsing> {
        println!("{route:?}");
        Ok(match route {
            checkout::BrowsingRoute::Payment(args) => ctx.to(checkout::Payment { cents: args.amount_cents }),
            checkout::BrowsingRoute::Browsing => ctx.to(checkout::Browsing),
            checkout::BrowsingRoute::Done(lines) => {
                let _: Vec<String> = lines;
                ctx.to(checkout::Done)
            }
        })
    }

    async fn payment(&self, ctx: Ctx<'_, checkout::Payment>, _: checkout::Payment) -> StepResult<checkout::Payment> {
        Ok(ctx.to(checkout::Done))
    }
}

fn main() {
    fn assert_handles<A: durable_agents::agent::Handle<Shop>>() {}
    assert_handles::<Checkout>();
    let g = Checkout::graph();
    let browsing = g.state("Browsing").unwrap();
    let pay = browsing.arguments_of("Payment").unwrap();
    assert_eq!(pay.type_name, "PayArgs");
    assert_eq!(pay.schema["properties"]["amount_cents"]["maximum"], 100_000);
    assert_eq!(pay.schema["additionalProperties"], false);
    assert!(browsing.arguments_of("Browsing").is_none());
    assert!(browsing.check_arguments("Payment", &serde_json::json!({"amount_cents": 5})).is_ok());
    assert!(browsing.check_arguments("Payment", &serde_json::json!({"amount_cents": 0})).is_err());
    assert!(browsing.check_arguments("Browsing", &serde_json::json!({"x": 1})).is_err());
    assert!(browsing.check_arguments("Browsing", &serde_json::json!({})).is_ok());

    // Inside a function, the argument type is the function's own.
    #[derive(Deserialize, JsonSchema)]
    struct Reason {
        text: String,
    }

    #[derive(Agent, Clone, Serialize, Deserialize)]
    enum Support {
        #[agent(initial, route = llm, to(Closed(args = Reason), Escalated))]
        Open,
        #[agent(terminal)]
        Closed(String),
        #[agent(terminal)]
        Escalated,
    }

    struct Desk;

    impl SupportHandlers for Desk {
        async fn open(&self, ctx: Ctx<'_, support::Open>, route: support::OpenRoute, _: support::Open) -> StepResult<support::Open> {
            Ok(match route {
                support::OpenRoute::Closed(reason) => ctx.to(support::Closed(reason.text)),
                support::OpenRoute::Escalated => ctx.to(support::Escalated),
            })
        }
    }

    fn assert_desk<A: durable_agents::agent::Handle<Desk>>() {}
    assert_desk::<Support>();
}
