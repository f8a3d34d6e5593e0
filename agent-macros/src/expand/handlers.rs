//! The handler trait a user implements, one method per state, and `Handle`, which calls it.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Fields, Ident};

use super::{
    field_params, lit, marker, method_ident, method_name, respan, route_ident, stored_as_json,
};
use crate::ast::{Agent, State};
use crate::names;

/// `checkout::Review { customer, cart, recommendations }`, `shapes::Pair(f0, f1)` or
/// `flow::Done`: the state's struct as a pattern (or a value), in the docs.
fn state_pattern(agent: &Agent, state: &State) -> String {
    let module = &agent.module;
    let v = &state.ident;
    let names: Vec<String> = field_params(state)
        .iter()
        .map(|(i, _)| i.to_string())
        .collect();
    match &state.fields {
        Fields::Named(_) => format!("{module}::{v} {{ {} }}", names.join(", ")),
        Fields::Unnamed(_) => format!("{module}::{v}({})", names.join(", ")),
        Fields::Unit => format!("{module}::{v}"),
    }
}

/// `checkout::Review { .. }`-like text for a target in the docs: the target built by name.
fn target_text(agent: &Agent, target: &Ident) -> String {
    agent.state(target).map_or_else(
        || format!("{}::{target}", agent.module),
        |t| state_pattern(agent, t),
    )
}

