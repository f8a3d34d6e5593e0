//! The agent's tools struct: `CheckoutTools` for `enum Checkout`, one public field per
//! declared tool (its name in snake case). `Runner::new` takes it through `ToolsFor`, so a
//! runner built without one of the agent's tools does not compile: rustc names the missing
//! field (the tool) and the struct (the agent).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use crate::ast::Agent;
use crate::attr::{Kind, ToolDecl};
use crate::names;

/// The struct's name: the enum's name with `Tools` appended.
pub(crate) fn ident(agent: &Agent) -> Ident {
    format_ident!("{}Tools", names::unraw(&agent.ident))
}

fn helper(private: &Ident, kind: Kind) -> TokenStream {
    if matches!(kind, Kind::Hybrid) {
        quote!(#private::HybridTool)
    } else {
        quote!(#private::PlainTool)
    }
}

/// The struct; and apart, for the generated block, its impls (`Debug`, `from_shared`,
/// `ToolsFor`). With `stub` (next to errors), impls without bounds, so the user's code that
/// builds it sees no follow-on errors.
pub(crate) fn toolset(agent: &Agent, stub: bool) -> (TokenStream, TokenStream) {
    let private = crate::expand::private();
    let vis = &agent.vis;
    let enum_ident = &agent.ident;
    let tools_ident = ident(agent);
    // A tool declared twice, or two whose names are one in snake case, are reported by the
    // checks; the stub declares the field once.
    let mut seen = std::collections::HashSet::new();
    let tools: Vec<&ToolDecl> = agent
        .tools
        .iter()
        .filter(|t| seen.insert(names::snake_case(&names::unraw(&t.ident))))
        .collect();
    let fields: Vec<Ident> = tools
        .iter()
        .map(|t| names::ident(&names::snake_case(&names::unraw(&t.ident)), t.ident.span()))
        .collect();
    let decls = tools.iter().zip(&fields).map(|(t, f)| {
        let path = &t.path;
        let doc = format!("`{}` ({}).", names::unraw(&t.ident), t.kind.as_str());
        quote!(#[doc = #doc] #vis #f: #path)
    });
    let doc = format!(
        "Every tool agent `{}` declares, one field each: what `Runner::new` (or `Runner::builder`) takes, so a runner cannot be built without one. Build it field by field, or with `from_shared`.",
        agent.name
    );
    let state = Ident::new("__S", Span::mixed_site());
    let (bounds, build, into_box) = if stub {
        (
            Vec::new(),
            quote!(let _ = shared; #private::core::unreachable!(
                "never run: the derive reported an error, so the crate does not compile"
            )),
            quote!(#private::ToolBox::new()),
        )
    } else {
        let bounds: Vec<TokenStream> = agent
            .tools
            .iter()
            .map(|t| {
                let path = &t.path;
                quote!(#path: #private::BuildTool<#state>)
            })
            .collect();
        let built = tools.iter().zip(&fields).map(|(t, f)| {
            let path = &t.path;
            quote!(#f: <#path as #private::BuildTool<#state>>::build_tool(shared))
        });
        let adds = tools.iter().zip(&fields).map(|(t, f)| {
            let helper = helper(&private, t.kind);
            quote!(let tools = #helper::add_to(self.#f, tools);)
        });
        (
            bounds,
            quote!(let _ = shared; Self { #(#built,)* }),
            quote!(let tools = #private::ToolBox::new(); #(#adds)* tools),
        )
    };
    let runnable = tools.iter().filter(|_| !stub).map(|t| {
        let path = &t.path;
        let helper = helper(&private, t.kind);
        quote!(for<'__a> #path: #helper)
    });
    let debug_fields = tools.iter().map(|t| names::unraw(&t.ident));
    let name_lit = tools_ident.to_string();
    let item = quote! {
        #[doc = #doc]
        #vis struct #tools_ident {
            #(#decls,)*
        }
    };
    let impls = quote! {
        #[automatically_derived]
        impl #private::Debug for #tools_ident {
            fn fmt(&self, f: &mut #private::Formatter<'_>) -> #private::FmtResult {
                f.debug_tuple(#name_lit)
                    #(.field(&#debug_fields))*
                    .finish()
            }
        }

        #[automatically_derived]
        #[allow(dead_code)]
        impl #tools_ident {
            /// Every tool, built from the application's shared state: each `#[tool_fn]`
            /// takes from it what its `Shared<T>` parameters ask for.
            #[must_use]
            #vis fn from_shared<#state>(shared: &#state) -> Self
            where
                #(#bounds,)*
            {
                #build
            }
        }

        // `for<'a>`: each tool's `Execute` is required where the struct is used (the
        // runner), not here: an agent's graph compiles before its tools run.
        #[automatically_derived]
        impl #private::ToolsFor<#enum_ident> for #tools_ident
        where
            #(#runnable,)*
        {
            fn into_tool_box(self) -> #private::ToolBox {
                #into_box
            }
        }
    };
    (item, impls)
}
