//! Reading the function `#[tool_fn]` is on: the attribute's arguments, the name, the
//! signature and each parameter's role, every mistake one error at the user's token.

use proc_macro2::{Span, TokenStream};
use quote::format_ident;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, GenericParam, Ident, ItemFn, LitBool, LitInt, Pat, Path, PathArguments,
    ReturnType, Type,
};

use crate::attr::Kind;
use crate::ctxt::{Ctxt, Message};
use crate::names;

pub(super) const ATTR: &str = "tool_fn";
const KEYS: &str = "`read`, `write`, `hybrid`, `kind`, `timeout_ms`, `retries`, `cache`, `journal_with_commit`, `compensate`, `compensate_input`, `crate`";

/// What `#[tool_fn(...)]` says.
#[derive(Default)]
pub(super) struct Args {
    pub(super) kind: Option<(Span, Kind)>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) retries: Option<u32>,
    pub(super) cache: Option<bool>,
    pub(super) journal_with_commit: Option<bool>,
    pub(super) compensate: Option<Path>,
    pub(super) compensate_input: Option<Path>,
    pub(super) krate: Option<Path>,
}

/// How one parameter of the function is filled in by the generated `Execute` impl.
pub(super) enum Param {
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
pub(super) struct Plain {
    pub(super) ident: Option<Ident>,
    pub(super) span: Span,
    pub(super) ty: Type,
    pub(super) docs: Vec<syn::Attribute>,
}

pub(super) fn parse_args(cx: &Ctxt, args: TokenStream) -> Args {
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

pub(super) fn set_kind(cx: &Ctxt, out: &mut Args, span: Span, kind: Kind) {
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

pub(super) fn once(cx: &Ctxt, meta: &ParseNestedMeta<'_>, duplicate: bool) {
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
pub(super) fn check_name(cx: &Ctxt, ident: &Ident, type_name: &str) -> bool {
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

pub(super) fn check_signature(cx: &Ctxt, func: &ItemFn) {
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
pub(super) fn params(
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

/// `T` of a parameter typed `Shared<T>`.
pub(super) fn shared_type(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Shared" {
        return None;
    }
    first_type_argument(&last.arguments)
}

pub(super) fn first_type_argument(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// `&ToolContext` or `&mut ToolContext`, under any path.
pub(super) fn context(ty: &Type) -> Option<&syn::TypeReference> {
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
pub(super) fn not_owned(ty: &Type) -> Option<syn::Error> {
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
pub(super) fn binding(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(i) => Some(i.ident.clone()),
        Pat::TupleStruct(t) if t.elems.len() == 1 => t.elems.first().and_then(binding),
        _ => None,
    }
}

/// `T` of the return type `Result<T, E>`.
pub(super) fn output(cx: &Ctxt, func: &ItemFn) -> Option<Type> {
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

pub(super) fn check_compensation(cx: &Ctxt, args: &Args, func: &ItemFn) {
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
