// What `#[tool_fn]` refuses, all reported at once: no kind, a duplicate key, an unknown key,
// `input =` (the input is the parameters), a function that is not async, an argument
// that is a pattern (it names a field of the generated input), a return type that is not a `Result`, a hybrid tool without its compensation, and a
// compensation on a write tool.
use durable_agents::prelude::*;

/// No kind.
#[tool_fn(timeout_ms = 10, timeout_ms = 20, colour = red)]
async fn no_kind(x: u8) -> ToolResult<u8> {
    Ok(x)
}

/// Says its input.
#[tool_fn(read, input = u8)]
fn not_async((x, y): (u8, u8), z: u8) -> ToolResult<u8> {
    Ok(x + y + z)
}

/// Returns no result.
#[tool_fn(write)]
async fn no_result(x: u8) -> u8 {
    x
}

/// Undone by nothing.
#[tool_fn(hybrid)]
async fn hold(x: u8) -> ToolResult<u8> {
    Ok(x)
}

/// A write with a compensation.
#[tool_fn(write, compensate = Hold)]
async fn send(x: u8) -> ToolResult<u8> {
    Ok(x)
}

fn main() {}
