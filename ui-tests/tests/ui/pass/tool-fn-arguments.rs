// Tools whose input is their own parameters: the generated `{Tool}Input` struct (one field
// per parameter, its doc comment in the schema), `From` the argument's type for a tool of
// one argument (a hybrid's output converted to its compensation's input), primitives as
// outputs, and the struct form next to it.
use std::sync::Arc;

use durable_agents::prelude::*;

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Query {
    pub text: String,
}

/// Search (the struct form: one undocumented parameter is the input).
#[tool_fn(read)]
pub async fn search(query: Query) -> ToolResult<Vec<String>> {
    Ok(vec![query.text])
}

/// Put a product in a cart.
#[tool_fn(write)]
pub async fn add_to_cart(
    /// Whose cart.
    user: String,
    /// Which product.
    sku: String,
    cx: &ToolContext,
) -> ToolResult<u32> {
    let _ = (user, sku, cx.idempotency_key());
    Ok(1)
}

/// Reserve one unit; its output, the reservation's id, is what `ReleaseStock` takes.
#[tool_fn(hybrid, compensate = ReleaseStock)]
pub async fn reserve_stock(
    Shared(region): Shared<String>,
    /// Which product.
    sku: String,
) -> ToolResult<String> {
    Ok(format!("{region}-{sku}"))
}

/// Release a reservation.
#[tool_fn(write)]
pub async fn release_stock(
    /// The reservation's id.
    reservation_id: String,
) -> ToolResult<()> {
    let _ = reservation_id;
    Ok(())
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(
    read(Search),
    write(AddToCart, ReleaseStock),
    hybrid(ReserveStock(compensate = ReleaseStock)),
))]
enum Shop {
    #[agent(initial, tools(Search, AddToCart, ReserveStock), to(Done))]
    Browsing { user: String },
    #[agent(terminal)]
    Done { items: u32 },
}

struct Desk;

impl ShopHandlers for Desk {
    async fn browsing(&self, ctx: Ctx<'_, shop::Browsing>, shop::Browsing { user }: shop::Browsing) -> StepResult<shop::Browsing> {
        let found = ctx.call::<Search>(Query { text: "tea".into() }).await?;
        let sku = found[0].clone();
        let items = ctx.call::<AddToCart>(AddToCartInput { user, sku: sku.clone() }).await?;
        let _reservation: String = ctx.call::<ReserveStock>(sku.into()).await?;
        Ok(ctx.to(shop::Done { items }))
    }
}

fn main() {
    let schema = serde_json::to_value(schemars::schema_for!(AddToCartInput)).unwrap();
    assert_eq!(schema["properties"]["user"]["description"], "Whose cart.");
    assert_eq!(schema["properties"]["sku"]["description"], "Which product.");
    assert_eq!(schema["required"], serde_json::json!(["user", "sku"]));
    let input: AddToCartInput = serde_json::from_value(serde_json::json!({"user": "ann", "sku": "tea"})).unwrap();
    assert_eq!((input.user.as_str(), input.sku.as_str()), ("ann", "tea"));
    // A hybrid's output becomes its compensation's input through `From`.
    let undo = ReserveStock::new("eu".to_owned()).compensation(&"tea".to_owned().into(), &"eu-tea".to_owned());
    assert_eq!(undo.reservation_id, "eu-tea");
    let store = Arc::new(MemoryStore::new());
    let tools = ShopTools::from_shared(&"eu".to_owned());
    assert!(Runner::new(store, Desk, tools).is_ok());
}
