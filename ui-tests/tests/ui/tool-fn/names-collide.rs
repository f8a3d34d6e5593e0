// Two functions whose names make the same tool type (`SearchWeb`): one error, at the name
// that is not in snake case.
use durable_agents::prelude::*;

/// Search.
#[tool_fn(read)]
async fn search_web(q: String) -> ToolResult<String> {
    Ok(q)
}

/// Search too.
#[allow(non_snake_case)]
#[tool_fn(read)]
async fn searchWeb(q: String) -> ToolResult<String> {
    Ok(q)
}

fn main() {}
