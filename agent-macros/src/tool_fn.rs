//! `#[tool_fn(...)]`: a tool written as an `async fn`. The function stays as written; next to
//! it come the tool type named after it in `CamelCase` (`charge_payment` ->
//! `ChargePayment`, the name agents list and handlers call), its `Tool` impl (through
//! `tool::expand`, the same code `#[derive(Tool)]` produces), an `Execute` impl that calls
//! the function, `Compensate` for a hybrid tool, and `BuildTool` so the agent's tools struct
//! can build it from the application's shared state.
//!
//! The attribute is not called `tool`: that is the helper attribute of `#[derive(Tool)]`,
//! and a macro of the same name in scope would make every `#[tool(...)]` ambiguous.
//!
//! Parameters, told apart by their types: `Shared<T>` (a resource the tool type holds and
//! clones into each call), `&ToolContext` (the call: run, attempt, idempotency key), and the
//! others, which make the input: one without a doc comment is the input itself (a struct
//! the user wrote); several, or documented ones, are the fields of a generated
//! `{Tool}Input` struct whose schema carries their doc comments; none means `()`. The
//! return type is `Result<Output, E>` with `E: Into<ToolError>`, any serializable `Output`.

use heck::ToUpperCamelCase;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, GenericParam, Ident, ItemFn, LitBool, LitInt, Pat, Path, PathArguments,
    ReturnType, Type,
};

use crate::attr::Kind;
use crate::ctxt::{Ctxt, Message};
use crate::tool::{self, Tool};
use crate::{fallback, names};

const ATTR: &str = "tool_fn";
const KEYS: &str = "`read`, `write`, `hybrid`, `kind`, `timeout_ms`, `retries`, `cache`, `journal_with_commit`, `compensate`, `compensate_input`, `crate`";

/// What `#[tool_fn(...)]` says.
#[derive(Default)]
struct Args {
    kind: Option<(Span, Kind)>,
    timeout_ms: Option<u64>,
    retries: Option<u32>,
    cache: Option<bool>,
    journal_with_commit: Option<bool>,
    compensate: Option<Path>,
    compensate_input: Option<Path>,
    krate: Option<Path>,
}

/// How one parameter of the function is filled in by the generated `Execute` impl.
enum Param {
    /// `Shared<T>`: a field of the tool type, cloned into each call.
    Shared { field: Ident, ty: Box<Type> },
    /// `&ToolContext`.
    Context,
    /// The tool's input (the struct form: one undocumented parameter).
    Input,
    /// A field of the input struct generated from the parameters (the arguments form).
    Argument(Ident),
}

/// A parameter that is neither `Shared<T>` nor `&ToolContext`: the input, or one argument.
struct Plain {
    ident: Option<Ident>,
    span: Span,
    ty: Type,
    docs: Vec<syn::Attribute>,
}

