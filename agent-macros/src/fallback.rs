//! Stage 5: what is emitted next to the errors. The items the user's code refers to still
//! exist (the `Agent` impl, the state structs, the handler trait), and tools and
//! transitions are allowed everywhere, so the user sees the real mistakes and not a cascade
//! of "cannot find" and "not allowed" errors that would vanish once they are fixed.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::Agent;
use crate::expand;
use crate::tool::{self, Tool};

pub(crate) fn fallback(agent: &Agent) -> TokenStream {
    let private = expand::private();
    let agent_impl = expand::agent_impl(agent, true);
    let (module, state_impls) = expand::markers(agent);
    let handlers = expand::handler_trait(agent);
    let handle = expand::handle_impl(agent, true);
    let (toolset, toolset_impls) = crate::toolset::toolset(agent, true);
    let facts = expand::facts_impl(agent);
    // Use the mapping, so that it is not reported as dead code on top of the errors.
    let mapping = agent.migrate_from.as_ref().map(|(_, m)| {
        let with = &m.with;
        quote!(const _: () = { let _ = #with; };)
    });
    let allows = agent.states.iter().map(|s| {
        let m = expand::marker(agent, s);
        quote! {
            impl<T: #private::Tool> #private::AllowsTool<T> for #m {}
            impl<T: #private::State> #private::AllowsTransition<T> for #m {}
        }
    });
    // Use the declared tools, so their imports are not reported as unused on top of the errors.
    let tools = agent.tools.iter().map(|t| &t.path);
    let private_use = expand::private_use(agent);
    quote! {
        #module
        #handlers
        #toolset
        const _: () = {
            #private_use
            let _ = #private::core::marker::PhantomData::<(#(#tools,)*)>;
            #agent_impl
            #facts
            #mapping
            #state_impls
            #handle
            #toolset_impls
            #(#allows)*
        };
    }
}

/// `impl Tool` with what the attribute got right: the types given, the kind given (or the
/// one a misspelled kind is closest to) and `()` for a missing type, so that the user's
/// `impl Execute` and the agents listing the tool see a tool.
pub(crate) fn tool_fallback(t: &Tool) -> TokenStream {
    let unit = quote!(());
    let input = t
        .input
        .as_ref()
        .map_or_else(|| unit.clone(), |ty| quote!(#ty));
    let output = t.output.as_ref().map_or(unit, |ty| quote!(#ty));
    tool::tool_impl(
        t,
        &quote! {
            type Input = #input;
            type Output = #output;
        },
    )
}
