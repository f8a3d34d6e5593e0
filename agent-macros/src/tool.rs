//! `#[derive(Tool)]`: `impl Tool` from `#[tool(kind = ..., input = ..., output = ...)]`, on
//! the stages of `#[derive(Agent)]`: the attribute syntax in `attr`, the errors in one
//! context, and a stub impl next to the errors (`fallback`) so that the user's `impl
//! Execute` and the agents that list the tool do not fail on top of the real mistake.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, Expr, Generics, Ident, Lit, Path, Type};

use crate::attr::{self, INPUT, KIND, Kind, OUTPUT, TOOL, ToolAttrs};
use crate::ctxt::{Ctxt, Message};
use crate::{expand, fallback, names};

/// A tool type and what its attribute declares.
pub(crate) struct Tool {
    pub(crate) ident: Ident,
    pub(crate) generics: Generics,
    pub(crate) krate: Path,
    /// The type's name without `r#`: the name agents list it by.
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) kind: Kind,
    pub(crate) input: Option<Type>,
    pub(crate) output: Option<Type>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) retries: Option<u32>,
    pub(crate) cache: Option<bool>,
    pub(crate) journal_with_commit: Option<bool>,
}

pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let attrs = attr::tool_attrs(&cx, &input.attrs);
    check(&cx, input, &attrs);
    let tool = model(input, attrs);
    match cx.into_compile_errors() {
        None => expand(&tool),
        Some(errors) => {
            let stub = fallback::tool_fallback(&tool);
            quote!(#errors #stub)
        }
    }
}

/// The required keys. A key that was written but malformed was reported already.
fn check(cx: &Ctxt, input: &DeriveInput, attrs: &ToolAttrs) {
    let missing: Vec<&str> = [
        (KIND, attrs.kind.is_given()),
        (INPUT, attrs.input.is_given()),
        (OUTPUT, attrs.output.is_given()),
    ]
    .into_iter()
    .filter_map(|(key, given)| (!given).then_some(key))
    .collect();
    if missing.is_empty() {
        return;
    }
    let what = if input.attrs.iter().any(|a| a.path().is_ident(TOOL)) {
        "`#[tool(...)]` is missing"
    } else {
        "`#[derive(Tool)]` needs `#[tool(...)]` with"
    };
    cx.error(
        input.ident.span(),
        Message::new(format!("{what} {}", names::list(missing)))
            .help("`#[tool(kind = read, input = MyInput, output = MyOutput)]`"),
    );
}

fn model(input: &DeriveInput, attrs: ToolAttrs) -> Tool {
    Tool {
        ident: input.ident.clone(),
        generics: input.generics.clone(),
        krate: attrs
            .krate
            .take()
            .unwrap_or_else(crate::krate::default_path),
        name: names::unraw(&input.ident),
        description: description(&input.attrs),
        kind: attrs
            .kind
            .get()
            .copied()
            .or(attrs.kind_guess)
            .unwrap_or(Kind::Read),
        input: attrs.input.take(),
        output: attrs.output.take(),
        timeout_ms: attrs.timeout_ms.take(),
        retries: attrs.retries.take(),
        cache: attrs.cache.take(),
        journal_with_commit: attrs.journal_with_commit.take(),
    }
}

/// The doc comment, one line per `///`, without the leading space.
pub(crate) fn description(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let Expr::Lit(e) = &nv.value
            && let Lit::Str(s) = &e.lit
        {
            let v = s.value();
            lines.push(v.strip_prefix(' ').map_or_else(|| v.clone(), str::to_owned));
        }
    }
    lines.join("\n").trim().to_owned()
}

/// `impl Tool`, with `body` after the name, description and kind.
pub(crate) fn tool_impl(tool: &Tool, body: &TokenStream) -> TokenStream {
    let krate = &tool.krate;
    let ident = &tool.ident;
    let name = &tool.name;
    let desc = &tool.description;
    let kind = expand::kind_type(&quote!(#krate::__private), tool.kind);
    let (impl_generics, ty_generics, where_clause) = tool.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::__private::Tool for #ident #ty_generics #where_clause {
            const NAME: &'static str = #name;
            const DESCRIPTION: &'static str = #desc;
            type Kind = #kind;
            #body
        }
    }
}

pub(crate) fn expand(tool: &Tool) -> TokenStream {
    let krate = &tool.krate;
    let in_ty = &tool.input;
    let out_ty = &tool.output;
    let mut fields = Vec::new();
    if let Some(ms) = tool.timeout_ms {
        fields.push(quote!(timeout: #krate::__private::core::time::Duration::from_millis(#ms)));
    }
    if let Some(n) = tool.retries {
        fields.push(quote!(retry: #krate::__private::RetryPolicy {
            max_attempts: #n,
            ..#krate::__private::core::default::Default::default()
        }));
    }
    if let Some(c) = tool.cache {
        fields.push(quote!(cache: #c));
    }
    if let Some(j) = tool.journal_with_commit {
        fields.push(quote!(journal_with_commit: #j));
    }
    // Fill the fields not given from `ToolPolicy`'s default (it has more than the
    // attributes set).
    let rest = Some(quote!(..#krate::__private::core::default::Default::default()));
    let policy = if fields.is_empty() {
        TokenStream::new()
    } else {
        quote! {
            fn policy() -> #krate::__private::ToolPolicy {
                #krate::__private::ToolPolicy {
                    #(#fields,)*
                    #rest
                }
            }
        }
    };
    tool_impl(
        tool,
        &quote! {
            type Input = #in_ty;
            type Output = #out_ty;
            #policy
        },
    )
}
