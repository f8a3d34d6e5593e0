//! Where generated code finds the framework when the user gives no `crate = path`.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::Span;

/// The facade `durable-agents`, under the name the user's manifest gives it; else the core
/// crate under its name (crates inside the framework depend on the core directly); else
/// `::durable_agents`, which is right for every user who added the facade.
pub(crate) fn default_path() -> syn::Path {
    for package in ["durable-agents", "durable-agents-core"] {
        match crate_name(package) {
            Ok(FoundCrate::Name(name)) => {
                let ident = syn::Ident::new(&name, Span::call_site());
                return syn::parse_quote!(::#ident);
            }
            // The core's own library: it names itself `agent_core` (`extern crate self`).
            Ok(FoundCrate::Itself) if package == "durable-agents-core" => {
                return syn::parse_quote!(::agent_core);
            }
            Ok(FoundCrate::Itself) | Err(_) => {}
        }
    }
    syn::parse_quote!(::durable_agents)
}
