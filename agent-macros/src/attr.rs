//! Stage 1: the syntax of `#[agent(...)]`. Every key is parsed on its own so that one
//! malformed key does not hide the others; duplicates are reported at the second occurrence.

use proc_macro2::{Span, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitBool, LitInt, LitStr, Path, Token, Type};

use crate::ctxt::{Ctxt, Message};
use crate::names;

/// The attribute namespace of `#[derive(Agent)]`.
pub(crate) const AGENT: &str = "agent";
/// The attribute namespace of `#[derive(Tool)]`.
pub(crate) const TOOL: &str = "tool";

pub(crate) const TOOLS: &str = "tools";
pub(crate) const DAG: &str = "dag";
pub(crate) const NAME: &str = "name";
pub(crate) const MODULE: &str = "module";
pub(crate) const HANDLERS: &str = "handlers";
pub(crate) const CRATE: &str = "crate";
pub(crate) const MAX_STEPS: &str = "max_steps";
pub(crate) const VERSION: &str = "version";
pub(crate) const MIGRATE_FROM: &str = "migrate_from";
/// Inside `migrate_from(...)`: the mapping function.
pub(crate) const WITH: &str = "with";
/// Inside `migrate_from(...)`: signals the migration may leave unwaited.
pub(crate) const SKIP_SIGNAL: &str = "skip_signal";

pub(crate) const INITIAL: &str = "initial";
pub(crate) const TERMINAL: &str = "terminal";
pub(crate) const COMPENSATE: &str = "compensate";
pub(crate) const TO: &str = "to";
pub(crate) const ROUTE: &str = "route";
pub(crate) const WAIT: &str = "wait";
pub(crate) const WAIT_TIMEOUT_MS: &str = "wait_timeout_ms";
pub(crate) const WAIT_PAYLOAD: &str = "wait_payload";
pub(crate) const ON_ERROR: &str = "on_error";
pub(crate) const MAX_TOOL_CALLS: &str = "max_tool_calls";
pub(crate) const TOOLS_PER_ANSWER: &str = "tools_per_answer";
pub(crate) const TIMEOUT_MS: &str = "timeout_ms";
pub(crate) const DECISION_TIMEOUT_MS: &str = "decision_timeout_ms";
pub(crate) const CHILDREN: &str = "children";
pub(crate) const CHILDREN_OUTLIVE: &str = "children_outlive";
/// Inside `to(...)`: `Payment(args = PayArgs)`.
pub(crate) const ARGS: &str = "args";

pub(crate) const KIND: &str = "kind";
pub(crate) const INPUT: &str = "input";
pub(crate) const OUTPUT: &str = "output";
pub(crate) const RETRIES: &str = "retries";
pub(crate) const CACHE: &str = "cache";
pub(crate) const JOURNAL_WITH_COMMIT: &str = "journal_with_commit";

const ENUM_KEYS: &[&str] = &[
    TOOLS,
    DAG,
    NAME,
    MODULE,
    HANDLERS,
    CRATE,
    MAX_STEPS,
    VERSION,
    MIGRATE_FROM,
];
const MIGRATE_KEYS: &[&str] = &[WITH, SKIP_SIGNAL];
const VARIANT_KEYS: &[&str] = &[
    INITIAL,
    TERMINAL,
    COMPENSATE,
    TO,
    TOOLS,
    ROUTE,
    WAIT,
    WAIT_TIMEOUT_MS,
    WAIT_PAYLOAD,
    ON_ERROR,
    MAX_TOOL_CALLS,
    TOOLS_PER_ANSWER,
    TIMEOUT_MS,
    DECISION_TIMEOUT_MS,
    CHILDREN,
    CHILDREN_OUTLIVE,
];
const TOOL_KEYS: &[&str] = &[
    KIND,
    INPUT,
    OUTPUT,
    TIMEOUT_MS,
    RETRIES,
    CACHE,
    JOURNAL_WITH_COMMIT,
    CRATE,
];

