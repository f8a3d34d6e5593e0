//! `impl Agent`: the graph, each state's facts, and the failure mapped by `on_error` and
//! `on_budget`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Fields, Ident, Type};

use super::{argument_type, lit, private, some, stored_as_json, typed_successors};
use crate::ast::{Agent, FailureEdge, State};
use crate::attr::{Budget, Kind};
use crate::names;

/// `impl Agent`. With `stub`, `graph()` is never reached (the build already failed).
pub(crate) fn agent_impl(agent: &Agent, stub: bool) -> TokenStream {
    let private = private();
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
        quote!(#private::core::unreachable!())
    } else {
        let dag = agent.dag;
        let max_steps = option(agent.max_steps);
        let budget = option(agent.budget.map(budget_value));
        let tools = agent.tools.iter().map(|t| {
            let n = lit(&names::unraw(&t.ident));
            let kind = kind_value(t.kind);
            let comp = option(t.compensate.as_ref().map(|c| lit(&names::unraw(c))));
            quote!(#private::ToolSpec { name: #n, kind: #kind, compensation: #comp })
        });
        let states = agent.states.iter().map(|s| state_spec(agent, s));
        quote! {
            static GRAPH: #private::OnceLock<#private::GraphDescription> =
                #private::OnceLock::new();
            GRAPH.get_or_init(|| {
                #private::graph(&#private::AgentSpec {
                    name: #name,
                    version: <Self as #private::Agent>::VERSION,
                    dag: #dag,
                    max_steps: #max_steps,
                    budget: #budget,
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
        let from = Ident::new("from", Span::mixed_site());
        let state = Ident::new("state", Span::mixed_site());
        Some(quote! {
            fn migrate(
                #from: u32,
                #state: #private::serde_json::Value,
            ) -> #private::Option<#private::Result<#private::serde_json::Value, #private::MigrationError>> {
                #private::migrate::<Self>(#from, #state)
            }
            fn older_versions() -> #private::Vec<#private::OlderVersion> {
                #private::older_versions::<Self>()
            }
        })
    };
    let [on_error, on_budget] =
        FailureEdge::ALL.map(|edge| if stub { None } else { failure_fn(agent, edge) });
    let children = if stub { None } else { children_fn(agent) };
    let timer_due = if stub { None } else { timer_due_fn(agent) };
    let stored = stored_as_json(agent);
    // Spanned at the enum's name: a missing serde derive is reported there.
    let stored_impl = quote_spanned! {ident.span()=>
        #[automatically_derived]
        impl #private::StoredAsJson for #ident {}
    };
    // Which constructor builds the agent's runner: the builder with `.router(..)` when a
    // state is routed by an LLM, else `Runner::new` (or the builder without it). The stub implements both, so a
    // mistake elsewhere is not reported again at the runner. Both are under the `Agent`
    // impl's own bound, so an enum without the serde derives is reported once per derive,
    // not again here.
    let routed = agent.states.iter().any(|s| s.llm.is_some());
    let by_code = quote! {
        #[automatically_derived]
        impl #private::RoutedByCode for #ident #stored {}
    };
    let by_llm = quote! {
        #[automatically_derived]
        impl #private::RoutedByLlm for #ident #stored {}
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
        impl #private::Agent for #ident #stored {
            const NAME: &'static str = #name;
            #version
            fn graph() -> &'static #private::GraphDescription {
                #graph
            }
            fn state_name(&self) -> &'static str {
                match #scrutinee {
                    #(#arms)*
                }
            }
            #migrate
            #on_error
            #on_budget
            #timer_due
            #children
        }
    }
}

