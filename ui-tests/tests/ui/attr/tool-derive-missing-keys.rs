// `#[derive(Tool)]` needs a kind, an input and an output; unknown keys are reported too.
use durable_agents::Tool;

#[derive(Tool)]
#[tool(kind = read, timeout = 5)]
pub struct Search;

fn main() {}
