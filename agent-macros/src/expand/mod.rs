//! Stage 4: the code of a checked agent. Everything is named through the `crate = path`
//! option (default `::agent_core`); internals only through its `__private` module.

mod agent;
mod handlers;
mod rules;
mod states;
mod versions;

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::{Fields, Ident, Type};

use crate::ast::{Agent, Argument, State};
use crate::attr::Kind;
use crate::names;

pub(crate) use agent::agent_impl;
pub(crate) use handlers::{handle_impl, handler_trait};
pub(crate) use rules::{allows, tool_checks};
pub(crate) use states::markers;
pub(crate) use versions::{facts_impl, migration};

/// The whole expansion of a checked agent.
pub(crate) fn expand(agent: &Agent) -> TokenStream {
    let agent_impl = agent_impl(agent, false);
    let markers = markers(agent);
    let handlers = handler_trait(agent);
    let handle = handle_impl(agent, false);
    let allows = allows(agent);
    let tool_checks = tool_checks(agent);
    let toolset = crate::toolset::toolset(agent, false);
    let facts = facts_impl(agent);
    let migration = migration(agent);
    quote! {
        #agent_impl
        #facts
        #migration
        #markers
        #toolset
        #handlers
        #handle
        const _: () = {
            #allows
            #tool_checks
        };
    }
}

pub(crate) fn marker(agent: &Agent, state: &State) -> TokenStream {
    let module = &agent.module;
    let ident = &state.ident;
    quote!(#module::#ident)
}

pub(crate) fn route_ident(state: &State) -> Ident {
    format_ident!("{}Route", names::unraw(&state.ident))
}

/// The hidden trait, next to the route enum, whose associated types are the arguments of
/// the state's typed transitions (so the module names the user's types without a path to
/// them: its impl is written where the enum is).
fn route_args_ident(state: &State) -> Ident {
    format_ident!("__{}RouteArgs", names::unraw(&state.ident))
}

/// The successors the router chooses among: `to(...)`, known states, each once.
fn route_successors<'a>(agent: &Agent, state: &'a State) -> Vec<&'a Ident> {
    let mut out: Vec<&Ident> = Vec::new();
    for t in &state.to {
        if agent.state(t).is_some() && !out.iter().any(|o| names::same(o, t)) {
            out.push(t);
        }
    }
    out
}

/// The routed successors that declare an argument, with it.
fn typed_successors<'a>(agent: &Agent, state: &'a State) -> Vec<(&'a Ident, &'a Argument)> {
    if state.llm.is_none() {
        return Vec::new();
    }
    route_successors(agent, state)
        .into_iter()
        .filter_map(|t| state.argument(t).map(|a| (t, a)))
        .collect()
}

/// `<checkout::Review as checkout::__ReviewRouteArgs>::Payment`: the argument's type, named
/// through the route's trait so the user's type is written once in the expansion (one
/// error, not one per use, when it does not resolve).
/// Spanned at the type as written, so that its unmet bounds are reported there.
fn argument_type(agent: &Agent, state: &State, target: &Ident, span: Span) -> TokenStream {
    let module = &agent.module;
    let v = &state.ident;
    let tr = route_args_ident(state);
    let mut target = target.clone();
    target.set_span(span);
    quote_spanned!(span=> <#module::#v as #module::#tr>::#target)
}

/// The name of the state's handler method, without `r#`.
pub(crate) fn method_name(state: &State) -> String {
    names::snake_case(&state.name())
}

pub(crate) fn method_ident(state: &State) -> Ident {
    names::ident(&method_name(state), state.ident.span())
}

fn lit(s: &str) -> syn::LitStr {
    syn::LitStr::new(s, Span::call_site())
}

fn option<T: quote::ToTokens>(agent: &Agent, v: Option<T>) -> TokenStream {
    let krate = &agent.krate;
    v.map_or_else(
        || quote!(#krate::__private::Option::None),
        |v| quote!(#krate::__private::Option::Some(#v)),
    )
}

/// `where for<'a> Enum: StoredAsJson`, on every impl whose trait bounds `Agent`: inside
/// them the enum's serde impls are assumed, so an enum without the serde derives is
/// reported once, at the unconditional `StoredAsJson` impl that `agent_impl` writes, and
/// not again at each of these (see `__private::StoredAsJson`).
pub(crate) fn stored_as_json(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let ident = &agent.ident;
    quote!(where for<'__agent> #ident: #krate::__private::StoredAsJson)
}

pub(crate) fn kind_type(krate: &syn::Path, kind: Kind) -> TokenStream {
    match kind {
        Kind::Read => quote!(#krate::__private::kind::Read),
        Kind::Write => quote!(#krate::__private::kind::Write),
        Kind::Hybrid => quote!(#krate::__private::kind::Hybrid),
    }
}

/// Parameters of a state's data: field names, or `f0, f1, ...` for tuple variants.
pub(crate) fn field_params(state: &State) -> Vec<(Ident, Type)> {
    match &state.fields {
        Fields::Named(named) => named
            .named
            .iter()
            .filter_map(|f| f.ident.clone().map(|i| (i, f.ty.clone())))
            .collect(),
        Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (format_ident!("f{}", i), f.ty.clone()))
            .collect(),
        Fields::Unit => Vec::new(),
    }
}

/// The tokens, each spanned at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                TokenTree::Group(group)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// Type text as a user writes it: `Vec<String>`, not `Vec < String >`.
pub(crate) fn type_text(ty: &impl quote::ToTokens) -> String {
    let mut text = ty.to_token_stream().to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        ("& ", "&"),
        (" ,", ","),
        ("' _", "'_"),
    ] {
        text = text.replace(from, to);
    }
    text
}
