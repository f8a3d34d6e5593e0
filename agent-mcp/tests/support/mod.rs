//! Shared by the tests and the `rust_mcp_server` example.
pub(crate) mod notes_server;
