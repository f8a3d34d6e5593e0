// Two tools whose names differ only in case (`HTTPGet`, `HttpGet`) would be one field of the
// agent's tools struct: one error, pointing at both.
use durable_agents::{Agent, Tool};
use serde::{Deserialize, Serialize};

/// Get.
#[derive(Debug, Tool)]
#[tool(kind = read, input = String, output = String)]
pub struct HTTPGet;

/// Get too.
#[derive(Debug, Tool)]
#[tool(kind = read, input = String, output = String)]
pub struct HttpGet;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(HTTPGet, HttpGet)))]
enum Fetch {
    #[agent(initial, tools(HTTPGet, HttpGet), to(Done))]
    Get,
    #[agent(terminal)]
    Done,
}

fn main() {}
