// Every malformed value in `#[tool(...)]` is reported, each once, and nothing else: the tool's `impl Execute` and the agent listing it still compile.
use durable_agents::{Agent, Execute, Tool, ToolContext, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Tool)]
#[tool(kind = read, input = String, output = usize, timeout_ms = "5s", retries = 0, cache = yes)]
pub struct CountLetters;

impl Execute for CountLetters {
    async fn execute(&self, input: String, _cx: &ToolContext) -> Result<usize, ToolError> {
        Ok(input.len())
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(CountLetters)))]
enum Flow {
    #[agent(initial, tools(CountLetters), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
