//! Shared fixtures of the trybuild specs under `tests/ui/`: the tools of the checkout agent,
//! so each spec declares only the agent it is about.
//!
//! The `.stderr` files belong to one compiler: see `RUSTC_VERSION` and `tests/ui.rs`.

use durable_agents::{Compensate, Execute, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A line of the cart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Cart {
    /// SKUs in the cart.
    pub items: Vec<String>,
}

/// A placed order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Order {
    /// The order's id.
    pub id: String,
}

/// Search the catalogue.
#[derive(Debug, Tool)]
#[tool(kind = read, input = String, output = Vec<String>, timeout_ms = 2000, retries = 3)]
pub struct SearchProducts;

/// Read the cart.
#[derive(Debug, Tool)]
#[tool(kind = read, input = (), output = Cart)]
pub struct GetCart;

/// Reserve stock for an order.
#[derive(Debug, Tool)]
#[tool(kind = hybrid, input = Order, output = String)]
pub struct ReserveInventory;

/// Release a reservation.
#[derive(Debug, Tool)]
#[tool(kind = write, input = String, output = ())]
pub struct ReleaseInventory;

/// Charge the customer.
#[derive(Debug, Tool)]
#[tool(kind = write, input = Order, output = String, timeout_ms = 10_000, retries = 5, cache = false)]
pub struct ChargePayment;

impl Compensate for ReserveInventory {
    type With = ReleaseInventory;
    fn compensation(&self, _input: &Order, output: &String) -> String {
        output.clone()
    }
}

macro_rules! unimplemented_execute {
    ($($t:ty),*) => {$(
        impl Execute for $t {
            async fn execute(
                &self,
                _input: <Self as Tool>::Input,
                _cx: &ToolContext,
            ) -> Result<<Self as Tool>::Output, ToolError> {
                Err(ToolError::permanent("fixture"))
            }
        }
    )*};
}

unimplemented_execute!(
    SearchProducts,
    GetCart,
    ReserveInventory,
    ReleaseInventory,
    ChargePayment
);
