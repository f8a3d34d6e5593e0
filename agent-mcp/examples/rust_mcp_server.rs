//! The tests' MCP server over stdio: `cargo run --example rust_mcp_server [2]` (the
//! argument is the version of `add_note`'s input schema). Built by `cargo test`, started by
//! `agent-mcp/tests/mcp.rs` as a child process.

#[path = "../tests/support/notes_server.rs"]
mod notes_server;

use rmcp::ServiceExt as _;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let version = std::env::args()
        .nth(1)
        .map_or(Ok(1), |v| v.parse::<u32>())?;
    let server = notes_server::NotesServer::new(version)
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}