/// `Agent::__children`: every `children(...)` entry, for the runner's start-up check of
/// cycles through `dag` agents. A constant of function pointers: it reads nothing of the
/// children, so agents that list each other compile.
fn children_fn(agent: &Agent) -> Option<TokenStream> {
    let private = private();
    let links: Vec<TokenStream> = agent
        .states
        .iter()
        .flat_map(|s| {
            let state = lit(&s.name());
            let private = &private;
            s.children.iter().map(move |c| {
                quote! {
                    #private::ChildLink {
                        state: #state,
                        graph: <#c as #private::Agent>::graph,
                        children: <#c as #private::Agent>::__children,
                    }
                }
            })
        })
        .collect();
    if links.is_empty() {
        return None;
    }
    Some(quote! {
        fn __children() -> &'static [#private::ChildLink] {
            const LINKS: &[#private::ChildLink] = &[#(#links),*];
            LINKS
        }
    })
}

/// `Agent::__on_error` (or `__on_budget`): for the states with `on_error = T` (`on_budget = T`),
/// the value of `T` built from the failure; `None` from the trait's default when no state has
/// one. `T` has no field or one (checked), built through `FromFailure`, spanned at the field's
/// type so that a type that cannot hold a failure is reported there.
fn failure_fn(agent: &Agent, edge: FailureEdge) -> Option<TokenStream> {
    let private = private();
    let from = Ident::new("from", Span::mixed_site());
    let failure = Ident::new("failure", Span::mixed_site());
    // The failing states by target, in the order the targets are first named: one arm each.
    let mut by_target: Vec<(&State, Vec<syn::LitStr>)> = Vec::new();
    for s in &agent.states {
        let Some(target) = s.failure_target(edge).and_then(|t| agent.state(t)) else {
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
    let method = Ident::new(&format!("__{}", edge.key()), Span::call_site());
    Some(quote! {
        fn #method(
            #from: &str,
            #failure_param: #private::Failure,
        ) -> #private::Option<Self> {
            match #from {
                #(#arms)*
                _ => #private::Option::None,
            }
        }
    })
}

