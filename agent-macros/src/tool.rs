//! `#[derive(Tool)]`: `impl Tool` from `#[tool(kind = ..., input = ..., output = ...)]`.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{DeriveInput, Expr, Lit, LitBool, LitInt, Path, Token, Type};

use crate::ctxt::Ctxt;
use crate::names;

const TOOL: &str = "tool";
const KIND: &str = "kind";
const INPUT: &str = "input";
const OUTPUT: &str = "output";
const TIMEOUT_MS: &str = "timeout_ms";
const RETRIES: &str = "retries";
const CACHE: &str = "cache";
const CRATE: &str = "crate";
const KEYS: &[&str] = &[KIND, INPUT, OUTPUT, TIMEOUT_MS, RETRIES, CACHE, CRATE];

#[derive(Default)]
struct ToolAttrs {
    kind: Option<(Span, String)>,
    input: Option<Type>,
    output: Option<Type>,
    timeout_ms: Option<u64>,
    retries: Option<u32>,
    cache: Option<bool>,
    krate: Option<Path>,
}

fn skip(input: syn::parse::ParseStream<'_>) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}

fn parse_attrs(cx: &Ctxt, input: &DeriveInput) -> (ToolAttrs, Vec<String>) {
    let mut out = ToolAttrs::default();
    let mut seen: Vec<String> = Vec::new();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident(TOOL)) {
        let res = attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map_or_else(|| "?".to_owned(), names::unraw);
            let span = meta.path.span();
            if !KEYS.contains(&key.as_str()) {
                cx.error(
                    span,
                    format!(
                        "unknown key `{key}` in `#[tool(...)]`{}",
                        {
                            let h = names::did_you_mean(&key, KEYS.iter().copied());
                            if h.is_empty() {
                                format!("\n= note: keys allowed: {}", names::list(KEYS.iter().copied()))
                            } else {
                                h
                            }
                        }
                    ),
                );
                return skip(meta.input);
            }
            if seen.contains(&key) {
                cx.error(span, format!("duplicate key `{key}` in `#[tool(...)]`\n= help: remove this `{key}`"));
                return skip(meta.input);
            }
            seen.push(key.clone());
            let value = meta.value()?;
            match key.as_str() {
                KIND => {
                    let ident: syn::Ident = value.parse()?;
                    let k = names::unraw(&ident);
                    if ["read", "write", "hybrid"].contains(&k.as_str()) {
                        out.kind = Some((ident.span(), k));
                    } else {
                        cx.error(
                            ident.span(),
                            format!("unknown tool kind `{k}`\n= help: expected `read`, `write` or `hybrid`"),
                        );
                    }
                }
                INPUT => out.input = Some(value.parse()?),
                OUTPUT => out.output = Some(value.parse()?),
                TIMEOUT_MS => {
                    let lit: LitInt = value.parse()?;
                    out.timeout_ms = Some(lit.base10_parse()?);
                }
                RETRIES => {
                    let lit: LitInt = value.parse()?;
                    let n: u32 = lit.base10_parse()?;
                    if n == 0 {
                        cx.error(lit.span(), "`retries` counts attempts in all and must be at least 1\n= help: `retries = 1` means a single attempt");
                    }
                    out.retries = Some(n);
                }
                CACHE => {
                    let lit: LitBool = value.parse()?;
                    out.cache = Some(lit.value);
                }
                _ => {
                    out.krate = Some(if value.peek(syn::LitStr) {
                        value.parse::<syn::LitStr>()?.parse()?
                    } else {
                        Path::parse_mod_style(value)?
                    });
                }
            }
            Ok(())
        });
        if let Err(e) = res {
            cx.syn_error(e);
        }
    }
    (out, seen)
}

/// The doc comment, one line per `///`, without the leading space.
fn description(input: &DeriveInput) -> String {
    let mut lines = Vec::new();
    for attr in &input.attrs {
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

pub fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let (attrs, seen) = parse_attrs(&cx, input);
    let ident = &input.ident;
    let has_attr = input.attrs.iter().any(|a| a.path().is_ident(TOOL));
    // Keys given but malformed were reported already.
    let missing: Vec<&str> = [KIND, INPUT, OUTPUT]
        .into_iter()
        .filter(|k| !seen.iter().any(|s| s == k))
        .collect();
    if !missing.is_empty() {
        let what = if has_attr {
            "`#[tool(...)]` is missing"
        } else {
            "`#[derive(Tool)]` needs `#[tool(...)]` with"
        };
        cx.error(
            ident.span(),
            format!(
                "{what} {}\n= help: `#[tool(kind = read, input = MyInput, output = MyOutput)]`",
                names::list(missing.iter().copied())
            ),
        );
    }
    if let Some(errors) = cx.into_compile_errors() {
        return errors;
    }
    let krate = attrs.krate.unwrap_or_else(crate::krate::default_path);
    let name = ident.to_string();
    let name = name.strip_prefix("r#").unwrap_or(&name);
    let desc = description(input);
    let kind = match attrs.kind.as_ref().map(|k| k.1.as_str()) {
        Some("write") => quote!(#krate::kind::Write),
        Some("hybrid") => quote!(#krate::kind::Hybrid),
        _ => quote!(#krate::kind::Read),
    };
    let in_ty = attrs.input;
    let out_ty = attrs.output;
    let mut fields = Vec::new();
    if let Some(ms) = attrs.timeout_ms {
        fields.push(quote!(timeout: #krate::__private::core::time::Duration::from_millis(#ms)));
    }
    if let Some(n) = attrs.retries {
        fields.push(quote!(retry: #krate::RetryPolicy {
            max_attempts: #n,
            ..#krate::__private::core::default::Default::default()
        }));
    }
    if let Some(c) = attrs.cache {
        fields.push(quote!(cache: #c));
    }
    // `ToolPolicy` has three fields; fill the rest from its default.
    let rest =
        (fields.len() < 3).then(|| quote!(..#krate::__private::core::default::Default::default()));
    let policy = if fields.is_empty() {
        TokenStream::new()
    } else {
        quote! {
            fn policy() -> #krate::ToolPolicy {
                #krate::ToolPolicy {
                    #(#fields,)*
                    #rest
                }
            }
        }
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Tool for #ident #ty_generics #where_clause {
            const NAME: &'static str = #name;
            const DESCRIPTION: &'static str = #desc;
            type Kind = #kind;
            type Input = #in_ty;
            type Output = #out_ty;
            #policy
        }
    }
}