/// One key's value, with the span of the key that set it.
pub(crate) struct Attr<T> {
    /// The attribute namespace, `agent` or `tool`.
    ns: &'static str,
    name: &'static str,
    value: Option<(Span, T)>,
    /// The key was written, even if its value was malformed (and reported).
    given: bool,
}

impl<T> Attr<T> {
    const fn none(name: &'static str) -> Self {
        Self::in_ns(AGENT, name)
    }

    const fn in_ns(ns: &'static str, name: &'static str) -> Self {
        Self {
            ns,
            name,
            value: None,
            given: false,
        }
    }

    fn set(&mut self, cx: &Ctxt, span: Span, value: T) {
        self.given = true;
        if self.value.is_some() {
            self.duplicate(cx, span);
        } else {
            self.value = Some((span, value));
        }
    }

    /// Record that the key was written, before its value is parsed. A key written before,
    /// even with a malformed value, is reported here, and `false` says to skip this one.
    fn first(&mut self, cx: &Ctxt, span: Span) -> bool {
        if self.given {
            self.duplicate(cx, span);
            return false;
        }
        self.given = true;
        true
    }

    fn duplicate(&self, cx: &Ctxt, span: Span) {
        cx.error(
            span,
            Message::new(format!(
                "duplicate key `{}` in `#[{}(...)]`",
                self.name, self.ns
            ))
            .help(format!(
                "remove this `{}`; each key may appear once",
                self.name
            )),
        );
    }

    pub(crate) const fn is_given(&self) -> bool {
        self.given
    }

    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, v)| v)
    }

    pub(crate) fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(s, _)| *s)
    }

    pub(crate) fn is_set(&self) -> bool {
        self.value.is_some()
    }

    pub(crate) fn take(self) -> Option<T> {
        self.value.map(|(_, v)| v)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Read,
    Write,
    Hybrid,
}

impl Kind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Hybrid => "hybrid",
        }
    }

    pub(crate) const ALL: [Self; 3] = [Self::Read, Self::Write, Self::Hybrid];

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "hybrid" => Some(Self::Hybrid),
            _ => None,
        }
    }
}

/// `read(A)`, `write(B)` or `hybrid(C(compensate = B))` inside the enum's `tools(...)`.
pub(crate) struct ToolDecl {
    pub(crate) path: Path,
    pub(crate) ident: Ident,
    pub(crate) kind: Kind,
    pub(crate) compensate: Option<Ident>,
}

/// `Payment` or `Payment(args = PayArgs)` inside a state's `to(...)`.
pub(crate) struct TargetDecl {
    pub(crate) ident: Ident,
    /// The argument the model must give with this transition: the span of `args`, the type.
    pub(crate) args: Option<(Span, Type)>,
}

pub(crate) struct EnumAttrs {
    pub(crate) tools: Attr<Vec<ToolDecl>>,
    pub(crate) dag: Attr<()>,
    pub(crate) name: Attr<String>,
    pub(crate) module: Attr<Ident>,
    pub(crate) handlers: Attr<Ident>,
    pub(crate) krate: Attr<Path>,
    pub(crate) max_steps: Attr<u64>,
    pub(crate) version: Attr<u32>,
    pub(crate) migrate_from: Attr<MigrateFrom>,
}

/// `migrate_from(v1::Checkout, with = from_v1, skip_signal("approval"))`.
pub(crate) struct MigrateFrom {
    /// The previous version's enum.
    pub(crate) source: Path,
    /// The mapping `fn(Old) -> New`.
    pub(crate) with: Path,
    /// The signals the migration may leave unwaited, each with its literal's span.
    pub(crate) skip_signals: Vec<LitStr>,
}

