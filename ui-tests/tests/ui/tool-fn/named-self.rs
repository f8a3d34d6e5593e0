// A function whose tool type would be named like a keyword (`self_` -> `Self`): one error at
// the name.
use durable_agents::prelude::*;

/// Me.
#[tool_fn(read)]
async fn self_(q: String) -> ToolResult<String> {
    Ok(q)
}

fn main() {}
