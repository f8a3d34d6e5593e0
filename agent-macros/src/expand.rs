//! Stage 4: the code of a checked agent. Everything is named through the `crate = path`
//! option (default `::agent_core`); internals only through its `__private` module.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Fields, Ident, Type, Visibility};

use crate::ast::{Agent, Argument, State};
use crate::attr::Kind;
use crate::names;

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

/// `impl Agent`. With `stub`, `graph()` is never reached (the build already failed).
pub(crate) fn agent_impl(agent: &Agent, stub: bool) -> TokenStream {
    let krate = &agent.krate;
    let ident = &agent.ident;
    let name = lit(&agent.name);
    let arms = agent.states.iter().map(|s| {
        let v = &s.ident;
        let n = lit(&s.name());
        quote!(Self::#v { .. } => #n,)
    });
    // `match self {}` on `&Enum` would not be exhaustive: a reference is never uninhabited.
    let scrutinee = if agent.states.is_empty() {
        quote!(*self)
    } else {
        quote!(self)
    };
    let graph = if stub {
        quote!(#krate::__private::core::unreachable!())
    } else {
        let dag = agent.dag;
        let max_steps = option(agent, agent.max_steps);
        let tools = agent.tools.iter().map(|t| {
            let n = lit(&names::unraw(&t.ident));
            let kind = kind_value(agent, t.kind);
            let comp = option(agent, t.compensate.as_ref().map(|c| lit(&names::unraw(c))));
            quote!(#krate::__private::ToolSpec { name: #n, kind: #kind, compensation: #comp })
        });
        let states = agent.states.iter().map(|s| {
            let n = lit(&s.name());
            let initial = s.initial.is_some();
            let terminal = s.terminal.is_some();
            let compensate = s.compensate.is_some();
            let llm = s.llm.is_some();
            let wait = option(agent, s.wait.as_ref().map(|w| lit(&w.1)));
            let wait_timeout = option(agent, s.wait_timeout_ms.map(|w| w.1));
            let wait_payload = option(
                agent,
                s.wait_payload.as_ref().map(|(span, ty)| {
                    quote_spanned!(*span=> <#ty as #krate::__private::PayloadSchema>::schema)
                }),
            );
            let to = s.to.iter().map(|t| lit(&names::unraw(t)));
            let on_error = option(agent, s.on_error.as_ref().map(|t| lit(&names::unraw(t))));
            let tools = s.tools.iter().map(|t| lit(&names::unraw(t)));
            let max_tool_calls = option(agent, s.max_tool_calls.map(|m| m.1));
            let tools_per_answer = option(agent, s.tools_per_answer.map(|m| m.1));
            let timeout = option(agent, s.timeout_ms.map(|m| m.1));
            let decision_timeout = option(agent, s.decision_timeout_ms.map(|m| m.1));
            let children = s
                .children
                .iter()
                .map(|c| quote!(<#c as #krate::__private::Agent>::NAME));
            let children_outlive = s.children_outlive.is_some();
            let data = lit(&s.data());
            let arguments = typed_successors(agent, s).into_iter().map(|(t, a)| {
                let to = lit(&names::unraw(t));
                let type_name = lit(&quote::ToTokens::to_token_stream(&a.ty).to_string());
                let span = a.ty.span();
                let ty = argument_type(agent, s, t, span);
                quote_spanned! {span=>
                    #krate::__private::ArgumentSpec {
                        to: #to,
                        type_name: #type_name,
                        schema: <#ty as #krate::__private::ArgumentSchema>::schema,
                        check: <#ty as #krate::__private::ArgumentType>::check,
                    }
                }
            });
            quote! {
                #krate::__private::StateSpec {
                    name: #n, initial: #initial, terminal: #terminal, compensate: #compensate,
                    llm: #llm, wait: #wait, wait_timeout_ms: #wait_timeout,
                    wait_payload: #wait_payload, to: &[#(#to),*],
                    on_error: #on_error, tools: &[#(#tools),*], max_tool_calls: #max_tool_calls,
                    tools_per_answer: #tools_per_answer, timeout_ms: #timeout,
                    decision_timeout_ms: #decision_timeout, children: &[#(#children),*],
                    children_outlive: #children_outlive, data: #data,
                    arguments: &[#(#arguments),*],
                }
            }
        });
        quote! {
            static GRAPH: #krate::__private::OnceLock<#krate::__private::GraphDescription> =
                #krate::__private::OnceLock::new();
            GRAPH.get_or_init(|| {
                #krate::__private::graph(&#krate::__private::AgentSpec {
                    name: #name,
                    version: <Self as #krate::__private::Agent>::VERSION,
                    dag: #dag,
                    max_steps: #max_steps,
                    tools: &[#(#tools),*],
                    states: &[#(#states),*],
                })
            })
        }
    };
    let version = agent.version.map(|(span, n)| {
        let n = syn::LitInt::new(&n.to_string(), span);
        quote!(const VERSION: u32 = #n;)
    });
    let migrate = if stub || agent.migrate_from.is_none() {
        None
    } else {
        let private = quote!(#krate::__private);
        let from = Ident::new("from", Span::mixed_site());
        let state = Ident::new("state", Span::mixed_site());
        Some(quote! {
            fn migrate(
                #from: u32,
                #state: #private::serde_json::Value,
            ) -> #private::Option<#private::core::result::Result<#private::serde_json::Value, #krate::__private::MigrationError>> {
                #private::migrate::<Self>(#from, #state)
            }
            fn older_versions() -> #private::Vec<#krate::__private::OlderVersion> {
                #private::older_versions::<Self>()
            }
        })
    };
    let on_error = if stub { None } else { on_error_fn(agent) };
    let stored = stored_as_json(agent);
    // Spanned at the enum's name: a missing serde derive is reported there.
    let stored_impl = quote_spanned! {ident.span()=>
        #[automatically_derived]
        impl #krate::__private::StoredAsJson for #ident {}
    };
    // Which constructor builds the agent's runner: the builder with `.router(..)` when a
    // state is routed by an LLM, else `Runner::new` (or the builder without it). The stub implements both, so a
    // mistake elsewhere is not reported again at the runner. Both are under the `Agent`
    // impl's own bound, so an enum without the serde derives is reported once per derive,
    // not again here.
    let routed = agent.states.iter().any(|s| s.llm.is_some());
    let by_code = quote! {
        #[automatically_derived]
        impl #krate::__private::RoutedByCode for #ident #stored {}
    };
    let by_llm = quote! {
        #[automatically_derived]
        impl #krate::__private::RoutedByLlm for #ident #stored {}
    };
    let routing = match (stub, routed) {
        (true, _) => quote!(#by_code #by_llm),
        (false, true) => by_llm,
        (false, false) => by_code,
    };
    quote! {
        #stored_impl
        #routing
        #[automatically_derived]
        impl #krate::__private::Agent for #ident #stored {
            const NAME: &'static str = #name;
            #version
            fn graph() -> &'static #krate::__private::GraphDescription {
                #graph
            }
            fn state_name(&self) -> &'static str {
                match #scrutinee {
                    #(#arms)*
                }
            }
            #migrate
            #on_error
        }
    }
}

/// `Agent::__on_error`: for the states with `on_error = T`, the value of `T` built from the
/// failure; `None` from the trait's default when no state has one. `T` has no field or one
/// (checked), built through `FromFailure`, spanned at the field's type so that a type that
/// cannot hold a failure is reported there.
fn on_error_fn(agent: &Agent) -> Option<TokenStream> {
    let krate = &agent.krate;
    let private = quote!(#krate::__private);
    let from = Ident::new("from", Span::mixed_site());
    let failure = Ident::new("failure", Span::mixed_site());
    // The failing states by target, in the order the targets are first named: one arm each.
    let mut by_target: Vec<(&State, Vec<syn::LitStr>)> = Vec::new();
    for s in &agent.states {
        let Some(target) = s.on_error.as_ref().and_then(|t| agent.state(t)) else {
            continue;
        };
        let name = lit(&s.name());
        match by_target.iter_mut().find(|(t, _)| std::ptr::eq(*t, target)) {
            Some((_, from)) => from.push(name),
            None => by_target.push((target, vec![name])),
        }
    }
    if by_target.is_empty() {
        return None;
    }
    let build = |ty: &Type| quote_spanned!(ty.span()=> <#ty as #private::FromFailure>::from_failure(#failure));
    let arms = by_target.iter().map(|(target, names)| {
        let v = &target.ident;
        let value = match &target.fields {
            Fields::Unit => quote!(Self::#v),
            Fields::Unnamed(f) => {
                let fields = f.unnamed.iter().map(|f| build(&f.ty));
                quote!(Self::#v(#(#fields),*))
            }
            Fields::Named(f) => {
                let fields = f.named.iter().map(|f| {
                    let ident = &f.ident;
                    let value = build(&f.ty);
                    quote!(#ident: #value)
                });
                quote!(Self::#v { #(#fields),* })
            }
        };
        quote!(#(#names)|* => #private::Option::Some(#value),)
    });
    let arms: Vec<TokenStream> = arms.collect();
    let failure_param = if by_target.iter().any(|(t, _)| !t.fields.is_empty()) {
        quote!(#failure)
    } else {
        quote!(_)
    };
    Some(quote! {
        fn __on_error(
            #from: &str,
            #failure_param: #krate::__private::Failure,
        ) -> #private::Option<Self> {
            match #from {
                #(#arms)*
                _ => #private::Option::None,
            }
        }
    })
}

/// `impl AgentFacts`: the hybrid tools and waits of this version, for the checks of a
/// version migrating from it. Emitted with the stubs too, so that a later version does not
/// also report this one as "not an agent".
pub(crate) fn facts_impl(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let ident = &agent.ident;
    let hybrid = agent
        .tools
        .iter()
        .filter(|t| t.kind == Kind::Hybrid)
        .map(|t| {
            let tool = lit(&names::unraw(&t.ident));
            let comp = lit(&t.compensate.as_ref().map(names::unraw).unwrap_or_default());
            quote!((#tool, #comp))
        });
    let waits = agent.states.iter().filter_map(|s| {
        let (_, signal) = s.wait.as_ref()?;
        let state = lit(&s.name());
        let signal = lit(signal);
        Some(quote!((#state, #signal)))
    });
    let stored = stored_as_json(agent);
    quote! {
        #[automatically_derived]
        impl #krate::__private::AgentFacts for #ident #stored {
            const HYBRID_TOOLS: &'static [(&'static str, &'static str)] = &[#(#hybrid),*];
            const WAITS: &'static [(&'static str, &'static str)] = &[#(#waits),*];
        }
    }
}

/// For `migrate_from(Old, with = map, skip_signal(...))`: `impl MigratesFrom` (where a
/// source that is not an agent, and a mapping of the wrong type, are reported at the
/// user's tokens) and the const checks, each panicking at compile time with its message.
pub(crate) fn migration(agent: &Agent) -> TokenStream {
    let Some((key, m)) = &agent.migrate_from else {
        return TokenStream::new();
    };
    let krate = &agent.krate;
    let private = quote!(#krate::__private);
    let ident = &agent.ident;
    let source = &m.source;
    let with = &m.with;
    let source_span = source.span();
    let with_span = with.span();
    let old_text = lit(&crate::attr::path_text(source));
    let stored = stored_as_json(agent);
    // Every token at the user's: a failed const evaluation is reported where its
    // expression is, and a token of the derive's own would put it on `#[derive(Agent)]`.
    let check = |span: Span, call: TokenStream| {
        respan(quote!(const _: () = #private::fail_if(#call);), span)
    };
    // At the source's last segment, the enum's name (a path's span is its first token).
    let source_name = source
        .segments
        .last()
        .map_or(source_span, |s| s.ident.span());
    let source_check = check(
        source_name,
        quote!(#private::check_source::<#ident>(#old_text)),
    );
    let hybrid_check = check(*key, quote!(#private::check_hybrid_kept::<#ident>()));
    let compensation_check = check(*key, quote!(#private::check_compensations_kept::<#ident>()));
    let signal_check = check(*key, quote!(#private::check_signals_kept::<#ident>()));
    let skipped = &m.skip_signals;
    let skip_checks = skipped
        .iter()
        .map(|s| check(s.span(), quote!(#private::check_skip_signal::<#ident>(#s))));
    let old_type = quote_spanned!(source_span=> type Old = #source;);
    let map = quote_spanned!(with_span=> const MAP: fn(Self::Old) -> Self = #with;);
    quote! {
        #[automatically_derived]
        impl #private::MigratesFrom for #ident #stored {
            #old_type
            #map
            const SKIPPED_SIGNALS: &'static [&'static str] = &[#(#skipped),*];
        }
        #source_check
        #hybrid_check
        #compensation_check
        #signal_check
        #(#skip_checks)*
    }
}

fn kind_value(agent: &Agent, kind: Kind) -> TokenStream {
    let krate = &agent.krate;
    match kind {
        Kind::Read => quote!(#krate::__private::ToolKind::Read),
        Kind::Write => quote!(#krate::__private::ToolKind::Write),
        Kind::Hybrid => quote!(#krate::__private::ToolKind::Hybrid),
    }
}

pub(crate) fn kind_type(krate: &syn::Path, kind: Kind) -> TokenStream {
    match kind {
        Kind::Read => quote!(#krate::__private::kind::Read),
        Kind::Write => quote!(#krate::__private::kind::Write),
        Kind::Hybrid => quote!(#krate::__private::kind::Hybrid),
    }
}

/// The enum's visibility, seen from inside the generated module (one level down), so the
/// state structs are exactly as visible as the enum (a more visible one could not name the
/// enum as its `State::Agent`).
fn inner_vis(vis: &Visibility) -> TokenStream {
    match vis {
        Visibility::Public(_) => quote!(pub),
        Visibility::Inherited => quote!(pub(super)),
        Visibility::Restricted(r) => {
            let path = &r.path;
            let first = path.segments.first().map(|s| s.ident.to_string());
            match first.as_deref() {
                Some("crate") => quote!(pub(in #path)),
                Some("self") if path.segments.len() == 1 => quote!(pub(super)),
                Some("self") => {
                    let rest = path.segments.iter().skip(1);
                    quote!(pub(in super #(::#rest)*))
                }
                _ => quote!(pub(in super::#path)),
            }
        }
    }
}

/// The module of state structs and route enums, and the `State` impls.
pub(crate) fn markers(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let vis = &agent.vis;
    let module = &agent.module;
    let agent_name = &agent.name;
    let module_doc = format!(
        "The states of agent `{agent_name}`, one struct each, generated by `#[derive(Agent)]`."
    );
    let inner = inner_vis(vis);
    let routes = agent.states.iter().filter(|s| s.llm.is_some()).map(|s| {
        let route = route_ident(s);
        let v = &s.ident;
        // The router chooses among `to(...)` only; `on_error` is taken by the runner on failure.
        let succ = route_successors(agent, s);
        let typed = typed_successors(agent, s);
        let doc = format!(
            "The successors the LLM may choose in state `{}` of agent `{agent_name}`.",
            s.name()
        );
        let args_trait = route_args_ident(s);
        let variants = succ.iter().map(|t| {
            if s.argument(t).is_some() {
                let doc = format!(
                    "Move to `{}`, with the argument the model gave (checked against its schema, then deserialized).",
                    names::unraw(t)
                );
                quote!(#[doc = #doc] #t(<#v as #args_trait>::#t),)
            } else {
                let doc = format!("Move to `{}`.", names::unraw(t));
                quote!(#[doc = #doc] #t,)
            }
        });
        // A route that carries arguments is moved into the handler: its arguments' types
        // need not be `Copy`, `Clone` or comparable (its `Debug` is written below).
        let derives = if typed.is_empty() {
            quote!(#[derive(Debug, Clone, Copy, PartialEq, Eq)])
        } else {
            TokenStream::new()
        };
        let args = if typed.is_empty() {
            TokenStream::new()
        } else {
            let assoc = typed.iter().map(|(t, _)| quote!(type #t;));
            let doc = format!(
                "The arguments of the typed transitions of state `{}`, by target.",
                s.name()
            );
            quote! {
                #[doc = #doc]
                #[doc(hidden)]
                #inner trait #args_trait {
                    #(#assoc)*
                }
            }
        };
        quote! {
            #[doc = #doc]
            #derives
            #inner enum #route {
                #(#variants)*
            }
            #args
        }
    });
    let route_impls = agent.states.iter().filter(|s| s.llm.is_some()).map(|s| {
        let route = route_ident(s);
        let private = quote!(#krate::__private);
        let arguments = Ident::new("arguments", Span::mixed_site());
        let arms = route_successors(agent, s).into_iter().map(|t| {
            let n = lit(&names::unraw(t));
            if let Some(a) = s.argument(t) {
                let ty = argument_type(agent, s, t, a.ty.span());
                let decode = quote_spanned!(a.ty.span()=> <#ty as #private::ArgumentType>::decode);
                quote!(#n => #private::Option::Some(#decode(#arguments).map(Self::#t)),)
            } else {
                quote!(#n => #private::Option::Some(#private::core::result::Result::Ok(Self::#t)),)
            }
        });
        let typed = typed_successors(agent, s);
        let extra = if typed.is_empty() {
            TokenStream::new()
        } else {
            let m = marker(agent, s);
            let args_trait = route_args_ident(s);
            let assoc = typed.iter().map(|(t, a)| {
                let ty = &a.ty;
                quote_spanned!(ty.span()=> type #t = #ty;)
            });
            let debug_arms = route_successors(agent, s).into_iter().map(|t| {
                if s.argument(t).is_some() {
                    let text = lit(&format!("{}(..)", names::unraw(t)));
                    quote!(Self::#t(..) => f.write_str(#text),)
                } else {
                    let text = lit(&names::unraw(t));
                    quote!(Self::#t => f.write_str(#text),)
                }
            });
            quote! {
                #[automatically_derived]
                impl #module::#args_trait for #m {
                    #(#assoc)*
                }
                // The route without its arguments, which need not be `Debug` (they are in
                // the journal's decision record).
                #[automatically_derived]
                impl #private::core::fmt::Debug for #module::#route {
                    fn fmt(&self, f: &mut #private::core::fmt::Formatter<'_>) -> #private::core::fmt::Result {
                        match self {
                            #(#debug_arms)*
                        }
                    }
                }
            }
        };
        quote! {
            #extra
            #[automatically_derived]
            impl #private::RouteChoice for #module::#route {
                fn from_choice(
                    name: &str,
                    #arguments: &#private::serde_json::Value,
                ) -> #private::Option<#private::core::result::Result<Self, #private::String>> {
                    match name {
                        #(#arms)*
                        _ => #private::Option::None,
                    }
                }
            }
        }
    });
    let named_inside = crate::named::inside(agent, &inner);
    let named_outside = crate::named::outside(agent);
    quote! {
        #[doc = #module_doc]
        #[allow(dead_code)]
        #vis mod #module {
            #named_inside
            #(#routes)*
        }
        #named_outside
        #(#route_impls)*
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
            ) -> impl #krate::__private::core::future::Future<Output = #krate::__private::StepResult<#m>>
                   + #krate::__private::core::marker::Send;
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
            #krate::__private::core::marker::Send + #krate::__private::core::marker::Sync + 'static
        {
            #(#methods)*
        }
    }
}

/// `impl<H: CheckoutHandlers> Handle<H> for Checkout`.
pub(crate) fn handle_impl(agent: &Agent, stub: bool) -> TokenStream {
    let krate = &agent.krate;
    let ident = &agent.ident;
    let trait_ident = &agent.handlers;
    let module = &agent.module;
    let private = quote!(#krate::__private);
    // Locals of the generated fn, invisible to (and unaffected by) names in the user's scope.
    let handlers = Ident::new("handlers", Span::mixed_site());
    let io = Ident::new("io", Span::mixed_site());
    let next = Ident::new("next", Span::mixed_site());
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
                return quote!(Self::#v { .. } => #private::core::result::Result::Err(#private::terminal(#n)),);
            }
            let method = method_ident(s);
            let m = marker(agent, s);
            let bindings: Vec<Ident> = (0..s.fields.len())
                .map(|i| Ident::new(&format!("f{i}"), Span::mixed_site()))
                .collect();
            let (pattern, state) = match &s.fields {
                Fields::Named(named) => {
                    let f: Vec<&Ident> = named.named.iter().filter_map(|f| f.ident.as_ref()).collect();
                    (
                        quote!(Self::#v { #(#f: #bindings),* }),
                        quote!(#m { #(#f: #bindings),* }),
                    )
                }
                Fields::Unnamed(_) => (
                    quote!(Self::#v(#(#bindings),*)),
                    quote!(#m(#(#bindings),*)),
                ),
                Fields::Unit => (quote!(Self::#v), quote!(#m)),
            };
            let route = s.llm.map(|_| {
                let r = route_ident(s);
                quote!(#private::route::<#module::#r>(#io, #n)?,)
            });
            let wake = s.wait.as_ref().map(|_| quote!(#private::wake(#io, #n)?,));
            quote! {
                #pattern => {
                    let #next = <H as #trait_ident>::#method(
                        #handlers,
                        #krate::__private::Ctx::<'_, #m>::__new(#io),
                        #route
                        #wake
                        #state,
                    )
                    .await?;
                    #private::core::result::Result::Ok(#next.__into_state())
                }
            }
        });
        quote! {
            #private::Box::pin(async move {
                match self {
                    #(#arms)*
                }
            })
        }
    };
    quote! {
        #[automatically_derived]
        impl<H: #trait_ident> #krate::__private::Handle<H> for #ident #stored {
            fn handle<'a>(
                self,
                #handlers: &'a H,
                #io: &'a dyn #private::StepIo,
            ) -> #private::BoxFuture<'a, #private::core::result::Result<Self, #krate::__private::StepError>> {
                #body
            }
        }
    }
}

/// `AllowsTool` and `AllowsTransition`, each through a per-state trait whose diagnostic
/// names the state, the agent and what is legal there.
pub(crate) fn allows(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let agent_name = &agent.name;
    let per_state = agent.states.iter().map(|s| {
        let m = marker(agent, s);
        let name = s.name();
        let tools_trait = format_ident!("__AgentToolsOf{}", name);
        let moves_trait = format_ident!("__AgentSuccessorsOf{}", name);
        let tool_msg = format!("tool `{{Self}}` is not allowed in state `{name}` of agent `{agent_name}`");
        let tool_label = format!("not listed in the `tools(...)` of `{name}`");
        let tool_note = if s.tools.is_empty() {
            format!("no tools are allowed in `{name}`")
        } else {
            format!(
                "tools allowed in `{name}`: {}",
                names::list(s.tools.iter().map(names::unraw).collect::<Vec<_>>().iter().map(String::as_str))
            )
        };
        let tool_help = format!("add the tool to `#[agent(tools(...))]` of `{name}`, or call it from a state that lists it");
        let tool_impls = s.tools.iter().filter_map(|t| {
            let decl = agent.tool(t)?;
            let path = &decl.path;
            Some(quote!(impl #tools_trait for #path {}))
        });
        let children_trait = format_ident!("__AgentChildrenOf{}", name);
        let child_msg = format!("agent `{{Self}}` is not a child of state `{name}` of agent `{agent_name}`");
        let child_label = format!("not listed in the `children(...)` of `{name}`");
        let child_texts: Vec<String> = s.children.iter().map(crate::attr::path_text).collect();
        let child_note = if s.children.is_empty() {
            format!("`{name}` starts no child agents")
        } else {
            format!(
                "child agents of `{name}`: {}",
                names::list(child_texts.iter().map(String::as_str))
            )
        };
        let child_help = format!("add the agent to `#[agent(children(...))]` of `{name}`, or start it from a state that lists it");
        let child_impls = s.children.iter().map(|c| quote!(impl #children_trait for #c {}));
        let succ = s.successors();
        let move_msg = format!("state `{name}` of agent `{agent_name}` cannot move to `{{Self}}`");
        let move_label = format!("not a successor of `{name}`");
        let move_note = if succ.is_empty() {
            format!("`{name}` has no successors")
        } else {
            format!(
                "`{name}` may move to: {}",
                names::list(succ.iter().map(|t| names::unraw(t)).collect::<Vec<_>>().iter().map(String::as_str))
            )
        };
        let move_help = format!("add the target to `#[agent(to(...))]` of `{name}`");
        let module = &agent.module;
        let move_impls = succ.iter().filter(|t| agent.state(t).is_some()).map(|t| {
            quote!(impl #moves_trait for #module::#t {})
        });
        quote! {
            #[diagnostic::on_unimplemented(
                message = #tool_msg,
                label = #tool_label,
                note = #tool_note,
                note = #tool_help
            )]
            pub trait #tools_trait {}
            #(#tool_impls)*
            // A second impl, so that rustc never infers `T` from a lone legal tool.
            #[diagnostic::do_not_recommend]
            impl #tools_trait for #krate::__private::Unreachable {}
            #[automatically_derived]
            impl<T: #krate::__private::Tool + #tools_trait> #krate::__private::AllowsTool<T> for #m {}

            #[diagnostic::on_unimplemented(
                message = #child_msg,
                label = #child_label,
                note = #child_note,
                note = #child_help
            )]
            pub trait #children_trait {}
            #(#child_impls)*
            // A second impl, so that rustc never infers the child from a lone declared one.
            #[diagnostic::do_not_recommend]
            impl #children_trait for #krate::__private::Unreachable {}
            #[automatically_derived]
            impl<C: #krate::__private::Agent + #children_trait> #krate::__private::AllowsChild<C> for #m {}

            #[diagnostic::on_unimplemented(
                message = #move_msg,
                label = #move_label,
                note = #move_note,
                note = #move_help
            )]
            pub trait #moves_trait {}
            #(#move_impls)*
            // A second impl, so that rustc never infers the target from a lone successor.
            #[diagnostic::do_not_recommend]
            impl #moves_trait for #krate::__private::Unreachable {}
            #[automatically_derived]
            impl<T: #krate::__private::State + #moves_trait> #krate::__private::AllowsTransition<T> for #m {}
        }
    });
    quote!(#(#per_state)*)
}

/// Spanned checks that each declared tool is a `Tool` of the declared kind, named as
/// declared, and that each hybrid tool's `Compensate` impl names the declared compensation.
pub(crate) fn tool_checks(agent: &Agent) -> TokenStream {
    if agent.tools.is_empty() {
        return TokenStream::new();
    }
    let krate = &agent.krate;
    let agent_name = &agent.name;
    let kinds = Kind::ALL.map(|k| {
        let tr = format_ident!("__AgentDeclared{}", capitalize(k.as_str()));
        let f = format_ident!("__agent_declared_{}", k.as_str());
        let ty = kind_type(krate, k);
        let msg = format!(
            "tool `{{T}}` is declared `{}` on agent `{agent_name}` but its `Tool` impl has `Kind = {{Self}}`",
            k.as_str()
        );
        let note = format!(
            "make the declaration and the tool agree: `#[tool(kind = {})]`, or declare it under its own kind in `#[agent(tools(...))]`",
            k.as_str()
        );
        quote! {
            #[diagnostic::on_unimplemented(message = #msg, label = "declared here", note = #note)]
            pub trait #tr<T> {}
            impl<T> #tr<T> for #ty {}
            const fn #f<T: #krate::__private::Tool>() where <T as #krate::__private::Tool>::Kind: #tr<T> {}
        }
    });
    let comp_msg = format!(
        "hybrid tool `{{T}}` is undone by `{{Self}}` in its `Compensate` impl, but agent `{agent_name}` declares `compensate = {{C}}`"
    );
    // `Tool::NAME` must be the declared name: the runner journals and authorizes calls by it.
    let name_msg = format!(
        "tool `{{T}}` is declared on agent `{agent_name}`, but its `Tool::NAME` is not its type name"
    );
    let names = agent.tools.iter().map(|t| {
        let path = &t.path;
        let name_lit = lit(&names::unraw(&t.ident));
        quote_spanned! {path.span()=>
            let _ = __agent_named::<
                #path,
                __AgentNameCheck<{ #krate::__private::str_eq(<#path as #krate::__private::Tool>::NAME, #name_lit) }>,
            >;
        }
    });
    let checks = agent.tools.iter().map(|t| {
        let path = &t.path;
        let span = path.span();
        let f = format_ident!("__agent_declared_{}", t.kind.as_str(), span = span);
        let comp = t.compensate.as_ref().and_then(|c| {
            let decl = agent.tool(c)?;
            let cpath = &decl.path;
            Some(quote_spanned!(c.span()=> let _ = __agent_compensated_by::<#path, #cpath>;))
        });
        quote_spanned! {span=>
            let _ = #f::<#path>;
            #comp
        }
    });
    quote! {
        #(#kinds)*
        #[diagnostic::on_unimplemented(message = #comp_msg, label = "declared here", note = "make `type With` of the `Compensate` impl and `compensate = ...` in `#[agent(tools(...))]` name the same tool")]
        pub trait __AgentCompensatedBy<T, C> {}
        impl<T, C> __AgentCompensatedBy<T, C> for C {}
        const fn __agent_compensated_by<T: #krate::__private::Compensate, C>()
        where
            <T as #krate::__private::Compensate>::With: __AgentCompensatedBy<T, C>,
        {
        }
        pub struct __AgentNameCheck<const SAME: bool>;
        #[diagnostic::on_unimplemented(
            message = #name_msg,
            label = "declared here",
            note = "the runner journals and authorizes calls by `Tool::NAME`; `#[derive(Tool)]` uses the type's name, and a hand-written impl must too"
        )]
        pub trait __AgentNamed<T> {}
        impl<T> __AgentNamed<T> for __AgentNameCheck<true> {}
        const fn __agent_named<T, C: __AgentNamed<T>>() {}
        const _: () = {
            #(#checks)*
            #(#names)*
        };
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