pub(crate) struct VariantAttrs {
    pub(crate) initial: Attr<()>,
    pub(crate) terminal: Attr<()>,
    pub(crate) compensate: Attr<()>,
    pub(crate) to: Attr<Vec<TargetDecl>>,
    pub(crate) tools: Attr<Vec<Ident>>,
    pub(crate) route_llm: Attr<()>,
    pub(crate) wait: Attr<String>,
    pub(crate) wait_timeout_ms: Attr<u64>,
    /// The type of the signal's payload, for its JSON Schema in the graph description.
    pub(crate) wait_payload: Attr<syn::Type>,
    pub(crate) on_error: Attr<Ident>,
    pub(crate) max_tool_calls: Attr<u32>,
    pub(crate) tools_per_answer: Attr<u32>,
    pub(crate) timeout_ms: Attr<u64>,
    pub(crate) decision_timeout_ms: Attr<u64>,
    pub(crate) children: Attr<Vec<Path>>,
    pub(crate) children_outlive: Attr<()>,
}

fn key_of(meta: &ParseNestedMeta<'_>) -> String {
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
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// `place` is where the attribute is (`a variant`), when the namespace has several.
fn unknown_key(
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
fn value<T>(
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

fn number<T: std::str::FromStr>(input: ParseStream<'_>) -> syn::Result<T>
where
    T::Err: std::fmt::Display,
{
    let lit: LitInt = input.parse()?;
    let n: T = lit.base10_parse()?;
    Ok(n)
}

fn positive_u64(input: ParseStream<'_>) -> syn::Result<u64> {
    let n: u64 = number(input)?;
    if n == 0 {
        return Err(input.error("must be positive"));
    }
    Ok(n)
}

fn positive_u32(input: ParseStream<'_>) -> syn::Result<u32> {
    let n: u32 = number(input)?;
    if n == 0 {
        return Err(input.error("must be positive"));
    }
    Ok(n)
}

/// A flag key takes no value.
fn flag(cx: &Ctxt, meta: &ParseNestedMeta<'_>, attr: &mut Attr<()>) -> syn::Result<()> {
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
fn path_list(cx: &Ctxt, meta: &ParseNestedMeta<'_>, what: &str) -> syn::Result<Option<Vec<Path>>> {
    let key = key_of(meta);
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            format!("expected `{key}(...)` with a list of {what}"),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    let empty = {
        let fork = meta.input.fork();
        let content;
        syn::parenthesized!(content in fork);
        content.is_empty()
    };
    if empty {
        // `children()`: reported by the checks as a list of nothing, not as a parse error.
        let _content;
        syn::parenthesized!(_content in meta.input);
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

/// `to(A, B(args = Type))`: the successors, each optionally with the type of the argument
/// the model gives with it, written as a hybrid tool names its compensation.
fn targets(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<TargetDecl>>> {
    if !meta.input.peek(syn::token::Paren) {
        cx.error(meta.path.span(), "expected `to(...)` with a list of states");
        skip_value(meta.input)?;
        return Ok(None);
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|item| {
        let Some(ident) = item.path.get_ident().cloned() else {
            cx.error(
                item.path.span(),
                "expected a list of states in `to(...)`, like `to(A, B)`",
            );
            return skip_value(item.input);
        };
        if item.input.is_empty() || item.input.peek(Token![,]) {
            out.push(TargetDecl { ident, args: None });
            return Ok(());
        }
        if !item.input.peek(syn::token::Paren) {
            cx.error(
                item.path.span(),
                "expected a list of states in `to(...)`, like `to(A, B)`",
            );
            return skip_value(item.input);
        }
        let mut args: Option<(Span, Type)> = None;
        let mut given = false;
        let target = names::unraw(&ident);
        item.parse_nested_meta(|a| {
            let key = key_of(&a);
            if key == ARGS {
                if given {
                    cx.error(
                        a.path.span(),
                        Message::new(format!("duplicate key `args` on transition `{target}`"))
                            .help("a transition takes one argument; make it a struct with one field per value"),
                    );
                    return skip_value(a.input);
                }
                given = true;
                if let Some(ty) = value(cx, &a, "Type", Type::parse)? {
                    args = Some((a.path.span(), ty));
                }
                Ok(())
            } else if !a.input.peek(Token![=]) {
                // `Payment(PayArgs)`: a type where `args = Type` belongs.
                let ty = if a.input.is_empty() || a.input.peek(Token![,]) {
                    key
                } else {
                    "Type".to_owned()
                };
                cx.error(
                    a.path.span(),
                    Message::new(format!("expected `{target}(args = {ty})`")).help(format!(
                        "a transition's argument is declared with `args = Type`, as a hybrid tool's compensation is with `compensate = Tool`: `to({target}(args = {ty}))`"
                    )),
                );
                skip_value(a.input)
            } else {
                unknown_key(cx, &a, AGENT, &[ARGS], Some("a transition"))
            }
        })?;
        out.push(TargetDecl { ident, args });
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}

/// `key(A, B, C)`: a list of plain names.
fn name_list(cx: &Ctxt, meta: &ParseNestedMeta<'_>, what: &str) -> syn::Result<Option<Vec<Ident>>> {
    let key = key_of(meta);
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            format!("expected `{key}(...)` with a list of {what}"),
        );
        skip_value(meta.input)?;
        return Ok(None);
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

fn attrs_in<'a>(ns: &'a str, attrs: &'a [Attribute]) -> impl Iterator<Item = &'a Attribute> {
    attrs.iter().filter(move |a| a.path().is_ident(ns))
}

fn parse_each(
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

pub(crate) fn enum_attrs(cx: &Ctxt, attrs: &[Attribute]) -> EnumAttrs {
    let mut out = EnumAttrs {
        tools: Attr::none(TOOLS),
        dag: Attr::none(DAG),
        name: Attr::none(NAME),
        module: Attr::none(MODULE),
        handlers: Attr::none(HANDLERS),
        krate: Attr::none(CRATE),
        max_steps: Attr::none(MAX_STEPS),
        version: Attr::none(VERSION),
        migrate_from: Attr::none(MIGRATE_FROM),
    };
    parse_each(cx, AGENT, attrs, |meta| {
        let span = meta.path.span();
        match key_of(&meta).as_str() {
            TOOLS => {
                if let Some(tools) = tool_decls(cx, &meta)? {
                    out.tools.set(cx, span, tools);
                }
            }
            DAG => flag(cx, &meta, &mut out.dag)?,
            NAME => {
                if let Some(v) = value(cx, &meta, "\"agent name\"", <LitStr as Parse>::parse)? {
                    if v.value().is_empty() {
                        cx.error(v.span(), "the agent name must not be empty");
                    } else {
                        out.name.set(cx, span, v.value());
                    }
                }
            }
            MODULE => {
                if let Some(v) = value(cx, &meta, "module_name", Ident::parse)? {
                    out.module.set(cx, span, v);
                }
            }
            HANDLERS => {
                if let Some(v) = value(cx, &meta, "TraitName", Ident::parse)? {
                    out.handlers.set(cx, span, v);
                }
            }
            CRATE => {
                if let Some(v) = crate_path(cx, &meta)? {
                    out.krate.set(cx, span, v);
                }
            }
            MAX_STEPS => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u64)? {
                    out.max_steps.set(cx, span, v);
                }
            }
            VERSION => {
                if !out.version.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = version(cx, &meta)? {
                    out.version.set(cx, span, v);
                }
            }
            MIGRATE_FROM => {
                if !out.migrate_from.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = migrate_from(cx, &meta)? {
                    out.migrate_from.set(cx, span, v);
                }
            }
            _ => {
                let place = "the enum";
                if VARIANT_KEYS.contains(&key_of(&meta).as_str()) {
                    let key = key_of(&meta);
                    cx.error(
                        span,
                        Message::new(format!("`{key}` belongs on a variant, not on the enum"))
                            .help("move it to the `#[agent(...)]` of a state"),
                    );
                    skip_value(meta.input)?;
                } else {
                    unknown_key(cx, &meta, AGENT, ENUM_KEYS, Some(place))?;
                }
            }
        }
        Ok(())
    });
    out
}

/// `version = N`: a whole number, 1 or more, reported at the value otherwise.
fn version(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<u32>> {
    if !meta.input.peek(Token![=]) {
        cx.error(
            meta.path.span(),
            Message::new("expected `version = N`")
                .help("write the agent's version as a whole number, like `version = 2`"),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    meta.input.parse::<Token![=]>()?;
    // The value as written, up to the next comma: `2`, `0`, `-1`, `1.5`, `"2"`.
    let mut tokens = proc_macro2::TokenStream::new();
    while !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        tokens.extend([meta.input.parse::<TokenTree>()?]);
    }
    let span = if tokens.is_empty() {
        meta.path.span()
    } else {
        tokens.span()
    };
    let text = tokens.to_string();
    let parsed = syn::parse2::<LitInt>(tokens)
        .ok()
        .filter(|lit| lit.suffix().is_empty())
        .map(|lit| lit.base10_parse::<u32>());
    match parsed {
        Some(Ok(0)) => {
            cx.error(
                span,
                Message::new("versions start at 1: `version = 0` is not a version").help("the first version of an agent is 1 (also what it is without `version`); number the next one 2"),
            );
            Ok(None)
        }
        Some(Ok(n)) => Ok(Some(n)),
        _ => {
            // `- 1` as tokens print it, `-1` as written.
            let text = if text.starts_with('"') {
                text
            } else {
                text.replace(' ', "")
            };
            let shown = if text.is_empty() {
                "nothing".to_owned()
            } else {
                format!("`{text}`")
            };
            let help = if text.starts_with('"') {
                "write the number without quotes, like `version = 2`".to_owned()
            } else {
                format!(
                    "write a whole number from 1 to {}, like `version = 2`",
                    u32::MAX
                )
            };
            cx.error(
                span,
                Message::new(format!(
                    "expected `version = N` with N a whole number of 1 or more, found {shown}"
                ))
                .help(help),
            );
            Ok(None)
        }
    }
}

/// `migrate_from(path::to::Old, with = function, skip_signal("a", "b"))`. Every mistake
/// inside is reported; the value is kept only when it is whole.
fn migrate_from(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<MigrateFrom>> {
    const EXAMPLE: &str = "migrate_from(v1::MyAgent, with = from_v1)";
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            Message::new("expected `migrate_from(...)` with the previous version's enum and its mapping")
                .help(format!("write `{EXAMPLE}`, where `fn from_v1(old: v1::MyAgent) -> MyAgent` maps each old state")),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    let mut source: Option<Path> = None;
    let mut with = Attr::<Path>::none(WITH);
    let mut skip = Attr::<Vec<LitStr>>::none(SKIP_SIGNAL);
    let mut whole = true;
    let nested = meta.parse_nested_meta(|item| {
        let key = key_of(&item);
        let bare = item.input.is_empty() || item.input.peek(Token![,]);
        match key.as_str() {
            WITH => {
                if !with.first(cx, item.path.span()) {
                    whole = false;
                    return skip_value(item.input);
                }
                match value(cx, &item, "function", Path::parse_mod_style)? {
                    Some(f) => with.set(cx, item.path.span(), f),
                    None => whole = false,
                }
            }
            SKIP_SIGNAL => {
                if !skip.first(cx, item.path.span()) {
                    whole = false;
                    return skip_value(item.input);
                }
                match skip_signals(cx, &item)? {
                    Some(v) => skip.set(cx, item.path.span(), v),
                    None => whole = false,
                }
            }
            _ if bare && source.is_none() && !with.is_given() && !skip.is_given() => {
                source = Some(item.path.clone());
            }
            _ if bare => {
                whole = false;
                let msg = if source.is_some() {
                    Message::new(format!("`migrate_from(...)` names one source, and `{}` is a second", path_text(&item.path)))
                        .help("a version migrates from the version before it; chains compose (version 3 migrates from 2, which migrates from 1)")
                } else {
                    Message::new(format!("the previous version's enum comes first in `migrate_from(...)`, before `{}`", path_text(&item.path)))
                        .help(format!("write `{EXAMPLE}`"))
                };
                cx.error(item.path.span(), msg);
            }
            _ => {
                whole = false;
                unknown_key(cx, &item, AGENT, MIGRATE_KEYS, Some("`migrate_from(...)`"))?;
            }
        }
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
        return Ok(None);
    }
    let Some(source) = source else {
        cx.error(
            meta.path.span(),
            Message::new("`migrate_from(...)` does not name the previous version's enum")
                .help(format!("name it first: `{EXAMPLE}`")),
        );
        return Ok(None);
    };
    if !with.is_given() {
        let old = path_text(&source);
        let last = source
            .segments
            .last()
            .map(|s| names::unraw(&s.ident))
            .unwrap_or_default();
        cx.error(
            meta.path.span(),
            Message::new(format!("`migrate_from({old})` has no `with = function` mapping its states"))
                .help(format!("write `migrate_from({old}, with = from_old)` and a function `fn from_old(old: {old}) -> {last} {{ match old {{ ... }} }}` that maps each old state (an exhaustive `match`, so a forgotten state does not compile)")),
        );
        return Ok(None);
    }
    let (Some(with), true) = (with.take(), whole) else {
        return Ok(None);
    };
    Ok(Some(MigrateFrom {
        source,
        with,
        skip_signals: skip.take().unwrap_or_default(),
    }))
}

/// `skip_signal("a", "b")`: signal names, each once.
fn skip_signals(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<LitStr>>> {
    let expected = || {
        Message::new("expected `skip_signal(\"signal\", ...)` with the signals' names as strings")
            .help("write `skip_signal(\"approval\")`")
    };
    if !meta.input.peek(syn::token::Paren) {
        cx.error(meta.path.span(), expected());
        skip_value(meta.input)?;
        return Ok(None);
    }
    let content;
    syn::parenthesized!(content in meta.input);
    // Taken whole, so that a malformed list is one error, not one more for what is left.
    let tokens: proc_macro2::TokenStream = content.parse()?;
    let strings = syn::punctuated::Punctuated::<LitStr, Token![,]>::parse_terminated;
    let list = match syn::parse::Parser::parse2(strings, tokens) {
        Ok(list) => list,
        Err(e) => {
            cx.error(e.span(), expected());
            return Ok(None);
        }
    };
    if list.is_empty() {
        cx.error(
            meta.path.span(),
            Message::new("`skip_signal()` names no signal").help(
                "name the signals the migration may leave unwaited, or remove `skip_signal()`",
            ),
        );
        return Ok(None);
    }
    let mut out: Vec<LitStr> = Vec::new();
    let mut ok = true;
    for lit in list {
        let name = lit.value();
        if name.is_empty() {
            cx.error(lit.span(), "the signal name must not be empty");
            ok = false;
        } else if out.iter().any(|o| o.value() == name) {
            cx.error(
                lit.span(),
                Message::new(format!(
                    "signal `{name}` is named twice in `skip_signal(...)`"
                ))
                .help("remove this one"),
            );
            ok = false;
        } else {
            out.push(lit);
        }
    }
    Ok(ok.then_some(out))
}

/// `tools(read(A, B), write(C), hybrid(D(compensate = C)))`
fn tool_decls(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<ToolDecl>>> {
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            "expected `tools(read(...), write(...), hybrid(...))`",
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|group| {
        let kind_name = key_of(&group);
        let Some(kind) = Kind::from_name(&kind_name) else {
            let mut msg = Message::new(format!("unknown tool kind `{kind_name}`")).help("declare tools as `read(...)`, `write(...)` or `hybrid(...)`");
            if !group.input.peek(syn::token::Paren) {
                msg = Message::new(format!("`{kind_name}` has no kind")).help(format!("declare tools by kind: `tools(read({kind_name}))`, `tools(write({kind_name}))` or `tools(hybrid({kind_name}(compensate = ...)))`"));
            }
            cx.error(group.path.span(), msg);
            return skip_value(group.input);
        };
        if !group.input.peek(syn::token::Paren) {
            cx.error(
                group.path.span(),
                format!("expected `{kind_name}(ToolA, ToolB)`"),
            );
            return skip_value(group.input);
        }
        group.parse_nested_meta(|tool| {
            let Some(ident) = tool.path.segments.last().map(|s| s.ident.clone()) else {
                return Ok(());
            };
            let mut compensate = None;
            if tool.input.peek(syn::token::Paren) {
                if kind == Kind::Hybrid {
                    let mut seen = false;
                    tool.parse_nested_meta(|c| {
                        if key_of(&c) == COMPENSATE {
                            if seen {
                                cx.error(c.path.span(), "duplicate key `compensate`");
                            }
                            seen = true;
                            if let Some(v) = value(cx, &c, "WriteTool", Ident::parse)? {
                                compensate = Some(v);
                            }
                            Ok(())
                        } else {
                            unknown_key(cx, &c, AGENT, &[COMPENSATE], Some("a hybrid tool"))
                        }
                    })?;
                } else {
                    cx.error(
                        tool.path.span(),
                        Message::new(format!("only hybrid tools name a compensation; `{ident}` is declared `{kind_name}`")).help(format!("declare it as `hybrid({ident}(compensate = ...))`, or remove the parentheses")),
                    );
                    skip_value(tool.input)?;
                }
            } else if !(tool.input.is_empty() || tool.input.peek(Token![,])) {
                cx.error(tool.path.span(), format!("expected a tool type in `{kind_name}(...)`"));
                skip_value(tool.input)?;
                return Ok(());
            }
            out.push(ToolDecl {
                path: tool.path.clone(),
                ident,
                kind,
                compensate,
            });
            Ok(())
        })
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}

pub(crate) fn variant_attrs(cx: &Ctxt, attrs: &[Attribute]) -> VariantAttrs {
    let mut out = VariantAttrs {
        initial: Attr::none(INITIAL),
        terminal: Attr::none(TERMINAL),
        compensate: Attr::none(COMPENSATE),
        to: Attr::none(TO),
        tools: Attr::none(TOOLS),
        route_llm: Attr::none(ROUTE),
        wait: Attr::none(WAIT),
        wait_timeout_ms: Attr::none(WAIT_TIMEOUT_MS),
        wait_payload: Attr::none(WAIT_PAYLOAD),
        on_error: Attr::none(ON_ERROR),
        max_tool_calls: Attr::none(MAX_TOOL_CALLS),
        tools_per_answer: Attr::none(TOOLS_PER_ANSWER),
        timeout_ms: Attr::none(TIMEOUT_MS),
        decision_timeout_ms: Attr::none(DECISION_TIMEOUT_MS),
        children: Attr::none(CHILDREN),
        children_outlive: Attr::none(CHILDREN_OUTLIVE),
    };
    parse_each(cx, AGENT, attrs, |meta| {
        let span = meta.path.span();
        match key_of(&meta).as_str() {
            INITIAL => flag(cx, &meta, &mut out.initial)?,
            TERMINAL => flag(cx, &meta, &mut out.terminal)?,
            COMPENSATE => flag(cx, &meta, &mut out.compensate)?,
            TO => {
                if let Some(v) = targets(cx, &meta)? {
                    out.to.set(cx, span, v);
                }
            }
            TOOLS => {
                if meta.input.peek(syn::token::Paren) {
                    let fork = meta.input.fork();
                    let content;
                    syn::parenthesized!(content in fork);
                    let first: Option<Ident> = content.fork().parse().ok();
                    if let Some(first) = first {
                        let kind = names::unraw(&first);
                        if Kind::from_name(&kind).is_some() && content.peek2(syn::token::Paren) {
                            cx.error(
                                first.span(),
                                Message::new("tool kinds are declared on the enum, not on a state").help(format!("move `{kind}(...)` to the enum's `#[agent(tools(...))]` and list the tools here by name")),
                            );
                            skip_value(meta.input)?;
                            return Ok(());
                        }
                    }
                }
                if let Some(v) = name_list(cx, &meta, "tools")? {
                    out.tools.set(cx, span, v);
                }
            }
            ROUTE => {
                if let Some(v) = value(cx, &meta, "llm", Ident::parse)? {
                    if v == "llm" {
                        out.route_llm.set(cx, span, ());
                    } else {
                        cx.error(
                            v.span(),
                            Message::new(format!("unknown route `{v}`")).help(
                                "the only route is `route = llm`; without it the handler decides",
                            ),
                        );
                    }
                }
            }
            WAIT => {
                if let Some(v) = value(cx, &meta, "\"signal_name\"", <LitStr as Parse>::parse)? {
                    if v.value().is_empty() {
                        cx.error(v.span(), "the signal name must not be empty");
                    } else {
                        out.wait.set(cx, span, v.value());
                    }
                }
            }
            WAIT_TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.wait_timeout_ms.set(cx, span, v);
                }
            }
            WAIT_PAYLOAD => {
                if let Some(v) = value(cx, &meta, "Type", syn::Type::parse)? {
                    out.wait_payload.set(cx, span, v);
                }
            }
            ON_ERROR => {
                if let Some(v) = value(cx, &meta, "State", Ident::parse)? {
                    out.on_error.set(cx, span, v);
                }
            }
            MAX_TOOL_CALLS => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u32)? {
                    out.max_tool_calls.set(cx, span, v);
                }
            }
            TOOLS_PER_ANSWER => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u32)? {
                    out.tools_per_answer.set(cx, span, v);
                }
            }
            TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.timeout_ms.set(cx, span, v);
                }
            }
            DECISION_TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.decision_timeout_ms.set(cx, span, v);
                }
            }
            CHILDREN => {
                if let Some(v) = path_list(cx, &meta, "child agents")? {
                    out.children.set(cx, span, v);
                }
            }
            CHILDREN_OUTLIVE => flag(cx, &meta, &mut out.children_outlive)?,
            _ => {
                let key = key_of(&meta);
                if ENUM_KEYS.contains(&key.as_str()) {
                    cx.error(
                        span,
                        Message::new(format!("`{key}` belongs on the enum, not on a variant"))
                            .help("move it to the enum's `#[agent(...)]`"),
                    );
                    skip_value(meta.input)?;
                } else {
                    unknown_key(cx, &meta, AGENT, VARIANT_KEYS, Some("a variant"))?;
                }
            }
        }
        Ok(())
    });
    out
}

/// `#[agent]` where it has no meaning (fields).
pub(crate) fn reject(cx: &Ctxt, attrs: &[Attribute], place: &str) {
    for attr in attrs_in(AGENT, attrs) {
        cx.error(
            attr.path().span(),
            Message::new(format!("`#[agent(...)]` is not allowed on {place}"))
                .help("put it on the enum or on a variant"),
        );
    }
}

/// `crate = path::to::agent_core` or `crate = "path::to::agent_core"`.
fn crate_path(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Path>> {
    value(cx, meta, "path::to::agent_core", |i| {
        if i.peek(LitStr) {
            i.parse::<LitStr>()?.parse::<Path>()
        } else {
            Path::parse_mod_style(i)
        }
    })
}

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
