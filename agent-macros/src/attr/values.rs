//! The values every key shares: one value after `=`, numbers, flags, lists of paths and names,
//! and skipping past a malformed one.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitInt, LitStr, Path, Token};

use crate::ctxt::{Ctxt, Message};
use crate::names;

use super::Attr;

pub(super) fn key_of(meta: &ParseNestedMeta<'_>) -> String {
    meta.path
        .get_ident()
        .map_or_else(|| path_text(&meta.path), names::unraw)
}

pub(crate) fn path_text(path: &Path) -> String {
    quote::ToTokens::to_token_stream(path)
        .to_string()
        .replace(' ', "")
}

/// Consume whatever follows an unknown or malformed key, up to the next comma.
pub(super) fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// `place` is where the attribute is (`a variant`), when the namespace has several.
pub(super) fn unknown_key(
    cx: &Ctxt,
    meta: &ParseNestedMeta<'_>,
    ns: &str,
    keys: &[&str],
    place: Option<&str>,
) -> syn::Result<()> {
    let key = key_of(meta);
    let on = place.map(|p| format!(" on {p}")).unwrap_or_default();
    let msg = Message::new(format!("unknown key `{key}` in `#[{ns}(...)]`{on}"));
    let msg = match names::did_you_mean(&key, keys.iter().copied()) {
        Some(hint) => msg.help(hint),
        None => msg.note(format!(
            "keys allowed{on}: {}",
            names::list(keys.iter().copied())
        )),
    };
    cx.error(meta.path.span(), msg);
    skip_value(meta.input)
}

