//! Derive macros of `durable-agents`. Depend on `durable-agents`, which re-exports them and
//! documents the grammar.
//!
//! Stages, one per module: `attr` (syntax of `#[agent(...)]`) -> `ast` (the model, with
//! spans) -> `check` (graph rules) -> `expand` (code) or `fallback` (stubs next to the
//! errors). `#[derive(Tool)]` runs on the same stages: its attribute in `attr`, its model
//! and code in `tool`, its stub in `fallback`. Messages are `ctxt::Message`s.
#![warn(missing_docs)]

mod ast;
mod attr;
mod check;
mod ctxt;
mod expand;
mod fallback;
mod krate;
mod named;
mod names;
mod tool;
mod tool_fn;
mod toolset;

use proc_macro::TokenStream;

/// See `durable_agents::Agent`.
#[proc_macro_derive(Agent, attributes(agent))]
pub fn derive_agent(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive_agent_impl(&input).into()
}

/// See `durable_agents::Tool`.
#[proc_macro_derive(Tool, attributes(tool))]
pub fn derive_tool(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    tool::derive(&input).into()
}

/// See `durable_agents::tool_fn`.
#[proc_macro_attribute]
pub fn tool_fn(args: TokenStream, item: TokenStream) -> TokenStream {
    tool_fn::expand(args.into(), &item.into()).into()
}

fn derive_agent_impl(input: &syn::DeriveInput) -> proc_macro2::TokenStream {
    let cx = ctxt::Ctxt::new();
    let Some(agent) = ast::parse(&cx, input) else {
        return cx.into_compile_errors().unwrap_or_default();
    };
    check::check(&cx, &agent);
    match cx.into_compile_errors() {
        None => expand::expand(&agent),
        Some(errors) => {
            let stubs = fallback::fallback(&agent);
            quote::quote!(#errors #stubs)
        }
    }
}

#[cfg(test)]
mod tests;