pub(crate) fn expand(args: TokenStream, item: &TokenStream) -> TokenStream {
    let Ok(mut func) = syn::parse2::<ItemFn>(item.clone()) else {
        let e = syn::Error::new(
            Span::call_site(),
            format!("`#[{ATTR}]` makes a tool of an `async fn`; put it on a function"),
        )
        .to_compile_error();
        return quote!(#e #item);
    };
    let cx = Ctxt::new();
    let args = parse_args(&cx, args);
    let name = names::unraw(&func.sig.ident).to_upper_camel_case();
    if !check_name(&cx, &func.sig.ident, &name) {
        // No tool type: another function may already make one of this name, and a second
        // would only add errors about duplicate definitions.
        let errors = cx.into_compile_errors().unwrap_or_default();
        return quote!(#errors #func);
    }
    let input_ident = format_ident!("{name}Input", span = func.sig.ident.span());
    let krate = args
        .krate
        .clone()
        .unwrap_or_else(crate::krate::default_path);
    let (params, input, arguments) = params(&cx, &mut func, &input_ident);
    // The function as written, without its parameters' doc comments: they became the
    // schema's descriptions, and rustc accepts no doc comment on a parameter.
    let item = quote!(#func);
    let output = output(&cx, &func);
    check_signature(&cx, &func);
    let kind = args.kind.map(|(_, k)| k);
    if kind.is_none() {
        cx.error(
            func.sig.ident.span(),
            Message::new(format!(
                "`#[{ATTR}]` needs the tool's kind: `read`, `write` or `hybrid`"
            ))
            .help(format!(
                "`#[{ATTR}(read)]` for a tool without side effect, `#[{ATTR}(write)]` for one with"
            )),
        );
    }
    check_compensation(&cx, &args, &func);
    let model = Tool {
        ident: Ident::new(&name, func.sig.ident.span()),
        generics: syn::Generics::default(),
        krate,
        name,
        description: tool::description(&func.attrs),
        kind: kind.unwrap_or(Kind::Read),
        input: Some(input),
        output,
        timeout_ms: args.timeout_ms,
        retries: args.retries,
        cache: args.cache,
        journal_with_commit: args.journal_with_commit,
    };
    let shared: Vec<(&Ident, &Type)> = params
        .iter()
        .filter_map(|p| match p {
            Param::Shared { field, ty } => Some((field, &**ty)),
            _ => None,
        })
        .collect();
    let item_type = item_type(&model, &func, &shared);
    let input_type = arguments
        .as_ref()
        .map(|a| input_struct(&model, &func, &input_ident, a))
        .unwrap_or_default();
    if let Some(errors) = cx.into_compile_errors() {
        let stub = fallback::tool_fallback(&model);
        return quote!(#item #errors #item_type #input_type #stub);
    }
    let tool_impl = tool::expand(&model);
    let execute = execute_impl(&model, &func, &params, arguments.is_some());
    let build = build_impl(&model, &shared);
    let compensate = compensate_impl(&model, &args);
    // The signature is the macro's contract: `async` even when the body does not wait,
    // arguments by value (each call deserializes its own), and the doc comment is what the
    // model reads, not a place for an `# Errors` section.
    quote! {
        #[allow(clippy::unused_async, clippy::missing_errors_doc, clippy::needless_pass_by_value)]
        #item
        #item_type
        #input_type
        #tool_impl
        #execute
        #build
        #compensate
    }
}

fn parse_args(cx: &Ctxt, args: TokenStream) -> Args {
    let mut out = Args::default();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map_or_else(|| crate::attr::path_text(&meta.path), names::unraw);
        let span = meta.path.span();
        if let Some(kind) = Kind::from_name(&key) {
            set_kind(cx, &mut out, span, kind);
            return Ok(());
        }
        match key.as_str() {
            "kind" => {
                let v: Ident = meta.value()?.parse()?;
                match Kind::from_name(&names::unraw(&v)) {
                    Some(kind) => set_kind(cx, &mut out, span, kind),
                    None => cx.error(
                        v.span(),
                        Message::new(format!("unknown tool kind `{v}`"))
                            .help("expected `read`, `write` or `hybrid`"),
                    ),
                }
            }
            "timeout_ms" => {
                let v: LitInt = meta.value()?.parse()?;
                once(
                    cx,
                    &meta,
                    out.timeout_ms.replace(v.base10_parse()?).is_some(),
                );
            }
            "retries" => {
                let v: LitInt = meta.value()?.parse()?;
                let n: u32 = v.base10_parse()?;
                if n == 0 {
                    cx.error(
                        v.span(),
                        Message::new("`retries` counts attempts in all and must be at least 1")
                            .help("`retries = 1` means a single attempt"),
                    );
                }
                once(cx, &meta, out.retries.replace(n).is_some());
            }
            "cache" => {
                let v: LitBool = meta.value()?.parse()?;
                once(cx, &meta, out.cache.replace(v.value).is_some());
            }
            "journal_with_commit" => {
                let v: LitBool = meta.value()?.parse()?;
                once(
                    cx,
                    &meta,
                    out.journal_with_commit.replace(v.value).is_some(),
                );
            }
            "compensate" => {
                let v: Path = meta.value()?.parse()?;
                once(cx, &meta, out.compensate.replace(v).is_some());
            }
            "compensate_input" => {
                let v: Path = meta.value()?.parse()?;
                once(cx, &meta, out.compensate_input.replace(v).is_some());
            }
            "crate" => {
                let v: Path = meta.value()?.parse()?;
                once(cx, &meta, out.krate.replace(v).is_some());
            }
            "input" | "output" => {
                let _: Type = meta.value()?.parse()?;
                cx.error(
                    span,
                    Message::new(format!(
                        "`{key}` is not a key of `#[{ATTR}]`: the {key} type is the function's"
                    ))
                    .help(if key == "input" {
                        "the input is made of the parameters that are neither `Shared<T>` nor `&ToolContext`"
                    } else {
                        "the output is `T` in the return type `Result<T, E>`"
                    }),
                );
            }
            _ => {
                cx.error(
                    span,
                    Message::new(format!("unknown key `{key}` in `#[{ATTR}(...)]`"))
                        .help(format!("the keys are {KEYS}")),
                );
                if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
                    let _: TokenStream = meta.input.parse()?;
                }
            }
        }
        Ok(())
    });
    if let Err(e) = parser.parse2(args) {
        cx.syn_error(e);
    }
    out
}

fn set_kind(cx: &Ctxt, out: &mut Args, span: Span, kind: Kind) {
    if out.kind.is_some() {
        cx.error(
            span,
            Message::new(format!(
                "the kind of a tool is given twice in `#[{ATTR}(...)]`"
            ))
            .help("keep one of `read`, `write` and `hybrid`"),
        );
    } else {
        out.kind = Some((span, kind));
    }
}

fn once(cx: &Ctxt, meta: &ParseNestedMeta<'_>, duplicate: bool) {
    if duplicate {
        let key = names::unraw(meta.path.get_ident().expect("keys are identifiers"));
        cx.error(
            meta.path.span(),
            Message::new(format!("duplicate key `{key}` in `#[{ATTR}(...)]`"))
                .help(format!("remove this `{key}`; each key may appear once")),
        );
    }
}

/// The function's name makes the tool's type (`search_web` -> `SearchWeb`): it is written in
/// snake case, so that two functions never make one type (`search_web` and `searchWeb`
/// would), and the type is not a keyword (`self_` would make `Self`). Returns whether the
/// name is good.
fn check_name(cx: &Ctxt, ident: &Ident, type_name: &str) -> bool {
    let written = names::unraw(ident);
    if type_name.is_empty() || type_name == "Self" {
        cx.error(
            ident.span(),
            Message::new(format!(
                "the tool of `{written}` would be a type named `{type_name}`, which Rust reserves"
            ))
            .help("rename the function: its name in CamelCase is the tool's name, the one agents list"),
        );
        return false;
    }
    let canonical = names::snake_case(type_name);
    if canonical != written {
        cx.error(
            ident.span(),
            Message::new(format!(
                "a tool function is named in snake case: `{written}` should be `{canonical}`"
            ))
            .note(format!(
                "its tool is the name in CamelCase, `{type_name}`; a name written otherwise could make the same tool as another function"
            ))
            .help(format!("rename it `{canonical}`")),
        );
        return false;
    }
    true
}

fn check_signature(cx: &Ctxt, func: &ItemFn) {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        cx.error(
            sig.fn_token.span(),
            Message::new(format!("`#[{ATTR}]` makes a tool of an `async fn`"))
                .help("write `async fn`"),
        );
    }
    if let Some(p) = sig
        .generics
        .params
        .iter()
        .find(|p| !matches!(p, GenericParam::Lifetime(_)))
    {
        cx.error(
            p.span(),
            Message::new("a tool function cannot be generic").help(
                "a tool has one input and one output type, whose JSON schemas the model is shown",
            ),
        );
    }
}

