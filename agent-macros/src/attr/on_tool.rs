//! `#[tool(...)]` on a tool's type: its kind, input, output, timeout, retries and cache.

use syn::parse::Parse;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitBool, LitInt, Path, Type};

use crate::ctxt::{Ctxt, Message};
use crate::names;

use super::values::{crate_path, key_of, number, parse_each, skip_value, unknown_key, value};
use super::{
    Attr, CACHE, CRATE, INPUT, JOURNAL_WITH_COMMIT, KIND, Kind, OUTPUT, RETRIES, TIMEOUT_MS, TOOL,
    TOOL_KEYS,
};

/// `#[tool(kind = ..., input = ..., output = ..., timeout_ms = ..., retries = ..., cache = ...,
/// journal_with_commit = ...)]`
pub(crate) struct ToolAttrs {
    pub(crate) kind: Attr<Kind>,
    pub(crate) input: Attr<Type>,
    pub(crate) output: Attr<Type>,
    pub(crate) timeout_ms: Attr<u64>,
    pub(crate) retries: Attr<u32>,
    pub(crate) cache: Attr<bool>,
    pub(crate) journal_with_commit: Attr<bool>,
    pub(crate) krate: Attr<Path>,
    /// The kind to assume in the stub impl when `kind` is misspelled: the closest one.
    pub(crate) kind_guess: Option<Kind>,
}

pub(crate) fn tool_attrs(cx: &Ctxt, attrs: &[Attribute]) -> ToolAttrs {
    let mut out = ToolAttrs {
        kind: Attr::in_ns(TOOL, KIND),
        input: Attr::in_ns(TOOL, INPUT),
        output: Attr::in_ns(TOOL, OUTPUT),
        timeout_ms: Attr::in_ns(TOOL, TIMEOUT_MS),
        retries: Attr::in_ns(TOOL, RETRIES),
        cache: Attr::in_ns(TOOL, CACHE),
        journal_with_commit: Attr::in_ns(TOOL, JOURNAL_WITH_COMMIT),
        krate: Attr::in_ns(TOOL, CRATE),
        kind_guess: None,
    };
    parse_each(cx, TOOL, attrs, |meta| {
        let span = meta.path.span();
        match key_of(&meta).as_str() {
            KIND => {
                if !out.kind.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "read", Ident::parse)? {
                    let name = names::unraw(&v);
                    if let Some(kind) = Kind::from_name(&name) {
                        out.kind.set(cx, span, kind);
                    } else {
                        let kinds = Kind::ALL.map(Kind::as_str);
                        out.kind_guess = names::closest(&name, kinds).and_then(Kind::from_name);
                        let help = names::did_you_mean(&name, kinds)
                            .unwrap_or_else(|| "expected `read`, `write` or `hybrid`".to_owned());
                        cx.error(
                            v.span(),
                            Message::new(format!("unknown tool kind `{name}`")).help(help),
                        );
                    }
                }
            }
            INPUT => {
                if !out.input.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "InputType", Type::parse)? {
                    out.input.set(cx, span, v);
                }
            }
            OUTPUT => {
                if !out.output.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "OutputType", Type::parse)? {
                    out.output.set(cx, span, v);
                }
            }
            TIMEOUT_MS => {
                if !out.timeout_ms.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "N (milliseconds)", number::<u64>)? {
                    out.timeout_ms.set(cx, span, v);
                }
            }
            RETRIES => {
                if !out.retries.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "N (attempts in all)", LitInt::parse)? {
                    match v.base10_parse::<u32>() {
                        Ok(0) => cx.error(
                            v.span(),
                            Message::new("`retries` counts attempts in all and must be at least 1")
                                .help("`retries = 1` means a single attempt"),
                        ),
                        Ok(n) => out.retries.set(cx, span, n),
                        Err(e) => cx.syn_error(e),
                    }
                }
            }
            CACHE => {
                if !out.cache.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "true", LitBool::parse)? {
                    out.cache.set(cx, span, v.value);
                }
            }
            JOURNAL_WITH_COMMIT => {
                if !out.journal_with_commit.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "true", LitBool::parse)? {
                    out.journal_with_commit.set(cx, span, v.value);
                }
            }
            CRATE => {
                if !out.krate.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = crate_path(cx, &meta)? {
                    out.krate.set(cx, span, v);
                }
            }
            _ => unknown_key(cx, &meta, TOOL, TOOL_KEYS, None)?,
        }
        Ok(())
    });
    out
}
