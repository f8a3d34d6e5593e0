//! Stage 4: the code of a checked agent. Everything is named through the `crate = path`
//! option (default `::agent_core`); internals only through its `__private` module.

mod agent;
mod handlers;
mod rules;
mod states;
mod versions;

use proc_macro2::{Group, Punct, Spacing, Span, TokenStream, TokenTree};
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

/// The whole expansion of a checked agent: the items the user names (the states' module,
/// the handler trait, the tools struct) where the enum is, and every impl inside one
/// `const _` block that names the framework's internals through a short alias (`private`).
pub(crate) fn expand(agent: &Agent) -> TokenStream {
    let agent_impl = agent_impl(agent, false);
    let (module, state_impls) = markers(agent);
    let handlers = handler_trait(agent);
    let handle = handle_impl(agent, false);
    let allows = allows(agent);
    let tool_checks = tool_checks(agent);
    let (toolset, toolset_impls) = crate::toolset::toolset(agent, false);
    let facts = facts_impl(agent);
    let (migration, migration_checks) = migration(agent);
    let private_use = private_use(agent);
    quote! {
        #module
        #toolset
        #handlers
        #migration_checks
        const _: () = {
            #private_use
            #agent_impl
            #facts
            #migration
            #state_impls
            #toolset_impls
            #handle
            #allows
            #tool_checks
        };
    }
}

/// The alias of `<crate>::__private` inside the generated `const _` block: every impl names
/// the internals through it, one token where the full path is six.
pub(crate) fn private() -> Ident {
    Ident::new("__agent_private", Span::call_site())
}

/// Tokens kept as a list of token trees, for the small pieces the expansion repeats (a
/// state's struct, a bound): interpolated, they are appended one by one, where a
/// `TokenStream` is joined to its neighbours through the compiler's bridge, several round
/// trips each time.
#[derive(Clone)]
pub(crate) struct Flat(Vec<TokenTree>);

impl Flat {
    /// The tokens, each spanned at `span` (a `Flat` holds no groups: see [`respan`] for those).
    pub(crate) fn respanned(&self, span: Span) -> Self {
        Self(
            self.0
                .iter()
                .map(|t| {
                    let mut t = t.clone();
                    t.set_span(span);
                    t
                })
                .collect(),
        )
    }
}

impl From<TokenStream> for Flat {
    fn from(tokens: TokenStream) -> Self {
        Self(tokens.into_iter().collect())
    }
}

impl quote::ToTokens for Flat {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.extend(self.0.iter().cloned());
    }
}

/// The identifier, spanned at `span`.
pub(crate) fn ident_at(ident: &Ident, span: Span) -> Ident {
    let mut ident = ident.clone();
    ident.set_span(span);
    ident
}

/// The `use` that declares [`private`], first in the block.
pub(crate) fn private_use(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let private = private();
    quote!(use #krate::__private as #private;)
}

/// `checkout::Review`: the state's struct.
pub(crate) fn marker(agent: &Agent, state: &State) -> Flat {
    Flat(vec![
        TokenTree::Ident(agent.module.clone()),
        TokenTree::Punct(Punct::new(':', Spacing::Joint)),
        TokenTree::Punct(Punct::new(':', Spacing::Alone)),
        TokenTree::Ident(state.ident.clone()),
    ])
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

/// `Some(v)` inside the generated block.
fn some(v: impl quote::ToTokens) -> TokenStream {
    let private = private();
    quote!(#private::Option::Some(#v))
}

/// `where for<'a> Enum: StoredAsJson`, on every impl whose trait bounds `Agent`: inside
/// them the enum's serde impls are assumed, so an enum without the serde derives is
/// reported once, at the unconditional `StoredAsJson` impl that `agent_impl` writes, and
/// not again at each of these (see `__private::StoredAsJson`).
pub(crate) fn stored_as_json(agent: &Agent) -> Flat {
    let private = private();
    let ident = &agent.ident;
    Flat::from(quote!(where for<'__agent> #ident: #private::StoredAsJson))
}

/// The kind's marker type, under `private` (the crate's `__private` path, or its alias).
pub(crate) fn kind_type(private: &impl quote::ToTokens, kind: Kind) -> TokenStream {
    match kind {
        Kind::Read => quote!(#private::kind::Read),
        Kind::Write => quote!(#private::kind::Write),
        Kind::Hybrid => quote!(#private::kind::Hybrid),
    }
}

/// Parameters of a state's data: field names, or `f0, f1, ...` for tuple variants.
pub(crate) fn field_params(state: &State) -> Vec<(Ident, &Type)> {
    match &state.fields {
        Fields::Named(named) => named
            .named
            .iter()
            .filter_map(|f| f.ident.clone().map(|i| (i, &f.ty)))
            .collect(),
        Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (format_ident!("f{}", i), &f.ty))
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
