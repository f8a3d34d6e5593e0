//! Derive macros for `agent-core`. Depend on `agent-core`, which re-exports them.
use proc_macro::TokenStream;

/// See `agent_core::Agent`.
#[proc_macro_derive(Agent, attributes(agent))]
pub fn derive_agent(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}

/// See `agent_core::Tool`.
#[proc_macro_derive(Tool, attributes(tool))]
pub fn derive_tool(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