/// The parameters, the input type, and the arguments when the input is generated from
/// them.
///
/// One parameter without a doc comment is the input itself (the struct form: its type is
/// the input). Otherwise, with several such parameters or any documented one, the input is
/// a struct generated from them (`{Tool}Input`), one field per parameter, named as it is,
/// documented by its doc comment (what the model reads in the schema). No such parameter
/// means the input `()`. The parameters' doc comments are taken off the function.
fn params(
    cx: &Ctxt,
    func: &mut ItemFn,
    input_ident: &Ident,
) -> (Vec<Param>, Type, Option<Vec<Plain>>) {
    let mut params = Vec::new();
    let mut plain = Vec::new();
    for (i, arg) in func.sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(pt) = arg else {
            cx.error(
                arg.span(),
                Message::new("a tool function takes no `self`")
                    .help("take shared resources as `Shared<T>` parameters"),
            );
            continue;
        };
        let (docs, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut pt.attrs)
            .into_iter()
            .partition(|a| a.path().is_ident("doc"));
        pt.attrs = rest;
        if let Some(ty) = shared_type(&pt.ty) {
            let field = binding(&pt.pat).unwrap_or_else(|| format_ident!("shared_{i}"));
            params.push(Param::Shared {
                field,
                ty: Box::new(ty.clone()),
            });
        } else if let Some(reference) = context(&pt.ty) {
            if let Some(m) = &reference.mutability {
                cx.error(
                    m.span(),
                    Message::new("the call's context is taken by shared reference, not `&mut`")
                        .help("write `cx: &ToolContext`"),
                );
            }
            params.push(Param::Context);
        } else if let Some(problem) = not_owned(&pt.ty) {
            cx.syn_error(problem);
            params.push(Param::Input);
        } else {
            let ident = match &*pt.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(p.ident.clone()),
                _ => None,
            };
            plain.push(Plain {
                ident,
                span: pt.pat.span(),
                ty: (*pt.ty).clone(),
                docs,
            });
            params.push(Param::Input);
        }
    }
    let struct_form = plain.len() == 1 && plain[0].docs.is_empty();
    if plain.is_empty() {
        return (params, syn::parse_quote!(()), None);
    }
    if struct_form {
        let ty = plain.remove(0).ty;
        return (params, ty, None);
    }
    let mut fields = plain.iter().filter_map(|p| p.ident.clone());
    for p in &plain {
        if p.ident.is_none() {
            cx.error(
                p.span,
                Message::new("an argument of a tool is named by a plain identifier")
                    .help("write `name: Type`: the model fills in the field `name` of the tool's input")
                    .note("destructure in the body; or take one struct as the input (a single parameter without doc comment)"),
            );
        }
    }
    for p in &mut params {
        if matches!(p, Param::Input)
            && let Some(field) = fields.next()
        {
            *p = Param::Argument(field);
        }
    }
    let ty = syn::parse_quote!(#input_ident);
    (params, ty, Some(plain))
}