/// Parse the value after `=`, reporting (and skipping) a malformed one.
pub(super) fn value<T>(
    cx: &Ctxt,
    meta: &ParseNestedMeta<'_>,
    expected: &str,
    parse: impl FnOnce(ParseStream<'_>) -> syn::Result<T>,
) -> syn::Result<Option<T>> {
    let key = key_of(meta);
    if !meta.input.peek(Token![=]) {
        cx.error(meta.path.span(), format!("expected `{key} = {expected}`"));
        skip_value(meta.input)?;
        return Ok(None);
    }
    meta.input.parse::<Token![=]>()?;
    let fork = meta.input.fork();
    match parse(&fork) {
        Ok(v) if fork.is_empty() || fork.peek(Token![,]) => {
            syn::parse::discouraged::Speculative::advance_to(meta.input, &fork);
            Ok(Some(v))
        }
        _ => {
            let span = meta
                .input
                .cursor()
                .token_tree()
                .map_or(meta.path.span(), |(t, _)| t.span());
            cx.error(span, format!("expected `{key} = {expected}`"));
            skip_value(meta.input)?;
            Ok(None)
        }
    }
}

/// A value after `=` as written, up to the next comma (`2`, `0`, `-1`, `1.5`, `"2"`), for the
/// keys whose every wrong value is explained in words rather than as a parse error.
pub(super) struct Written {
    pub(super) tokens: TokenStream,
    /// The value's span, or the key's when nothing is written.
    pub(super) span: Span,
    /// As the user wrote it: `-1`, not `- 1` as tokens print it; a string as it is.
    pub(super) text: String,
}

impl Written {
    /// Read the value; the `=` before it is already consumed.
    pub(super) fn read(meta: &ParseNestedMeta<'_>) -> syn::Result<Self> {
        let mut tokens = TokenStream::new();
        while !meta.input.is_empty() && !meta.input.peek(Token![,]) {
            tokens.extend([meta.input.parse::<TokenTree>()?]);
        }
        let span = if tokens.is_empty() {
            meta.path.span()
        } else {
            tokens.span()
        };
        let text = tokens.to_string();
        let text = if text.starts_with('"') {
            text
        } else {
            text.replace(' ', "")
        };
        Ok(Self { tokens, span, text })
    }

    /// The value in a message: `` `-1` ``, or `nothing`.
    pub(super) fn shown(&self) -> String {
        if self.text.is_empty() {
            "nothing".to_owned()
        } else {
            format!("`{}`", self.text)
        }
    }

    pub(super) fn is_quoted(&self) -> bool {
        self.text.starts_with('"')
    }
}

pub(super) fn number<T: std::str::FromStr>(input: ParseStream<'_>) -> syn::Result<T>
where
    T::Err: std::fmt::Display,
{
    let lit: LitInt = input.parse()?;
    let n: T = lit.base10_parse()?;
    Ok(n)
}

pub(super) fn positive_u64(input: ParseStream<'_>) -> syn::Result<u64> {
    let n: u64 = number(input)?;
    if n == 0 {
        return Err(input.error("must be positive"));
    }
    Ok(n)
}

pub(super) fn positive_u32(input: ParseStream<'_>) -> syn::Result<u32> {
    let n: u32 = number(input)?;
    if n == 0 {
        return Err(input.error("must be positive"));
    }
    Ok(n)
}

/// A flag key takes no value.
pub(super) fn flag(cx: &Ctxt, meta: &ParseNestedMeta<'_>, attr: &mut Attr<()>) -> syn::Result<()> {
    if meta.input.is_empty() || meta.input.peek(Token![,]) {
        attr.set(cx, meta.path.span(), ());
        Ok(())
    } else {
        let key = key_of(meta);
        cx.error(
            meta.path.span(),
            Message::new(format!("`{key}` takes no value"))
                .help(format!("write `#[agent({key})]`")),
        );
        skip_value(meta.input)
    }
}

/// `children(a::Research, Fact)`: a list of types, by path.
pub(super) fn path_list(
    cx: &Ctxt,
    meta: &ParseNestedMeta<'_>,
    what: &str,
) -> syn::Result<Option<Vec<Path>>> {
    let key = key_of(meta);
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            format!("expected `{key}(...)` with a list of {what}"),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    if empty_parens(meta.input)? {
        // `children()`: reported by the checks as a list of nothing, not as a parse error.
        return Ok(Some(Vec::new()));
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|item| {
        if item.input.is_empty() || item.input.peek(Token![,]) {
            out.push(item.path.clone());
        } else {
            cx.error(
                item.path.span(),
                format!("expected a list of {what} in `{key}(...)`, like `{key}(Research, crate::fact::Check)`"),
            );
            skip_value(item.input)?;
        }
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}

/// `key(A, B, C)`: a list of plain names.
pub(super) fn name_list(
    cx: &Ctxt,
    meta: &ParseNestedMeta<'_>,
    what: &str,
) -> syn::Result<Option<Vec<Ident>>> {
    let key = key_of(meta);
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            format!("expected `{key}(...)` with a list of {what}"),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    if empty_parens(meta.input)? {
        // `tools()`: reported by the checks as a list of nothing, not as a parse error.
        return Ok(Some(Vec::new()));
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|item| {
        match item.path.get_ident() {
            Some(ident) if item.input.is_empty() || item.input.peek(Token![,]) => {
                out.push(ident.clone());
            }
            _ => {
                cx.error(
                    item.path.span(),
                    format!("expected a list of {what} in `{key}(...)`, like `{key}(A, B)`"),
                );
                skip_value(item.input)?;
            }
        }
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}

/// Whether the input starts with `()`, nothing inside; if so, the parentheses are consumed.
/// An empty list is a mistake the checks report in words (`tools()` lists no tools), not
/// syn's "unexpected end of input".
pub(super) fn empty_parens(input: ParseStream<'_>) -> syn::Result<bool> {
    if !input.peek(syn::token::Paren) {
        return Ok(false);
    }
    let empty = {
        let fork = input.fork();
        let content;
        syn::parenthesized!(content in fork);
        content.is_empty()
    };
    if empty {
        let _content;
        syn::parenthesized!(_content in input);
    }
    Ok(empty)
}

pub(super) fn attrs_in<'a>(
    ns: &'a str,
    attrs: &'a [Attribute],
) -> impl Iterator<Item = &'a Attribute> {
    attrs.iter().filter(move |a| a.path().is_ident(ns))
}

pub(super) fn parse_each(
    cx: &Ctxt,
    ns: &str,
    attrs: &[Attribute],
    mut logic: impl FnMut(ParseNestedMeta<'_>) -> syn::Result<()>,
) {
    for attr in attrs_in(ns, attrs) {
        if let Err(e) = attr.meta.require_list() {
            cx.syn_error(e);
            continue;
        }
        if let Err(e) = attr.parse_nested_meta(&mut logic) {
            cx.syn_error(e);
        }
    }
}

/// `crate = path::to::agent_core` or `crate = "path::to::agent_core"`.
pub(super) fn crate_path(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Path>> {
    value(cx, meta, "path::to::agent_core", |i| {
        if i.peek(LitStr) {
            i.parse::<LitStr>()?.parse::<Path>()
        } else {
            Path::parse_mod_style(i)
        }
    })
}