/// `Agent::__timer_due`: for the states with `timer = field`, when the field says the timer
/// is due; `None` from the trait's default when no state has one. The call is spanned at
/// the field's name in the attribute, so that a field whose type is not a `TimerField` is
/// reported there, with the types it can be.
fn timer_due_fn(agent: &Agent) -> Option<TokenStream> {
    let private = private();
    let value = Ident::new("timer", Span::mixed_site());
    let arms: Vec<TokenStream> = agent
        .states
        .iter()
        .filter_map(|s| {
            let (_, named) = s.timer.as_ref()?;
            let Fields::Named(fields) = &s.fields else {
                return None;
            };
            let field = fields
                .named
                .iter()
                .find(|f| f.ident.as_ref().is_some_and(|i| names::same(i, named)))?;
            let (ident, ty, v) = (&field.ident, &field.ty, &s.ident);
            let due = quote_spanned!(named.span()=> <#ty as #private::TimerField>::due(#value));
            Some(quote!(Self::#v { #ident: #value, .. } => #due,))
        })
        .collect();
    if arms.is_empty() {
        return None;
    }
    Some(quote! {
        // Every state may have a timer: then the catch-all arm is unreachable.
        #[allow(unreachable_patterns)]
        fn __timer_due(&self) -> #private::Option<#private::Due> {
            match self {
                #(#arms)*
                _ => #private::Option::None,
            }
        }
    })
}

/// A state as the core's `StateSpec`: the fields its attribute sets, the rest from
/// `StateSpec::DEFAULT`.
fn state_spec(agent: &Agent, s: &State) -> TokenStream {
    let private = private();
    let n = lit(&s.name());
    let mut fields = vec![quote!(name: #n)];
    let flags = [
        (s.initial.is_some(), quote!(initial)),
        (s.terminal.is_some(), quote!(terminal)),
        (s.compensate.is_some(), quote!(compensate)),
        (s.llm.is_some(), quote!(llm)),
    ];
    fields.extend(
        flags
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| quote!(#f: true)),
    );
    let mut set = |field: &str, value: Option<TokenStream>| {
        if let Some(value) = value {
            let field = Ident::new(field, Span::call_site());
            fields.push(quote!(#field: #value));
        }
    };
    set("wait", s.wait.as_ref().map(|w| some(lit(&w.1))));
    set("wait_timeout_ms", s.wait_timeout_ms.map(|w| some(w.1)));
    set("timer_ms", s.timer_ms.map(|t| some(t.1)));
    set(
        "timer_field",
        s.timer.as_ref().map(|t| some(lit(&names::unraw(&t.1)))),
    );
    set(
        "wait_payload",
        s.wait_payload.as_ref().map(|(span, ty)| {
            some(quote_spanned!(*span=> <#ty as #private::PayloadSchema>::schema))
        }),
    );
    let names = |list: &[Ident]| {
        let names = list.iter().map(|t| lit(&names::unraw(t)));
        (!list.is_empty()).then(|| quote!(&[#(#names),*]))
    };
    set("to", names(&s.to));
    set(
        "on_error",
        s.on_error.as_ref().map(|t| some(lit(&names::unraw(t)))),
    );
    set(
        "on_budget",
        s.on_budget.as_ref().map(|t| some(lit(&names::unraw(t)))),
    );
    set("budget", s.budget.map(|b| some(budget_value(b.1))));
    set("tools", names(&s.tools));
    set("max_tool_calls", s.max_tool_calls.map(|m| some(m.1)));
    set("tools_per_answer", s.tools_per_answer.map(|m| some(m.1)));
    set("timeout_ms", s.timeout_ms.map(|m| some(m.1)));
    set(
        "decision_timeout_ms",
        s.decision_timeout_ms.map(|m| some(m.1)),
    );
    let children = s
        .children
        .iter()
        .map(|c| quote!(<#c as #private::Agent>::NAME));
    set(
        "children",
        (!s.children.is_empty()).then(|| quote!(&[#(#children),*])),
    );
    set(
        "children_outlive",
        s.children_outlive.is_some().then(|| quote!(true)),
    );
    let data = s.data();
    set(
        "data",
        (!data.is_empty()).then(|| lit(&data).into_token_stream()),
    );
    let arguments: Vec<TokenStream> = typed_successors(agent, s)
        .into_iter()
        .map(|(t, a)| {
            let to = lit(&names::unraw(t));
            let type_name = lit(&a.ty.to_token_stream().to_string());
            let span = a.ty.span();
            let ty = argument_type(agent, s, t, span);
            quote_spanned! {span=>
                #private::ArgumentSpec {
                    to: #to,
                    type_name: #type_name,
                    schema: <#ty as #private::ArgumentSchema>::schema,
                    check: <#ty as #private::ArgumentType>::check,
                }
            }
        })
        .collect();
    set(
        "arguments",
        (!arguments.is_empty()).then(|| quote!(&[#(#arguments),*])),
    );
    quote!(#private::StateSpec { #(#fields,)* ..#private::StateSpec::DEFAULT })
}

/// `None`, or `Some(v)`, inside the generated block.
fn option<T: quote::ToTokens>(v: Option<T>) -> TokenStream {
    let private = private();
    v.map_or_else(|| quote!(#private::Option::None), some)
}

/// A `budget(...)` as the core's `Budget`.
fn budget_value(budget: Budget) -> TokenStream {
    let private = private();
    let [tokens, cost_micros, asks, tool_calls] = [
        budget.tokens,
        budget.cost_micros,
        budget.asks,
        budget.tool_calls,
    ]
    .map(option);
    quote! {
        #private::Budget {
            tokens: #tokens, cost_micros: #cost_micros, asks: #asks, tool_calls: #tool_calls,
        }
    }
}

fn kind_value(kind: Kind) -> TokenStream {
    let private = private();
    match kind {
        Kind::Read => quote!(#private::ToolKind::Read),
        Kind::Write => quote!(#private::ToolKind::Write),
        Kind::Hybrid => quote!(#private::ToolKind::Hybrid),
    }
}
