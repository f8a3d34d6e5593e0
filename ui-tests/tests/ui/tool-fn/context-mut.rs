// The call's context is taken by shared reference: `&mut ToolContext` is refused at the type.
use durable_agents::prelude::*;

/// Look up.
#[tool_fn(read)]
async fn look_up(cx: &mut ToolContext, name: String) -> ToolResult<String> {
    let _ = cx;
    Ok(name)
}

fn main() {}
