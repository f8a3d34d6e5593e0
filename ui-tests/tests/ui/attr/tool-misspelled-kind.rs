// A misspelled kind in `#[tool(...)]` is one error: the stub impl takes the closest kind, so the tool's `impl Execute` and `impl Compensate` still compile.
use durable_agents::{Compensate, Execute, Tool, ToolContext, ToolError};
use ui_tests::{Order, ReleaseInventory};

#[derive(Tool)]
#[tool(kind = hybird, input = Order, output = String)]
pub struct Reserve;

impl Execute for Reserve {
    async fn execute(&self, input: Order, _cx: &ToolContext) -> Result<String, ToolError> {
        Ok(input.id)
    }
}

impl Compensate for Reserve {
    type With = ReleaseInventory;
    fn compensation(&self, _input: &Order, output: &String) -> String {
        output.clone()
    }
}

fn main() {}
