//! The rules checked in the user's crate: what each state allows, and each declared tool.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::{ident_at, kind_type, lit, marker};
use crate::ast::Agent;
use crate::attr::Kind;
use crate::names;

/// `AllowsTool` and `AllowsTransition`, each through a per-state trait whose diagnostic
/// names the state, the agent and what is legal there.
pub(crate) fn allows(agent: &Agent) -> TokenStream {
    let private = super::private();
    let agent_name = &agent.name;
    let declared_trait = format_ident!("__ToolsDeclaredOn{}", names::unraw(&agent.ident));
    let declared = declared_tools(agent, &declared_trait);
    // Which states start which children, for the note of a child started elsewhere.
    let parents: Vec<String> = agent
        .states
        .iter()
        .filter(|s| !s.children.is_empty())
        .map(|s| {
            let children: Vec<String> = s.children.iter().map(crate::attr::path_text).collect();
            format!(
                "`{}` starts {}",
                s.name(),
                names::list(children.iter().map(String::as_str))
            )
        })
        .collect();
    let parents_note = if parents.is_empty() {
        format!("no state of agent `{agent_name}` starts child agents")
    } else {
        format!("in agent `{agent_name}`, {}", parents.join("; "))
    };
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
        // Not recommended: the note lists the legal tools already, by the names the user wrote.
        let tool_impls: Vec<TokenStream> = s.tools.iter().filter_map(|t| {
            let decl = agent.tool(t)?;
            let path = &decl.path;
            Some(quote!(#[diagnostic::do_not_recommend] impl #tools_trait for #path {}))
        }).collect();
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
        let child_impls: Vec<TokenStream> = s
            .children
            .iter()
            .map(|c| quote!(#[diagnostic::do_not_recommend] impl #children_trait for #c {}))
            .collect();
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
        let move_impls: Vec<TokenStream> = succ.iter().filter(|t| agent.state(t).is_some()).map(|t| {
            quote!(#[diagnostic::do_not_recommend] impl #moves_trait for #module::#t {})
        }).collect();
        // A second impl, so that rustc never infers the type from a lone legal one (a tool,
        // a child, a successor): needed only where fewer than two are legal.
        let second = |tr: &syn::Ident, impls: &[TokenStream]| {
            (impls.len() < 2).then(|| {
                quote!(#[diagnostic::do_not_recommend] impl #tr for #private::Unreachable {})
            })
        };
        let (tool_second, child_second, move_second) = (
            second(&tools_trait, &tool_impls),
            second(&children_trait, &child_impls),
            second(&moves_trait, &move_impls),
        );
        // Spanned at the state's name: a call the state does not allow is then explained as
        // required for this state (the variant), not as a bound "introduced in this `derive`
        // macro" to be implemented by hand.
        let at = s.ident.span();
        // Every token at `at`, written so (rather than respanned) for the expansion's speed.
        let (p, dt, tt, ct, mt) = (
            ident_at(&private, at),
            ident_at(&declared_trait, at),
            ident_at(&tools_trait, at),
            ident_at(&children_trait, at),
            ident_at(&moves_trait, at),
        );
        let m = m.respanned(at);
        let allows_tool = quote_spanned! {at=>
            #[automatically_derived]
            impl<T: #p::Tool + #dt> #p::AllowsTool<T> for #m
            where
                <T as #dt>::Declared: #tt,
            {}
        };
        let allows_child = quote_spanned! {at=>
            #[automatically_derived]
            impl<C: #p::Agent + #ct> #p::AllowsChild<C> for #m {}
        };
        let allows_move = quote_spanned! {at=>
            #[automatically_derived]
            impl<T: #p::State + #mt> #p::AllowsTransition<T> for #m {}
        };
        quote! {
            #[diagnostic::on_unimplemented(
                message = #tool_msg,
                label = #tool_label,
                note = #tool_note,
                note = #tool_help
            )]
            pub trait #tools_trait {}
            #(#tool_impls)*
            #tool_second
            #allows_tool

            #[diagnostic::on_unimplemented(
                message = #child_msg,
                label = #child_label,
                note = #child_note,
                note = #parents_note,
                note = #child_help
            )]
            pub trait #children_trait {}
            #(#child_impls)*
            #child_second
            #allows_child

            #[diagnostic::on_unimplemented(
                message = #move_msg,
                label = #move_label,
                note = #move_note,
                note = #move_help
            )]
            pub trait #moves_trait {}
            #(#move_impls)*
            #move_second
            #allows_move
        }
    });
    quote!(#declared #(#per_state)*)
}

/// `__ToolsDeclaredOn{Agent}`, implemented for the tools the agent declares, each resolving to
/// itself: `AllowsTool` asks a state's trait about `<T as __ToolsDeclaredOn{Agent}>::Declared`, so
/// a tool the agent does not declare (one of another agent's, say) is reported as that,
/// and a declared tool that the state does not list by the state's trait.
fn declared_tools(agent: &Agent, tr: &syn::Ident) -> TokenStream {
    let private = super::private();
    let agent_name = &agent.name;
    let msg = format!("tool `{{Self}}` is not declared on agent `{agent_name}`");
    let label = format!("not in the `#[agent(tools(...))]` of `{agent_name}`");
    let declared: Vec<String> = agent.tools.iter().map(|t| names::unraw(&t.ident)).collect();
    let note = if declared.is_empty() {
        format!("agent `{agent_name}` declares no tools")
    } else {
        format!(
            "agent `{agent_name}` declares {}",
            names::list(declared.iter().map(String::as_str))
        )
    };
    let help = format!(
        "a handler calls the tools its own agent declares (a tool declared on another agent is not one of them): declare it on `{agent_name}`, `#[agent(tools(read(...)))]` (or `write`, `hybrid`), and list it in the `tools(...)` of the states that call it"
    );
    let mut seen = std::collections::HashSet::new();
    let impls = agent
        .tools
        .iter()
        .filter(|t| seen.insert(names::unraw(&t.ident)))
        .map(|t| {
            let path = &t.path;
            quote! {
                #[diagnostic::do_not_recommend]
                impl #tr for #path {
                    type Declared = Self;
                }
            }
        })
        .collect::<Vec<_>>();
    // A second impl, so that rustc never infers the tool from a lone declared one.
    let second = (impls.len() < 2).then(|| {
        quote! {
            #[diagnostic::do_not_recommend]
            impl #tr for #private::Unreachable {
                type Declared = Self;
            }
        }
    });
    quote! {
        #[diagnostic::on_unimplemented(message = #msg, label = #label, note = #note, note = #help)]
        pub trait #tr {
            type Declared;
        }
        #(#impls)*
        #second
    }
}

/// Spanned checks that each declared tool is a `Tool` of the declared kind, named as
/// declared, and that each hybrid tool's `Compensate` impl names the declared compensation.
pub(crate) fn tool_checks(agent: &Agent) -> TokenStream {
    if agent.tools.is_empty() {
        return TokenStream::new();
    }
    let private = super::private();
    let agent_name = &agent.name;
    let kinds = Kind::ALL.map(|k| {
        let tr = format_ident!("__AgentDeclared{}", capitalize(k.as_str()));
        let f = format_ident!("__agent_declared_{}", k.as_str());
        let ty = kind_type(&private, k);
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
            const fn #f<T: #private::Tool>() where <T as #private::Tool>::Kind: #tr<T> {}
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
                __AgentNameCheck<{ #private::str_eq(<#path as #private::Tool>::NAME, #name_lit) }>,
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
        const fn __agent_compensated_by<T: #private::Compensate, C>()
        where
            <T as #private::Compensate>::With: __AgentCompensatedBy<T, C>,
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
