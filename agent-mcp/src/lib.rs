//! Tools from MCP servers for durable-agents.
//!
//! An [MCP](https://modelcontextprotocol.io) server offers tools the compiler never sees.
//! This crate connects to one with the protocol's official Rust SDK (`rmcp`), over stdio
//! (a child process, [`McpServer::stdio`]) or streamable HTTP ([`McpServer::http`]), and
//! imports the tools you declare, each with the kind you give it: MCP's annotations
//! (`readOnlyHint`, `destructiveHint`, ...) are hints a server may get wrong, so a tool
//! imported without a kind is refused, never assumed read.
//!
//! ```no_run
//! # use durable_agents::mcp::{McpImport, McpServer, import};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let memory = McpServer::stdio(
//!     "memory",
//!     tokio::process::Command::new("mcp-server-memory"),
//! ).await?;
//! let tools = import([McpImport::new(memory)
//!     .read("read_graph")
//!     .write("create_entities")
//!     .allow_in("Remember", ["read_graph", "create_entities"])])?;
//! // runner = Runner::builder(store, handlers, tool_box).imported_tools(tools).build()?;
//! // in the `Remember` handler:
//! //   ctx.call_imported("memory__create_entities", json!({"entities": [...]})).await?
//! # Ok(()) }
//! ```
//!
//! What is checked when, what a call journals and how idempotency keys reach the server:
//! [`guide`] (`docs/mcp.md`).
#![warn(missing_docs)]

mod import;
mod server;
mod tool;

pub use import::{ImportError, McpImport, import};
pub use server::{ConnectError, McpServer};
pub use tool::{IDEMPOTENCY_KEY_META, McpTool, imported_name};

#[doc = include_str!("../../docs/mcp.md")]
pub mod guide {}
