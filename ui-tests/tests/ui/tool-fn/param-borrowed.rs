// Borrowed and `impl Trait` parameters: the model's arguments are deserialized into owned
// values, so `&str`, `&mut T` and `impl Trait` are refused at the type, each once.
use durable_agents::prelude::*;

/// Look up.
#[tool_fn(read)]
async fn look_up(name: &str, tags: &mut Vec<String>, extra: impl Into<String>) -> ToolResult<String> {
    let _ = (tags, extra);
    Ok(name.to_owned())
}

fn main() {}
