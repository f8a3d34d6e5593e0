// A key given twice in `#[tool(...)]` is reported at its second occurrence, and only there: the tool's `impl Execute` still compiles.
use durable_agents::{Execute, Tool, ToolContext, ToolError};

#[derive(Tool)]
#[tool(kind = read, input = String, output = usize, kind = write)]
pub struct CountLetters;

impl Execute for CountLetters {
    async fn execute(&self, input: String, _cx: &ToolContext) -> Result<usize, ToolError> {
        Ok(input.len())
    }
}

fn main() {}
