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
use quote::{format_ident, quote};
use syn::{Ident, ItemFn, Type};

use crate::attr::Kind;
use crate::ctxt::{Ctxt, Message};
use crate::tool::{self, Tool};
use crate::{fallback, names};

mod generate;
mod read;

use generate::{build_impl, compensate_impl, execute_impl, input_struct, item_type};
use read::{
    ATTR, Param, check_compensation, check_name, check_signature, output, params, parse_args,
};

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