/// The handler trait: one method per non-terminal state. Its docs are where a user looks
/// up what to write (`cargo doc` shows it in their crate), so each method's doc lists its
/// parameters. Each method's signature is spanned at the state's variant, so that rustc's
/// own errors about a handler that does not match (a parameter missing or extra: E0050)
/// point at the state the method runs.
pub(crate) fn handler_trait(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let vis = &agent.vis;
    let trait_ident = &agent.handlers;
    let module = &agent.module;
    // Two states with one method name were reported; the stub trait keeps the first.
    let mut seen: Vec<String> = Vec::new();
    let states: Vec<&State> = agent
        .states
        .iter()
        .filter(|s| s.terminal.is_none())
        .filter(|s| {
            let m = method_name(s);
            let fresh = !seen.contains(&m);
            seen.push(m);
            fresh
        })
        .collect();
    let mut summary = Vec::new();
    let methods = states.iter().map(|s| {
        let span = s.ident.span();
        let m = marker(agent, s);
        let method = method_ident(s);
        let name = s.name();
        let v = &s.ident;
        // (name or pattern, type, what it is) for the docs, in the order of the signature.
        let mut listed: Vec<(String, String, String)> = Vec::new();
        // Spanned at the state, so rustc's label "trait requires N parameters" is there.
        let ctx_type = respan(quote!(#krate::__private::Ctx<'_, #m>), span);
        let moves = s
            .successors()
            .iter()
            .map(|t| format!("`ctx.to({})`", target_text(agent, t)))
            .collect::<Vec<_>>()
            .join(", ");
        let calls = if s.tools.is_empty() {
            String::new()
        } else {
            let tools: Vec<String> = s.tools.iter().map(names::unraw).collect();
            format!(
                "; calls the tools it lists with `ctx.call::<Tool>(input)`: {}",
                names::list(tools.iter().map(String::as_str))
            )
        };
        listed.push((
            "ctx".to_owned(),
            format!("Ctx<'_, {module}::{v}>"),
            format!("moves the run on with {moves}{calls}"),
        ));
        let route = s.llm.map(|_| {
            let r = route_ident(s);
            listed.push((
                "route".to_owned(),
                format!("{module}::{r}"),
                "the successor the model chose, with its argument if the transition declares one".to_owned(),
            ));
            quote_spanned!(span=> route: #module::#r,)
        });
        let wake = s.wait.as_ref().map(|(_, signal)| {
            listed.push((
                "wake".to_owned(),
                "Wake".to_owned(),
                format!("why the run woke up: signal `{signal}` with its payload, or the wait timed out"),
            ));
            quote_spanned!(span=> wake: #krate::__private::Wake,)
        });
        let what = match &s.fields {
            Fields::Named(_) => format!("the state's fields, destructured by name (or take it whole, `state: {module}::{v}`, and read `state.field`); `..` skips the ones the step does not read"),
            Fields::Unnamed(_) => format!("the state's fields, in the order of the variant `{}::{name}`", agent.ident),
            Fields::Unit => "the state, which has no fields".to_owned(),
        };
        listed.push((state_pattern(agent, s), format!("{module}::{v}"), what));
        let signature = format!(
            "async fn {}(&self, {}) -> StepResult<{module}::{v}>",
            method,
            listed
                .iter()
                .map(|(p, t, _)| format!("{p}: {t}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        let mut doc = format!(
            "Run state `{name}`: return the next state with `ctx.to(...)`.\n\n```text\n{signature}\n```\n\nParameters, in this order:\n"
        );
        doc.extend(
            listed
                .iter()
                .map(|(p, t, what)| format!("- `{p}: {t}`: {what}\n")),
        );
        summary.push(format!("- `{name}`: `{signature}`"));
        // At the variant's fields, so that rustc's label joins the state's name to them:
        // "trait requires N parameters" under `Start { user: String, card: String }`.
        let fields_span = if s.fields.is_empty() {
            span
        } else {
            s.fields.span()
        };
        let state = respan(quote!(state: #m), fields_span);
        quote_spanned! {span=>
            #[doc = #doc]
            fn #method(
                &self,
                ctx: #ctx_type,
                #route
                #wake
                #state,
            ) -> impl #krate::__private::Future<Output = #krate::__private::StepResult<#m>>
                   + #krate::__private::Send;
        }
    }).collect::<Vec<_>>();
    let doc = format!(
        "The behaviour of agent `{name}`, generated by `#[derive(Agent)]`: one method per state that is not terminal, named after the state in snake case. Implement it with `async fn`s whose parameters are the ones listed here, in this order (`cargo doc --open` shows this trait in your crate's docs).\n\n{methods}",
        name = agent.name,
        methods = if summary.is_empty() {
            "Every state is terminal: there is nothing to implement.".to_owned()
        } else {
            summary.join("\n")
        }
    );
    quote! {
        #[doc = #doc]
        #vis trait #trait_ident:
            #krate::__private::Send + #krate::__private::Sync + 'static
        {
            #(#methods)*
        }
    }
}

/// `impl<H: CheckoutHandlers> Handle<H> for Checkout`: a `match` whose arm per state calls
/// the state's handler and hands its future to the generic `__private::step` (one `async`
/// block in the core, not one in the user's crate holding every handler's future).
pub(crate) fn handle_impl(agent: &Agent, stub: bool) -> TokenStream {
    let private = super::private();
    let ident = &agent.ident;
    let trait_ident = &agent.handlers;
    let module = &agent.module;
    // Locals of the generated fn, invisible to (and unaffected by) names in the user's scope.
    let handlers = Ident::new("handlers", Span::mixed_site());
    let io = Ident::new("io", Span::mixed_site());
    let error = Ident::new("error", Span::mixed_site());
    let stored = stored_as_json(agent);
    let body = if stub {
        quote! {
            let _ = (#handlers, #io);
            #private::core::unreachable!()
        }
    } else {
        let arms = agent.states.iter().map(|s| {
            let v = &s.ident;
            let n = lit(&s.name());
            if s.terminal.is_some() {
                return quote!(Self::#v { .. } => #private::fail(#private::terminal(#n)),);
            }
            let method = method_ident(s);
            let m = marker(agent, s);
            let bindings: Vec<Ident> = (0..s.fields.len())
                .map(|i| Ident::new(&format!("f{i}"), Span::mixed_site()))
                .collect();
            let (pattern, state) = match &s.fields {
                Fields::Named(named) => {
                    let f: Vec<&Ident> = named
                        .named
                        .iter()
                        .filter_map(|f| f.ident.as_ref())
                        .collect();
                    (
                        quote!(Self::#v { #(#f: #bindings),* }),
                        quote!(#m { #(#f: #bindings),* }),
                    )
                }
                Fields::Unnamed(_) => {
                    (quote!(Self::#v(#(#bindings),*)), quote!(#m(#(#bindings),*)))
                }
                Fields::Unit => (quote!(Self::#v), quote!(#m)),
            };
            let route = s.llm.map(|_| Ident::new("route", Span::mixed_site()));
            let wake = s
                .wait
                .as_ref()
                .map(|_| Ident::new("wake", Span::mixed_site()));
            let (route_arg, wake_arg) = (
                route.as_ref().map(|r| quote!(#r,)),
                wake.as_ref().map(|w| quote!(#w,)),
            );
            let mut call = quote! {
                #private::step(<H as #trait_ident>::#method(
                    #handlers,
                    #private::Ctx::<'_, #m>::__new(#io),
                    #route_arg
                    #wake_arg
                    #state,
                ))
            };
            // What the handler takes besides its state, read before it runs: a missing one
            // fails the step (the route first, as the arguments are in that order).
            if let Some(wake) = &wake {
                call = quote! {
                    match #private::wake(#io, #n) {
                        #private::Ok(#wake) => #call,
                        #private::Err(#error) => #private::fail(#error),
                    }
                };
            }
            if let Some(route) = &route {
                let r = route_ident(s);
                call = quote! {
                    match #private::route::<#module::#r>(#io, #n) {
                        #private::Ok(#route) => #call,
                        #private::Err(#error) => #private::fail(#error),
                    }
                };
            }
            quote!(#pattern => #call,)
        });
        quote! {
            match self {
                #(#arms)*
            }
        }
    };
    quote! {
        #[automatically_derived]
        impl<H: #trait_ident> #private::Handle<H> for #ident #stored {
            fn handle<'a>(
                self,
                #handlers: &'a H,
                #io: &'a dyn #private::StepIo,
            ) -> #private::BoxFuture<'a, #private::Result<Self, #private::StepError>> {
                #body
            }
        }
    }
}