/// The input generated from the arguments: a struct with one public field per argument,
/// documented by the argument's doc comment, with serde and JSON-schema derives (through
/// the framework's paths, so the user's crate needs neither dependency), and `From` the
/// argument's type when there is one argument.
fn input_struct(model: &Tool, func: &ItemFn, ident: &Ident, arguments: &[Plain]) -> TokenStream {
    let vis = &func.vis;
    let krate = &model.krate;
    let private = quote!(#krate::__private);
    let serde_path = quote!(#private::serde).to_string();
    let schemars_path = quote!(#private::schemars).to_string();
    let tool = &model.ident;
    let doc = format!(
        "The input of tool [`{tool}`]: the arguments of [`{}`], generated by `#[{ATTR}]`.",
        func.sig.ident
    );
    let fields = arguments.iter().filter_map(|p| {
        let name = p.ident.as_ref()?;
        let ty = &p.ty;
        let docs = &p.docs;
        Some(quote!(#(#docs)* pub #name: #ty))
    });
    let from = match arguments {
        [
            Plain {
                ident: Some(name),
                ty,
                ..
            },
        ] => quote! {
            #[automatically_derived]
            impl #private::core::convert::From<#ty> for #ident {
                fn from(#name: #ty) -> Self {
                    Self { #name }
                }
            }
        },
        _ => TokenStream::new(),
    };
    // An undocumented argument is an undocumented field: its description in the schema is
    // the parameter's doc comment or nothing, never a filler the model would read.
    quote! {
        #[doc = #doc]
        #[allow(missing_docs)]
        #[derive(#private::serde::Serialize, #private::serde::Deserialize, #private::schemars::JsonSchema)]
        #[serde(crate = #serde_path)]
        #[schemars(crate = #schemars_path)]
        #vis struct #ident {
            #(#fields,)*
        }
        #from
    }
}

/// `T` of a parameter typed `Shared<T>`.
fn shared_type(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Shared" {
        return None;
    }
    first_type_argument(&last.arguments)
}

fn first_type_argument(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// `&ToolContext` or `&mut ToolContext`, under any path.
fn context(ty: &Type) -> Option<&syn::TypeReference> {
    let Type::Reference(r) = ty else { return None };
    let Type::Path(p) = &*r.elem else {
        return None;
    };
    p.path
        .segments
        .last()
        .is_some_and(|s| s.ident == "ToolContext")
        .then_some(r)
}

/// An argument's type that cannot receive the model's arguments: a borrow (there is nothing
/// to borrow from: each call deserializes its own values) or `impl Trait` (there is no one
/// type to deserialize into), anywhere in the type. The error is at that part of the type.
fn not_owned(ty: &Type) -> Option<syn::Error> {
    match ty {
        Type::Reference(r) => {
            let elem = crate::expand::type_text(&r.elem);
            let owned = match elem.as_str() {
                "str" => "String".to_owned(),
                "Path" | "std::path::Path" => "PathBuf".to_owned(),
                _ => match &*r.elem {
                    Type::Slice(s) => format!("Vec<{}>", crate::expand::type_text(&s.elem)),
                    _ => elem.clone(),
                },
            };
            let what = if r.mutability.is_some() {
                "a `&mut` borrow"
            } else {
                "a borrow"
            };
            let text = crate::expand::type_text(ty);
            Some(syn::Error::new(
                ty.span(),
                Message::new(format!(
                    "an argument of a tool cannot be {what}: `{text}`"
                ))
                .note("the model's arguments are deserialized into owned values, one set per call")
                .help(format!("take `{owned}` by value")),
            ))
        }
        Type::ImplTrait(_) => Some(syn::Error::new(
            ty.span(),
            Message::new("an argument of a tool cannot be `impl Trait`")
                .note("the model's arguments are deserialized into one concrete type, whose JSON schema the model is shown")
                .help("name the type, like `String` for `impl Into<String>`"),
        )),
        Type::Paren(p) => not_owned(&p.elem),
        Type::Group(g) => not_owned(&g.elem),
        Type::Array(a) => not_owned(&a.elem),
        Type::Slice(s) => not_owned(&s.elem),
        Type::Tuple(t) => t.elems.iter().find_map(not_owned),
        Type::Path(p) => p
            .qself
            .iter()
            .map(|q| &*q.ty)
            .chain(p.path.segments.iter().flat_map(|seg| match &seg.arguments {
                PathArguments::AngleBracketed(a) => a
                    .args
                    .iter()
                    .filter_map(|g| match g {
                        GenericArgument::Type(t) => Some(t),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                _ => Vec::new(),
            }))
            .find_map(not_owned),
        _ => None,
    }
}

/// The name a `Shared<T>` parameter binds: `Shared(pool)` or `pool`.
fn binding(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(i) => Some(i.ident.clone()),
        Pat::TupleStruct(t) if t.elems.len() == 1 => t.elems.first().and_then(binding),
        _ => None,
    }
}

/// `T` of the return type `Result<T, E>`.
fn output(cx: &Ctxt, func: &ItemFn) -> Option<Type> {
    let found = match &func.sig.output {
        ReturnType::Type(_, ty) => match &**ty {
            Type::Path(p) => p
                .path
                .segments
                .last()
                .filter(|s| s.ident.to_string().ends_with("Result"))
                .and_then(|s| first_type_argument(&s.arguments))
                .cloned(),
            _ => None,
        },
        ReturnType::Default => None,
    };
    if found.is_none() {
        let span = match &func.sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => func.sig.paren_token.span.close(),
        };
        cx.error(
            span,
            Message::new("a tool function returns `Result<Output, E>`")
                .help("`-> Result<MyOutput, ToolError>`; any `E: Into<ToolError>` will do")
                .note("the error's class decides whether the runner retries the call"),
        );
    }
    found
}

fn check_compensation(cx: &Ctxt, args: &Args, func: &ItemFn) {
    let hybrid = matches!(args.kind, Some((_, Kind::Hybrid)));
    if hybrid && args.compensate.is_none() {
        cx.error(
            func.sig.ident.span(),
            Message::new("a hybrid tool names the write tool that undoes it")
                .help(format!(
                    "`#[{ATTR}(hybrid, compensate = ReleaseInventory)]`; its input is the output of this tool (`From`), or what `compensate_input = my_fn` computes from `(&input, &output)`"
                )),
        );
    }
    if !hybrid {
        for (key, given) in [
            ("compensate", args.compensate.as_ref()),
            ("compensate_input", args.compensate_input.as_ref()),
        ] {
            if let Some(path) = given {
                cx.error(
                    path.span(),
                    Message::new(format!("`{key}` is for hybrid tools")).help(format!(
                        "declare the tool `#[{ATTR}(hybrid, ...)]`, or remove `{key}`"
                    )),
                );
            }
        }
    }
}

/// The tool type: a unit struct, or one field per `Shared<T>` parameter and `new`.
fn item_type(model: &Tool, func: &ItemFn, shared: &[(&Ident, &Type)]) -> TokenStream {
    let vis = &func.vis;
    let ident = &model.ident;
    let krate = &model.krate;
    let private = quote!(#krate::__private);
    let docs = func.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let fn_name = &func.sig.ident;
    let generated = format!("The tool of the function [`{fn_name}`], generated by `#[{ATTR}]`.");
    let name = &model.name;
    if shared.is_empty() {
        return quote! {
            #(#docs)*
            ///
            #[doc = #generated]
            #[derive(Clone, Copy, Default)]
            #vis struct #ident;

            #[automatically_derived]
            impl #private::core::fmt::Debug for #ident {
                fn fmt(&self, f: &mut #private::core::fmt::Formatter<'_>) -> #private::core::fmt::Result {
                    f.write_str(#name)
                }
            }
        };
    }
    let fields = shared.iter().map(|(f, t)| quote!(#f: #t));
    let args = shared.iter().map(|(f, t)| quote!(#f: #t));
    let names = shared.iter().map(|(f, _)| f);
    quote! {
        #(#docs)*
        ///
        #[doc = #generated]
        #vis struct #ident {
            #(#fields,)*
        }

        #[automatically_derived]
        impl #ident {
            /// The tool, holding the resources its function takes as `Shared<T>`.
            #[must_use]
            #[allow(dead_code)]
            #vis fn new(#(#args),*) -> Self {
                Self { #(#names),* }
            }
        }

        #[automatically_derived]
        impl #private::core::fmt::Debug for #ident {
            fn fmt(&self, f: &mut #private::core::fmt::Formatter<'_>) -> #private::core::fmt::Result {
                f.debug_struct(#name).finish_non_exhaustive()
            }
        }
    }
}

fn execute_impl(model: &Tool, func: &ItemFn, params: &[Param], generated: bool) -> TokenStream {
    let krate = &model.krate;
    let private = quote!(#krate::__private);
    let ident = &model.ident;
    let fn_name = &func.sig.ident;
    let input_ty = &model.input;
    let output_ty = &model.output;
    let input = Ident::new("input", Span::mixed_site());
    let cx = Ident::new("cx", Span::mixed_site());
    let args = params.iter().map(|p| match p {
        Param::Shared { field, .. } => {
            quote!(#krate::__private::Shared(#private::core::clone::Clone::clone(&self.#field)))
        }
        Param::Context => quote!(#cx),
        Param::Input => quote!(#input),
        Param::Argument(field) => quote!(#field),
    });
    let unpack = if generated {
        let fields = params.iter().filter_map(|p| match p {
            Param::Argument(f) => Some(f),
            _ => None,
        });
        quote!(let #input_ty { #(#fields),* } = #input;)
    } else {
        quote!(let _ = &#input;)
    };
    let span = func.sig.output.span();
    let convert =
        quote_spanned!(span=> #private::core::convert::Into::<#krate::__private::ToolError>::into);
    quote! {
        #[automatically_derived]
        impl #krate::__private::Execute for #ident {
            async fn execute(
                &self,
                #input: #input_ty,
                #cx: &#krate::__private::ToolContext,
            ) -> #private::core::result::Result<#output_ty, #krate::__private::ToolError> {
                #unpack
                let _ = #cx;
                #fn_name(#(#args),*).await.map_err(#convert)
            }
        }
    }
}

fn build_impl(model: &Tool, shared: &[(&Ident, &Type)]) -> TokenStream {
    let krate = &model.krate;
    let ident = &model.ident;
    let state = Ident::new("__S", Span::mixed_site());
    let bounds = shared
        .iter()
        .map(|(_, t)| quote!(#t: #krate::__private::FromShared<#state>));
    let fields = shared.iter().map(
        |(f, t)| quote!(#f: <#t as #krate::__private::FromShared<#state>>::from_shared(shared)),
    );
    let body = if shared.is_empty() {
        quote!(Self)
    } else {
        quote!(Self { #(#fields,)* })
    };
    quote! {
        #[automatically_derived]
        impl<#state> #krate::__private::BuildTool<#state> for #ident
        where
            #(#bounds,)*
        {
            fn build_tool(shared: &#state) -> Self {
                let _ = shared;
                #body
            }
        }
    }
}

fn compensate_impl(model: &Tool, args: &Args) -> TokenStream {
    let (Some((_, Kind::Hybrid)), Some(with)) = (args.kind, args.compensate.as_ref()) else {
        return TokenStream::new();
    };
    let krate = &model.krate;
    let private = quote!(#krate::__private);
    let ident = &model.ident;
    let input_ty = &model.input;
    let output_ty = &model.output;
    let body = if let Some(f) = &args.compensate_input {
        quote_spanned!(f.span()=> #f(input, output))
    } else {
        quote_spanned! {with.span()=>
            #private::core::convert::From::from(#private::core::clone::Clone::clone(output))
        }
    };
    quote! {
        #[automatically_derived]
        impl #krate::__private::Compensate for #ident {
            type With = #with;
            fn compensation(
                &self,
                input: &#input_ty,
                output: &#output_ty,
            ) -> <#with as #krate::__private::Tool>::Input {
                let _ = input;
                #body
            }
        }
    }
}
